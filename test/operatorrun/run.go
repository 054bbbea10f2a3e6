// Package operatorrun runs the operator inside a test process as it is
// deployed, for the e2e suites (test/e2e and test/e2e/realnode).
package operatorrun

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/test/cluster"
)

// Start runs the operator in this process, exactly as cmd/manager wires
// it, with the credentials of id: the ServiceAccount and RBAC that
// config/default installs, through a token from the TokenRequest API,
// never an administrator (Cluster.DeployOperatorIdentity checks that).
// Every request the API server refuses it for lack of permission is
// recorded (cluster.WithRefusalCounter).
//
// stop ends the operator and returns what went wrong: the manager's
// error, and the refused requests, since the RBAC the operator ships with
// must be enough for everything it does. Only its first call does that;
// later calls return nil.
func Start(ctx context.Context, id *cluster.OperatorIdentity, o operator.Options) (stop func() error, err error) {
	cfg, refused := cluster.WithRefusalCounter(id.Config)
	mgr, err := operator.New(cfg, o)
	if err != nil {
		return nil, err
	}
	opCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(opCtx) }()
	var once sync.Once
	return func() error {
		var errs []error
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				errs = append(errs, fmt.Errorf("operator: %w", err))
			}
			if got := refused.List(); len(got) > 0 {
				errs = append(errs, fmt.Errorf("the API server refused %d request(s) of the operator running as %s; its RBAC lacks: %s",
					len(got), id.Username, strings.Join(got, "; ")))
			}
		})
		return errors.Join(errs...)
	}, nil
}
