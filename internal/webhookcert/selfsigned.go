package webhookcert

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/drastack/drastack/internal/pki"
)

// SelfSignedWebhookConfigName names the MutatingWebhookConfiguration a
// self-signed operator outside the cluster registers. OLM names its own
// after the CSV, config/default its own ConfigName; they never meet.
const SelfSignedWebhookConfigName = "drastack-claim-gate"

// Names config/default gives the webhook's objects (kustomize's namePrefix
// drastack- on config/webhook); a test builds config/default and checks.
const (
	// DefaultWebhookConfigName is config/default's
	// MutatingWebhookConfiguration, whose caBundle an operator without a
	// mounted certificate sets.
	DefaultWebhookConfigName = "drastack-mutating-webhook-configuration"
	// DefaultWebhookServiceName is the Service in front of the webhook.
	DefaultWebhookServiceName = "drastack-webhook-service"
)

// The caBundle injector reads and patches config/default's webhook
// configuration, that one object only (CABundleInjector, make deploy
// without OLM).
// It watches it too (WatchConfiguration: a watch by name, no list), so
// that a reset caBundle is set again at once.
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=get;watch;patch,resourceNames=drastack-mutating-webhook-configuration

// Certificate lifetimes. The keys live only in the operator's memory and a
// new pair is made at every start, so a certificate must only outlive the
// process that made it.
const (
	// selfSignedValidity is long enough for any demo or test run.
	selfSignedValidity = 7 * 24 * time.Hour
	// serviceCertValidity covers an operator pod that runs for years.
	serviceCertValidity = 5 * 365 * 24 * time.Hour
)

// SelfSigned is a CA and a serving certificate made at startup, for an
// operator whose webhook certificate is not provided by OLM: one outside
// the cluster (tests, `make demo`), which the API server calls at
// https://Host:Port, or one installed by `make deploy`, which it calls
// through the webhook Service. Either way the API server trusts CABundle.
type SelfSigned struct {
	// Host and Port the webhook server listens on and, outside the
	// cluster, the API server calls.
	Host string
	Port int
	// CABundle is the PEM CA certificate for the webhook's clientConfig.
	CABundle []byte
	cert     tls.Certificate
}

// NewSelfSigned makes a CA and a serving certificate for host (an IP
// address or a DNS name) valid from now for a week, for an operator outside
// the cluster.
func NewSelfSigned(host string, port int) (*SelfSigned, error) {
	ss, err := newSelfSigned([]string{host}, selfSignedValidity)
	if err != nil {
		return nil, err
	}
	ss.Host, ss.Port = host, port
	return ss, nil
}

// NewServiceSelfSigned makes a CA and a serving certificate for the DNS
// names of Service service in namespace, for an operator in the cluster
// without a mounted certificate. The webhook server listens on all
// addresses at port.
//
// extraHosts (IP addresses or DNS names) are added to the certificate, for
// an operator that the API server reaches by a webhook URL instead (an
// operator run as a process of the machine, as the e2e tests and make demo
// run it, behind a configuration installed with a URL).
func NewServiceSelfSigned(service, namespace string, port int, extraHosts ...string) (*SelfSigned, error) {
	if service == "" || namespace == "" {
		return nil, fmt.Errorf("webhook service %q in namespace %q: both are needed for the certificate", service, namespace)
	}
	base := service + "." + namespace + ".svc"
	hosts := []string{base, base + ".cluster.local", service + "." + namespace, service}
	for _, h := range extraHosts {
		if h != "" {
			hosts = append(hosts, h)
		}
	}
	ss, err := newSelfSigned(hosts, serviceCertValidity)
	if err != nil {
		return nil, err
	}
	ss.Port = port
	return ss, nil
}

