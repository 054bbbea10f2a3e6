package claims

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// SelfSignedWebhookConfigName names the MutatingWebhookConfiguration a
// self-signed operator registers. OLM names its own after the CSV; the two
// never meet.
const SelfSignedWebhookConfigName = "drastack-claim-gate"

// selfSignedValidity is long enough for any demo or test run; the
// certificate is made anew at every start.
const selfSignedValidity = 7 * 24 * time.Hour

// SelfSigned is a CA and a serving certificate made at startup, for an
// operator that runs outside the cluster (tests, `make demo`): the API
// server reaches its webhook at https://Host:Port and trusts CABundle.
// In a cluster, OLM provides both from the bundle's webhookdefinitions.
type SelfSigned struct {
	// Host and Port the webhook server listens on and the API server
	// calls.
	Host string
	Port int
	// CABundle is the PEM CA certificate for the webhook's clientConfig.
	CABundle []byte
	cert     tls.Certificate
}

// NewSelfSigned makes a CA and a serving certificate for host (an IP
// address or a DNS name) valid from now for a week.
func NewSelfSigned(host string, port int) (*SelfSigned, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "drastack webhook CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(selfSignedValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(selfSignedValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode serving key: %w", err)
	}
	cert, err := tls.X509KeyPair(
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		return nil, fmt.Errorf("load serving key pair: %w", err)
	}
	return &SelfSigned{
		Host:     host,
		Port:     port,
		CABundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		cert:     cert,
	}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// TLSOption makes the webhook server present the serving certificate
// (webhook.Options.TLSOpts), instead of reading one from a folder.
func (s *SelfSigned) TLSOption(cfg *tls.Config) {
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &s.cert, nil }
}

// URL is where the API server calls the webhook.
func (s *SelfSigned) URL() string {
	u := url.URL{Scheme: "https", Host: net.JoinHostPort(s.Host, strconv.Itoa(s.Port)), Path: WebhookPath}
	return u.String()
}

// Registrar creates or updates the MutatingWebhookConfiguration of a
// self-signed operator once the manager runs. It runs on every replica:
// each serves the webhook.
type Registrar struct {
	// Client writes the configuration; APIReader reads it (the operator
	// does not cache webhook configurations).
	Client     client.Client
	APIReader  client.Reader
	SelfSigned *SelfSigned
}

// NeedLeaderElection is false: the webhook is served by every replica.
func (g *Registrar) NeedLeaderElection() bool { return false }

// Start registers the webhook, retrying until it succeeds or ctx ends.
func (g *Registrar) Start(ctx context.Context) error {
	url := g.SelfSigned.URL()
	want := GateWebhook(admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: g.SelfSigned.CABundle})
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if err := g.apply(ctx, want); err != nil {
			log.FromContext(ctx).Error(err, "Registering the pod webhook failed; retrying")
			return false, nil
		}
		return true, nil
	})
	if err != nil && ctx.Err() == nil {
		return err
	}
	log.FromContext(ctx).Info("Registered the pod webhook", "configuration", SelfSignedWebhookConfigName, "url", url)
	return nil
}

func (g *Registrar) apply(ctx context.Context, want admissionregistrationv1.MutatingWebhook) error {
	var cur admissionregistrationv1.MutatingWebhookConfiguration
	err := g.APIReader.Get(ctx, client.ObjectKey{Name: SelfSignedWebhookConfigName}, &cur)
	if apierrors.IsNotFound(err) {
		cur = admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: SelfSignedWebhookConfigName, Labels: map[string]string{"app.kubernetes.io/part-of": "drastack"}},
			Webhooks:   []admissionregistrationv1.MutatingWebhook{want},
		}
		return g.Client.Create(ctx, &cur)
	}
	if err != nil {
		return err
	}
	if len(cur.Webhooks) == 1 && bytes.Equal(cur.Webhooks[0].ClientConfig.CABundle, want.ClientConfig.CABundle) &&
		cur.Webhooks[0].ClientConfig.URL != nil && *cur.Webhooks[0].ClientConfig.URL == *want.ClientConfig.URL {
		return nil
	}
	cur.Webhooks = []admissionregistrationv1.MutatingWebhook{want}
	return g.Client.Update(ctx, &cur)
}
