package claims

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"reflect"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	claimspkg "github.com/drastack/drastack/internal/claims"
)

// TestMarkerMatchesGateWebhook keeps the +kubebuilder:webhook marker (from
// which controller-gen writes config/webhook/manifests.yaml, the bundle's
// webhook definition) and GateWebhook (what a self-signed operator
// registers) the same webhook.
func TestMarkerMatchesGateWebhook(t *testing.T) {
	data, err := os.ReadFile("../../../config/webhook/manifests.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var generated admissionregistrationv1.MutatingWebhookConfiguration
	if err := yaml.Unmarshal(data, &generated); err != nil {
		t.Fatal(err)
	}
	if len(generated.Webhooks) != 1 {
		t.Fatalf("config/webhook/manifests.yaml has %d webhooks, want 1", len(generated.Webhooks))
	}
	got := generated.Webhooks[0]
	if got.ClientConfig.Service == nil || got.ClientConfig.Service.Path == nil || *got.ClientConfig.Service.Path != WebhookPath {
		t.Errorf("generated webhook path = %+v, want %s", got.ClientConfig.Service, WebhookPath)
	}
	got.ClientConfig = admissionregistrationv1.WebhookClientConfig{}
	want := GateWebhook(admissionregistrationv1.WebhookClientConfig{})
	if !reflect.DeepEqual(got, want) {
		t.Errorf("marker-generated webhook\n%+v\ndiffers from GateWebhook\n%+v\n(run make manifests after changing either)", got, want)
	}
	if *want.FailurePolicy != admissionregistrationv1.Ignore {
		t.Error("the pod webhook must fail open (see the comment in webhook.go)")
	}
}

func TestGatePatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		gates []corev1.PodSchedulingGate
		op    string
		path  string
	}{
		{"no gates yet: the list is created", nil, "add", "/spec/schedulingGates"},
		{"other gates: ours is appended", []corev1.PodSchedulingGate{{Name: "other"}}, "add", "/spec/schedulingGates/-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := gatePatch(&corev1.Pod{Spec: corev1.PodSpec{SchedulingGates: tc.gates}})
			if p.Operation != tc.op || p.Path != tc.path {
				t.Errorf("patch = %s %s, want %s %s", p.Operation, p.Path, tc.op, tc.path)
			}
			raw, err := p.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(raw), claimspkg.SchedulingGate) {
				t.Errorf("patch %s does not add %s", raw, claimspkg.SchedulingGate)
			}
		})
	}
}

// TestSelfSignedHandshake: a client that trusts only CABundle completes a
// TLS handshake with a server using the serving certificate for 127.0.0.1,
// which is what the API server does when it calls the webhook URL.
func TestSelfSignedHandshake(t *testing.T) {
	ss, err := NewSelfSigned("127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{}
	ss.TLSOption(cfg)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
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
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("handshake with the self-signed webhook failed: %v", err)
	}
	_ = conn.Close()
	// And one that does not trust it fails.
	if conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{ServerName: "127.0.0.1"}); err == nil {
		_ = conn.Close()
		t.Error("a client without the CA must not trust the certificate")
	}
	ss.Port = 9443
	if got, want := ss.URL(), "https://"+net.JoinHostPort("127.0.0.1", "9443")+WebhookPath; got != want {
		t.Errorf("URL = %s, want %s", got, want)
	}
}
