package webhookcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// The operator's two webhooks in the tests' configuration.
const (
	gateWebhook   = "claim-gate.drastack.io"
	claimsWebhook = "claim-finalizer.drastack.io"
)

// ourWebhooks are the names the injectors under test own.
var ourWebhooks = []string{gateWebhook, claimsWebhook}

// hook is a webhook called through config/default's Service.
func hook(name, path string, caBundle []byte) admissionregistrationv1.MutatingWebhook {
	return admissionregistrationv1.MutatingWebhook{Name: name, ClientConfig: admissionregistrationv1.WebhookClientConfig{
		Service:  &admissionregistrationv1.ServiceReference{Namespace: "drastack-system", Name: DefaultWebhookServiceName, Path: ptr.To(path)},
		CABundle: caBundle,
	}}
}

// webhookConfig is config/default's configuration as `make deploy` creates
// it: no caBundle yet, and another webhook before ours so that the patch
// must find ours by name (the pod gate, then the claim webhook).
func webhookConfig(caBundle []byte) *admissionregistrationv1.MutatingWebhookConfiguration {
	other := hook("other.example.io", "/other", []byte("other webhook's own bundle"))
	ours := hook(gateWebhook, "/mutate-pods-claim-gate", caBundle)
	claims := hook(claimsWebhook, "/mutate-claims-finalizer", caBundle)
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: DefaultWebhookConfigName},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{other, ours, claims},
	}
}

// caPEM makes a self-signed CA certificate expiring at notAfter.
func caPEM(t *testing.T, notAfter time.Time) []byte {
	t.Helper()
	ss, err := newSelfSigned([]string{"ca.test"}, time.Until(notAfter))
	if err != nil {
		t.Fatal(err)
	}
	return ss.CABundle
}

func pemCount(b []byte) int {
	n := 0
	for rest := b; ; n++ {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return n
		}
	}
}

func TestCABundleInjector(t *testing.T) {
	ours := caPEM(t, time.Now().Add(time.Hour))
	other := caPEM(t, time.Now().Add(time.Hour))
	expired := caPEM(t, time.Now().Add(-time.Minute))
	var many []byte
	for range maxOtherCAs + 2 {
		many = append(many, caPEM(t, time.Now().Add(time.Hour))...)
	}
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"}, DefaultWebhookConfigName, errors.New("changed"))

	for _, tc := range []struct {
		name       string
		existing   []client.Object
		patchErr   error
		wantWrite  bool
		wantErr    string
		wantBundle func(t *testing.T, got []byte)
	}{
		{
			name:      "make deploy: no caBundle yet, ours is set",
			existing:  []client.Object{webhookConfig(nil)},
			wantWrite: true,
			wantBundle: func(t *testing.T, got []byte) {
				if !bytes.Equal(got, ours) {
					t.Errorf("caBundle = %q, want ours only", got)
				}
			},
		},
		{
			name:     "ours is there already, after another replica's: nothing is written",
			existing: []client.Object{webhookConfig(append(append([]byte{}, other...), ours...))},
		},
		{
			name:      "another replica's CA stays trusted next to ours, an expired one goes",
			existing:  []client.Object{webhookConfig(append(append([]byte{}, other...), expired...))},
			wantWrite: true,
			wantBundle: func(t *testing.T, got []byte) {
				if want := append(append([]byte{}, ours...), other...); !bytes.Equal(got, want) {
					t.Errorf("caBundle = %q, want ours then the other replica's", got)
				}
			},
		},
		{
			name:      "at most maxOtherCAs other CAs are kept",
			existing:  []client.Object{webhookConfig(many)},
			wantWrite: true,
			wantBundle: func(t *testing.T, got []byte) {
				if n := pemCount(got); n != 1+maxOtherCAs {
					t.Errorf("caBundle holds %d certificates, want %d", n, 1+maxOtherCAs)
				}
				if !bytes.HasPrefix(got, ours) {
					t.Errorf("ours must come first")
				}
			},
		},
		{
			name:    "the configuration is missing (config/default not applied): an error to retry",
			wantErr: "not found",
		},
		{
			name: "the configuration lacks our webhook: an error, nothing written",
			existing: []client.Object{func() client.Object {
				c := webhookConfig(nil)
				c.Webhooks = c.Webhooks[:1]
				return c
			}()},
			wantErr: "has no webhook " + gateWebhook,
		},
		{
			name: "a configuration from before the claim webhook: the pod gate's is set",
			existing: []client.Object{func() client.Object {
				c := webhookConfig(nil)
				c.Webhooks = c.Webhooks[:2]
				return c
			}()},
			wantWrite: true,
			wantBundle: func(t *testing.T, got []byte) {
				if !bytes.Equal(got, ours) {
					t.Errorf("caBundle = %q, want ours only", got)
				}
			},
		},
		{
			name:      "a conflicting write: an error to retry",
			existing:  []client.Object{webhookConfig(nil)},
			patchErr:  conflict,
			wantWrite: true,
			wantErr:   "changed",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writes := 0
			c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(tc.existing...).
				WithInterceptorFuncs(interceptor.Funcs{
					Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
						writes++
						if tc.patchErr != nil {
							return tc.patchErr
						}
						return c.Patch(ctx, obj, patch, opts...)
					},
					Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error {
						t.Error("the injector must only patch")
						return nil
					},
				}).Build()
			inj := &CABundleInjector{Client: c, APIReader: c, ConfigName: DefaultWebhookConfigName, Webhooks: ourWebhooks, CABundle: ours}
			wrote, err := inj.Inject(context.Background())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if (writes > 0) != tc.wantWrite || (err == nil && wrote != tc.wantWrite) {
				t.Errorf("writes = %d, reported %v, want a write: %v", writes, wrote, tc.wantWrite)
			}
			if tc.wantBundle == nil {
				return
			}
			var got admissionregistrationv1.MutatingWebhookConfiguration
			if err := c.Get(context.Background(), client.ObjectKey{Name: DefaultWebhookConfigName}, &got); err != nil {
				t.Fatal(err)
			}
			tc.wantBundle(t, got.Webhooks[1].ClientConfig.CABundle)
			if len(got.Webhooks) > 2 && !bytes.Equal(got.Webhooks[2].ClientConfig.CABundle, got.Webhooks[1].ClientConfig.CABundle) {
				t.Errorf("the claim webhook's caBundle %q differs from the pod gate's %q", got.Webhooks[2].ClientConfig.CABundle, got.Webhooks[1].ClientConfig.CABundle)
			}
			if string(got.Webhooks[0].ClientConfig.CABundle) != "other webhook's own bundle" {
				t.Errorf("the other webhook's caBundle was changed to %q", got.Webhooks[0].ClientConfig.CABundle)
			}
			if want := webhookConfig(nil).Webhooks[1].MatchConditions; len(got.Webhooks[1].MatchConditions) != len(want) {
				t.Errorf("the patch touched more than the caBundle: %+v", got.Webhooks[1])
			}
		})
	}
}

