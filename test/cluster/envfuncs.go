package cluster

import (
	"context"
	"fmt"

	"sigs.k8s.io/e2e-framework/klient"
	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
)

// contextKey is the key under which Setup stores the running Cluster.
type contextKey struct{}

// Setup returns an e2e-framework environment function that starts a
// cluster with opts, points cfg at it (kubeconfig file and client) and
// stores it in the context for FromContext. Pair it with Finish.
func Setup(opts Options) env.Func {
	return func(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
		c, err := Start(ctx, opts)
		if err != nil {
			return ctx, fmt.Errorf("start local cluster: %w", err)
		}
		client, err := klient.New(c.Config)
		if err != nil {
			_ = c.Stop()
			return ctx, fmt.Errorf("e2e client for the local cluster: %w", err)
		}
		cfg.WithKubeconfigFile(c.KubeconfigPath).WithClient(client)
		return context.WithValue(ctx, contextKey{}, c), nil
	}
}

// Finish returns an environment function that stops the cluster Setup
// started. It is a no-op when Setup failed.
func Finish() env.Func {
	return func(ctx context.Context, _ *envconf.Config) (context.Context, error) {
		c := FromContext(ctx)
		if c == nil {
			return ctx, nil
		}
		if err := c.Stop(); err != nil {
			return ctx, fmt.Errorf("stop local cluster: %w", err)
		}
		return ctx, nil
	}
}

// FromContext returns the cluster that Setup stored, or nil.
func FromContext(ctx context.Context) *Cluster {
	c, _ := ctx.Value(contextKey{}).(*Cluster)
	return c
}