// newSelfSigned makes a CA and a certificate for hosts (IP addresses or
// DNS names, the first one is the subject) valid for validity.
func newSelfSigned(hosts []string, validity time.Duration) (*SelfSigned, error) {
	ca, err := pki.NewCA("drastack webhook CA", validity)
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := ca.Issue(pki.Leaf{CommonName: hosts[0], Hosts: hosts, Server: true, Validity: validity})
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load serving key pair: %w", err)
	}
	return &SelfSigned{CABundle: ca.PEM, cert: cert}, nil
}

// TLSOption makes the webhook server present the serving certificate
// (webhook.Options.TLSOpts), instead of reading one from a folder.
func (s *SelfSigned) TLSOption(cfg *tls.Config) {
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &s.cert, nil }
}

// URL is where the API server calls the webhook served at path.
func (s *SelfSigned) URL(path string) string {
	u := url.URL{Scheme: "https", Host: net.JoinHostPort(s.Host, strconv.Itoa(s.Port)), Path: path}
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
	// Webhooks returns the webhooks to register, given how the API server
	// reaches the one served at a path.
	Webhooks func(clientFor func(path string) admissionregistrationv1.WebhookClientConfig) []admissionregistrationv1.MutatingWebhook

	registered atomic.Bool
}

// Registered reports whether the configuration is written: the API server
// calls this replica from then on.
func (g *Registrar) Registered() bool { return g.registered.Load() }

// NeedLeaderElection is false: the webhook is served by every replica.
func (g *Registrar) NeedLeaderElection() bool { return false }

// Start registers the webhook, retrying until it succeeds or ctx ends.
func (g *Registrar) Start(ctx context.Context) error {
	want := g.Webhooks(func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(g.SelfSigned.URL(path)), CABundle: g.SelfSigned.CABundle}
	})
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if err := g.apply(ctx, want); err != nil {
			log.FromContext(ctx).Error(err, "Registering the webhooks failed; retrying")
			return false, nil
		}
		return true, nil
	})
	if err != nil && ctx.Err() == nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	g.registered.Store(true)
	log.FromContext(ctx).Info("Registered the webhooks", "configuration", SelfSignedWebhookConfigName, "url", g.SelfSigned.URL(""))
	return nil
}

func (g *Registrar) apply(ctx context.Context, want []admissionregistrationv1.MutatingWebhook) error {
	var cur admissionregistrationv1.MutatingWebhookConfiguration
	err := g.APIReader.Get(ctx, client.ObjectKey{Name: SelfSignedWebhookConfigName}, &cur)
	if apierrors.IsNotFound(err) {
		cur = admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: SelfSignedWebhookConfigName, Labels: map[string]string{"app.kubernetes.io/part-of": "drastack"}},
			Webhooks:   want,
		}
		return g.Client.Create(ctx, &cur)
	}
	if err != nil {
		return err
	}
	// Compared after undoing the API server's defaulting of want's unset
	// fields (objectSelector, rules[].scope), so that an unchanged
	// registration is not written.
	if len(cur.Webhooks) == len(want) {
		same := true
		for i := range want {
			same = same && equality.Semantic.DeepEqual(undefaulted(cur.Webhooks[i]), want[i])
		}
		if same {
			return nil
		}
	}
	cur.Webhooks = want
	return g.Client.Update(ctx, &cur)
}

// undefaulted is w without the values the API server fills in for fields
// Webhooks leaves unset: an empty objectSelector and the scope "*" of a
// rule.
func undefaulted(w admissionregistrationv1.MutatingWebhook) admissionregistrationv1.MutatingWebhook {
	if w.ObjectSelector != nil && len(w.ObjectSelector.MatchLabels) == 0 && len(w.ObjectSelector.MatchExpressions) == 0 {
		w.ObjectSelector = nil
	}
	w.Rules = slices.Clone(w.Rules)
	for i := range w.Rules {
		if s := w.Rules[i].Scope; s != nil && *s == admissionregistrationv1.AllScopes {
			w.Rules[i].Scope = nil
		}
	}
	return w
}