// TestServiceSelfSignedHandshake: the API server calls the webhook at
// https://<service>.<namespace>.svc:443 and trusts only the caBundle.
func TestServiceSelfSignedHandshake(t *testing.T) {
	ss, err := NewServiceSelfSigned(DefaultWebhookServiceName, "drastack-system", 9443)
	if err != nil {
		t.Fatal(err)
	}
	addr, pool := serveSelfSigned(t, ss)
	for _, name := range []string{DefaultWebhookServiceName + ".drastack-system.svc", DefaultWebhookServiceName + ".drastack-system.svc.cluster.local"} {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: name})
		if err != nil {
			t.Errorf("handshake as %s: %v", name, err)
			continue
		}
		_ = conn.Close()
	}
	if conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "other.default.svc"}); err == nil {
		_ = conn.Close()
		t.Error("the certificate must not be valid for another Service")
	}
	if _, err := NewServiceSelfSigned("", "drastack-system", 9443); err == nil {
		t.Error("a certificate without a Service name must be refused")
	}
}

// TestCABundleInjectorWatch: a configuration whose caBundle someone reset
// gets the CA again at once when the watch reports the change, not at the
// next Interval (an hour here).
func TestCABundleInjectorWatch(t *testing.T) {
	ours := caPEM(t, time.Now().Add(time.Hour))
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(webhookConfig(nil)).Build()
	fw := watch.NewFake()
	opened := make(chan struct{}, 4)
	inj := &CABundleInjector{Client: c, APIReader: c, ConfigName: DefaultWebhookConfigName, Webhooks: ourWebhooks, CABundle: ours, Interval: time.Hour,
		Watch: func(context.Context) (watch.Interface, error) {
			opened <- struct{}{}
			return fw, nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if inj.Injected() {
		t.Fatal("Injected before the first check: the replica would be ready with its CA unknown to the API server")
	}
	done := make(chan error)
	go func() { done <- inj.Start(ctx) }()
	bundle := func() []byte {
		var cfg admissionregistrationv1.MutatingWebhookConfiguration
		if err := c.Get(ctx, client.ObjectKey{Name: DefaultWebhookConfigName}, &cfg); err != nil {
			t.Fatal(err)
		}
		return cfg.Webhooks[1].ClientConfig.CABundle
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10 s (the interval is an hour)", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("first injection", func() bool { return holdsCA(bundle(), ours) })
	waitFor("Injected after the first injection", inj.Injected)
	<-opened

	// kubectl apply of config/default resets the caBundle.
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: DefaultWebhookConfigName}, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Webhooks[1].ClientConfig.CABundle = nil
	if err := c.Update(ctx, &cfg); err != nil {
		t.Fatal(err)
	}
	fw.Modify(&cfg)
	waitFor("injection after the reset", func() bool { return holdsCA(bundle(), ours) })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start: %v", err)
	}
}
