package webhookcert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// serveSelfSigned serves TLS handshakes with the serving certificate of ss
// on a free port of 127.0.0.1 until the test ends, and returns its address
// and a pool holding only ss's CA.
func serveSelfSigned(t *testing.T, ss *SelfSigned) (string, *x509.CertPool) {
	t.Helper()
	cfg := &tls.Config{}
	ss.TLSOption(cfg)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.(*tls.Conn).Handshake()
			_ = conn.Close()
		}
	}()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ss.CABundle) {
		t.Fatal("CABundle holds no certificate")
	}
	return ln.Addr().String(), pool
}

// TestSelfSignedHandshake: a client that trusts only CABundle completes a
// TLS handshake with a server using the serving certificate for 127.0.0.1,
// which is what the API server does when it calls the webhook URL.
func TestSelfSignedHandshake(t *testing.T) {
	ss, err := NewSelfSigned("127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	addr, pool := serveSelfSigned(t, ss)
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("handshake with the self-signed webhook failed: %v", err)
	}
	_ = conn.Close()
	// And one that does not trust it fails.
	if conn, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "127.0.0.1"}); err == nil {
		_ = conn.Close()
		t.Error("a client without the CA must not trust the certificate")
	}
	ss.Port = 9443
	if got, want := ss.URL("/mutate-pods-claim-gate"), "https://"+net.JoinHostPort("127.0.0.1", "9443")+"/mutate-pods-claim-gate"; got != want {
		t.Errorf("URL = %s, want %s", got, want)
	}
}

// The self-signed registration creates the configuration with both
// webhooks, brings an older one up to date, and leaves one that differs
// only by the API server's defaults alone.
func TestRegistrar(t *testing.T) {
	ss, err := NewSelfSigned("127.0.0.1", 9443)
	if err != nil {
		t.Fatal(err)
	}
	hooks := func(clientFor func(path string) admissionregistrationv1.WebhookClientConfig) []admissionregistrationv1.MutatingWebhook {
		return []admissionregistrationv1.MutatingWebhook{
			{Name: gateWebhook, ClientConfig: clientFor("/mutate-pods-claim-gate")},
			{Name: claimsWebhook, ClientConfig: clientFor("/mutate-claims-finalizer")},
		}
	}
	g := &Registrar{SelfSigned: ss, Webhooks: hooks}
	want := hooks(func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(ss.URL(path)), CABundle: ss.CABundle}
	})
	defaulted := func(hooks []admissionregistrationv1.MutatingWebhook) []admissionregistrationv1.MutatingWebhook {
		var out []admissionregistrationv1.MutatingWebhook
		for _, h := range hooks {
			h.ObjectSelector = &metav1.LabelSelector{}
			h.Rules = slices.Clone(h.Rules)
			for i := range h.Rules {
				h.Rules[i].Scope = ptr.To(admissionregistrationv1.AllScopes)
			}
			out = append(out, h)
		}
		return out
	}
	existing := func(hooks []admissionregistrationv1.MutatingWebhook) []client.Object {
		return []client.Object{&admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: SelfSignedWebhookConfigName}, Webhooks: hooks}}
	}
	for _, tc := range []struct {
		name      string
		existing  []client.Object
		wantWrite string // "create", "update" or ""
	}{
		{name: "none yet: created", wantWrite: "create"},
		{name: "an older configuration with the pod gate only: updated", existing: existing(defaulted(want[:1])), wantWrite: "update"},
		{name: "another replica's URL: updated", existing: existing(defaulted(hooks(func(path string) admissionregistrationv1.WebhookClientConfig {
			return admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1" + path)}
		}))), wantWrite: "update"},
		{name: "the same after the API server's defaults: not written", existing: existing(defaulted(want))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var wrote []string
			c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(tc.existing...).
				WithInterceptorFuncs(interceptor.Funcs{
					Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
						wrote = append(wrote, "create")
						return c.Create(ctx, obj, opts...)
					},
					Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
						wrote = append(wrote, "update")
						return c.Update(ctx, obj, opts...)
					},
				}).Build()
			g.Client, g.APIReader = c, c
			if err := g.apply(context.Background(), want); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(wrote, ","); got != tc.wantWrite {
				t.Errorf("writes %q, want %q", got, tc.wantWrite)
			}
			var cfg admissionregistrationv1.MutatingWebhookConfiguration
			if err := c.Get(context.Background(), client.ObjectKey{Name: SelfSignedWebhookConfigName}, &cfg); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, w := range cfg.Webhooks {
				names = append(names, w.Name)
			}
			if !slices.Equal(names, ourWebhooks) {
				t.Errorf("registered webhooks %v, want %v", names, ourWebhooks)
			}
		})
	}
}
