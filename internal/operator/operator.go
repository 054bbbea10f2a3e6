// Package operator wires every drastack controller into one
// controller-runtime manager. cmd/manager and the e2e tests both use it, so
// the tests run exactly what ships.
package operator

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/admissionmetrics"
	"github.com/drastack/drastack/internal/claimwebhook"
	"github.com/drastack/drastack/internal/clusterprobe"
	claimsctrl "github.com/drastack/drastack/internal/controller/claims"
	driverctrl "github.com/drastack/drastack/internal/controller/driver"
	poolctrl "github.com/drastack/drastack/internal/controller/pool"
	publisherctrl "github.com/drastack/drastack/internal/controller/publisher"
	"github.com/drastack/drastack/internal/controller/specgate"
	stackctrl "github.com/drastack/drastack/internal/controller/stack"
	"github.com/drastack/drastack/internal/driver"
	"github.com/drastack/drastack/internal/eventlimit"
	"github.com/drastack/drastack/internal/webhookcert"
)

// Options configure the operator.
type Options struct {
	// MetricsAddr is the Prometheus endpoint address; "0" disables it.
	MetricsAddr string
	// MetricsSecure serves the metrics over HTTPS to callers the API
	// server authenticates (TokenReview) and authorizes (a
	// SubjectAccessReview for GET on the non-resource URL /metrics), as
	// config/rbac's metrics-reader ClusterRole grants. Off, the endpoint
	// is plain HTTP for anyone who reaches it.
	MetricsSecure bool
	// MetricsCertDir holds tls.crt and tls.key of the secure metrics
	// endpoint; without them there the operator serves a self-signed
	// certificate it makes at startup (controller-runtime's default).
	MetricsCertDir string
	// ProbeAddr is the /healthz and /readyz address; "0" disables it.
	ProbeAddr string
	// LeaderElect enables leader election.
	LeaderElect bool
	// LeaderElectionNamespace holds the lease; default: the pod's namespace.
	LeaderElectionNamespace string
	// ProbeNamespace is an existing namespace for dry-run claims of the
	// cluster probe.
	ProbeNamespace string
	// ShutdownTimeout is how long reconciles may take to finish on shutdown.
	ShutdownTimeout time.Duration
	// ClusterProbeInterval is how long a cluster probe is trusted; default
	// stackctrl.DefaultProbeInterval.
	ClusterProbeInterval time.Duration
	// PoolWorkers is how many device pools are validated in parallel;
	// default poolctrl.DefaultWorkers.
	PoolWorkers int
	// DriverPublishGrace is how long a ready kubelet plugin may publish no
	// ResourceSlices before it is reported; default
	// driver.DefaultPublishGrace.
	DriverPublishGrace time.Duration
	// DriverRolloutTimeout is how long a driver rollout may make no
	// progress before it is reported as stalled; default
	// driver.DefaultRolloutTimeout.
	DriverRolloutTimeout time.Duration
	// SkipNameValidation lets one process create several managers (tests
	// that start the operator more than once): controller-runtime refuses
	// a second controller of the same name in a process otherwise.
	SkipNameValidation bool
	// WebhookPort serves the pod admission webhook that holds pods until
	// the operator allocated their claims; 0 turns the webhook off (pods
	// are then never gated).
	WebhookPort int
	// WebhookHost is the address the webhook listens on; default all
	// addresses, or 127.0.0.1 with WebhookSelfSigned. Set, it is also
	// named in the certificate the operator makes without a mounted one,
	// so an API server can call the webhook by a URL to it.
	WebhookHost string
	// WebhookCertDir holds tls.crt and tls.key (OLM mounts them); default
	// controller-runtime's. Without them there (make deploy), the operator
	// makes a CA and a serving certificate for WebhookService at startup
	// and sets the caBundle of WebhookConfiguration. Unused with
	// WebhookSelfSigned.
	WebhookCertDir string
	// WebhookSelfSigned makes a CA and serving certificate at startup and
	// registers the MutatingWebhookConfiguration with a URL to
	// WebhookHost:WebhookPort, for an operator that runs outside the
	// cluster (tests, make demo).
	WebhookSelfSigned bool
	// WebhookService is the Service in front of the webhook, named in the
	// certificate the operator makes without a mounted one; default
	// webhookcert.DefaultWebhookServiceName (config/default's).
	WebhookService string
	// WebhookConfiguration is the MutatingWebhookConfiguration whose
	// caBundle the operator sets without a mounted certificate; default
	// webhookcert.DefaultWebhookConfigName (config/default's).
	WebhookConfiguration string
	// Namespace is the operator's own namespace: the webhook Service's,
	// and left out of a self-registered webhook's namespaceSelector;
	// default the pod's (the service account's namespace file), else
	// claimwebhook.DefaultNamespace.
	Namespace string
	// ClaimStatusInterval is how often the DRAStack's claim status is
	// refreshed; default claimsctrl.DefaultStatusInterval.
	ClaimStatusInterval time.Duration
	// KubeAPIQPS and KubeAPIBurst limit the operator's requests to the API
	// server on the client side; default DefaultKubeAPIQPS and
	// DefaultKubeAPIBurst, whatever the rest config says. A negative QPS
	// turns the client-side limit off (API Priority and Fairness still
	// applies on the server).
	KubeAPIQPS   float32
	KubeAPIBurst int
	// ClaimWorkers is how many immediate claims are allocated at once
	// (their writes overlap; decisions are serialized on the ledger);
	// default the claim controller's.
	ClaimWorkers int
	// MemoryLimit is the memory limit of the operator's container, in
	// bytes (the Deployment passes its limits.memory through the downward
	// API); 0: none. The Go runtime's soft memory limit is set to 90% of
	// it unless GOMEMLIMIT is set, so that the collector works harder
	// before the container would be killed. It is a setting of the whole
	// process.
	MemoryLimit int64
	// EventQPS and EventBurst bound the Normal Events each controller
	// emits (package eventlimit); default eventlimit.DefaultQPS and
	// eventlimit.DefaultBurst. Warnings are never held back.
	EventQPS   float32
	EventBurst int
	// MapperProvider maps kinds to API resources; default
	// controller-runtime's, which asks the API server. The metric catalog
	// of the observability tests (test/opmetrics) builds the operator
	// with a static one, without an API server.
	MapperProvider func(c *rest.Config, httpClient *http.Client) (meta.RESTMapper, error)
	// AdmissionPolicies is AdmissionPoliciesInstall (the default when
	// empty: the operator applies its admission policies at start and
	// starts no controller before the API server enforces them) or
	// AdmissionPoliciesOff.
	AdmissionPolicies string
}

// Client-side rate limits of the operator. An allocation costs 1.6
// requests in a burst (its status write, a DevicePool status write per
// pool and batch, Events held back by package eventlimit; make
// bench-scale at 1,000 nodes) and a pod's placement one more (its gate):
// 100 per second capped a 1,000-claim burst at 59 claims a second, while
// no client-side limit reached 96 with the same workers. 300 leaves room
// for 190 claims a second; API Priority and Fairness still shares the
// API server with everyone else on the server side.
const (
	DefaultKubeAPIQPS   = 300
	DefaultKubeAPIBurst = 600
)

// rateLimited returns a copy of cfg with the options' client-side limits.
func rateLimited(cfg *rest.Config, o Options) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.QPS, out.Burst = DefaultKubeAPIQPS, DefaultKubeAPIBurst
	if o.KubeAPIQPS != 0 {
		out.QPS = o.KubeAPIQPS
	}
	if o.KubeAPIBurst > 0 {
		out.Burst = o.KubeAPIBurst
	}
	if out.QPS < 0 {
		out.QPS = -1
	}
	return out
}

// processIdentity names this process in the allocation fence: the host
// name (the pod's name in a cluster) and a random part, as leader
// election's identity.
func processIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "drastack"
	}
	return host + "_" + rand.Text()[:10]
}

// LeaderElectionID names the Lease of leader election.
const LeaderElectionID = "drastack.drastack.io"

// UserAgent is the User-Agent of every request of an operator instance:
// the client's (client-go's default when base is empty) and the
// instance's identity, so that an audit log tells replicas of one
// ServiceAccount apart (internal/permissions FenceFirst).
func UserAgent(base, identity string) string {
	if base == "" {
		base = rest.DefaultKubernetesUserAgent()
	}
	return base + " drastack-instance/" + identity
}

// Scheme returns a scheme with the Kubernetes and drastack types.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

// New creates the manager with every controller registered. Start it with
// mgr.Start(ctx).
func New(cfg *rest.Config, o Options) (manager.Manager, error) {
	identity := processIdentity()
	cfg = rateLimited(cfg, o)
	cfg.UserAgent = UserAgent(cfg.UserAgent, identity)
	if limit := applyMemoryLimit(o.MemoryLimit); limit > 0 {
		ctrl.Log.WithName("setup").Info("Set the Go runtime's soft memory limit from the container's", "containerLimit", o.MemoryLimit, "softLimit", limit)
	}
	shutdown := o.ShutdownTimeout
	if shutdown == 0 {
		shutdown = 30 * time.Second
	}
	webhookServer, registration, err := claimWebhookServer(o)
	if err != nil {
		return nil, err
	}
	if webhookServer != nil {
		webhookServer = admissionmetrics.NewServer(webhookServer)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		WebhookServer:           webhookServer,
		Scheme:                  Scheme(),
		MapperProvider:          o.MapperProvider,
		Metrics:                 metricsOptions(o),
		HealthProbeBindAddress:  o.ProbeAddr,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		// The leader steps down on shutdown so a new one takes over at once.
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &shutdown,
		Controller:                    ctrlconfig.Controller{SkipNameValidation: &o.SkipNameValidation},
		Cache:                         cache.Options{ByObject: cacheByObject()},
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create clientset: %w", err)
	}
	var recorders []manager.Runnable
	recorder := func(name string) events.EventRecorder {
		r := eventlimit.New(mgr.GetEventRecorder(name), eventlimit.Options{QPS: o.EventQPS, Burst: o.EventBurst, Target: stackTarget(mgr.GetClient())})
		recorders = append(recorders, r)
		return r
	}
	// Every controller that changes what runs asks the same gate before it
	// acts on a spec (internal/controller/specgate).
	gate := &specgate.Gate{Cache: mgr.GetClient(), API: mgr.GetAPIReader(), OperatorNamespace: operatorNamespace(o.Namespace)}
	if err := (&stackctrl.Reconciler{
		Client:        mgr.GetClient(),
		Gate:          gate,
		Prober:        &clusterprobe.Prober{Client: clientset, Namespace: o.ProbeNamespace},
		Recorder:      recorder("drastack"),
		ProbeInterval: o.ClusterProbeInterval,
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up DRAStack controller: %w", err)
	}
	if err := (&poolctrl.Reconciler{
		Client:   mgr.GetClient(),
		Recorder: recorder("drastack-pool"),
		Workers:  o.PoolWorkers,
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up DevicePool controller: %w", err)
	}
	if err := (&publisherctrl.Reconciler{
		Client:     mgr.GetClient(),
		Gate:       gate,
		KubeClient: clientset,
		Recorder:   recorder("drastack-publisher"),
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up multi-host publisher: %w", err)
	}
	if err := (&claimsctrl.Reconciler{
		Client:         mgr.GetClient(),
		APIReader:      mgr.GetAPIReader(),
		Recorder:       recorder("drastack-claims"),
		StatusInterval: o.ClaimStatusInterval,
		Workers:        o.ClaimWorkers,
		FenceNamespace: cmp.Or(o.LeaderElectionNamespace, operatorNamespace(o.Namespace)),
		Identity:       identity,
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up claim controller: %w", err)
	}
	ready := map[string]healthz.Checker{}
	if webhookServer != nil {
		check, err := claimwebhook.SetupWebhook(mgr, registration)
		if err != nil {
			return nil, fmt.Errorf("set up pod webhook: %w", err)
		}
		ready["webhook"] = check
	}
	if err := (&driverctrl.Reconciler{
		Client:    mgr.GetClient(),
		Gate:      gate,
		APIReader: mgr.GetAPIReader(),
		Recorder:  recorder("drastack-driver"),
		Settings:  driver.Settings{PublishGrace: o.DriverPublishGrace, RolloutTimeout: o.DriverRolloutTimeout},
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up driver lifecycle controller: %w", err)
	}
	for _, r := range recorders {
		if err := mgr.Add(r); err != nil {
			return nil, fmt.Errorf("add an Event summary: %w", err)
		}
	}
	switch o.AdmissionPolicies {
	case "", AdmissionPoliciesInstall:
		direct, err := client.New(cfg, client.Options{Scheme: mgr.GetScheme()})
		if err != nil {
			return nil, fmt.Errorf("create client: %w", err)
		}
		policyGate := newPolicyGate(mgr, clientset, direct)
		if err := mgr.Add(policyGate); err != nil {
			return nil, fmt.Errorf("add the admission policy gate: %w", err)
		}
		ready["admission-policies"] = policyGate.ready
	case AdmissionPoliciesOff:
		ctrl.Log.WithName("setup").Info("Admission policies off: nothing fences the operator's own writes")
	default:
		return nil, fmt.Errorf("admission policies %q: want %s or %s", o.AdmissionPolicies, AdmissionPoliciesInstall, AdmissionPoliciesOff)
	}
	if o.ProbeAddr != "" && o.ProbeAddr != "0" {
		if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
			return nil, fmt.Errorf("add health check: %w", err)
		}
		// Ready only when the admission policies are in force and the
		// webhook is served with a certificate the API server trusts.
		for name, check := range ready {
			if err := mgr.AddReadyzCheck(name, check); err != nil {
				return nil, fmt.Errorf("add readiness check %s: %w", name, err)
			}
		}
		if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
			return nil, fmt.Errorf("add readiness check: %w", err)
		}
	}
	return mgr, nil
}

// stackTarget returns the DRAStack from the cache, the object the
// summaries of held-back Events are about (nil when there is none).
func stackTarget(c client.Reader) func(context.Context) runtime.Object {
	return func(ctx context.Context) runtime.Object {
		var st v1alpha1.DRAStack
		if err := c.Get(ctx, client.ObjectKey{Name: v1alpha1.DRAStackName}, &st); err != nil {
			return nil
		}
		return &st
	}
}

// metricsOptions configures the metrics endpoint: plain HTTP, or HTTPS
// behind the API server's authentication and authorization (the
// endpoint the metrics Service of config/default and the ServiceMonitor of
// config/prometheus point at).
func metricsOptions(o Options) metricsserver.Options {
	opts := metricsserver.Options{BindAddress: o.MetricsAddr}
	if o.MetricsSecure {
		opts.SecureServing = true
		opts.CertDir = o.MetricsCertDir
		opts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return opts
}

// claimWebhookServer configures the webhook server of the claim
// controller's pod webhook (nil when it is off) and, when the operator
// makes its own certificate, how it registers the webhook: with a URL
// outside the cluster (WebhookSelfSigned), or by setting the caBundle of
// config/default's configuration when no certificate is mounted. Under OLM
// a certificate is mounted and OLM registers the webhook.
func claimWebhookServer(o Options) (webhook.Server, *claimwebhook.SelfRegistration, error) {
	if o.WebhookPort == 0 {
		return nil, nil, nil
	}
	opts := webhook.Options{Host: o.WebhookHost, Port: o.WebhookPort, CertDir: o.WebhookCertDir}
	namespace := operatorNamespace(o.Namespace)
	if o.WebhookSelfSigned {
		if opts.Host == "" {
			opts.Host = "127.0.0.1"
		}
		ss, err := webhookcert.NewSelfSigned(opts.Host, opts.Port)
		if err != nil {
			return nil, nil, fmt.Errorf("self-signed webhook certificate: %w", err)
		}
		opts.TLSOpts = append(opts.TLSOpts, ss.TLSOption)
		return webhook.NewServer(opts), &claimwebhook.SelfRegistration{SelfSigned: ss, Namespace: namespace}, nil
	}
	dir := opts.CertDir
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs")
	}
	if _, err := os.Stat(filepath.Join(dir, "tls.crt")); err == nil {
		return webhook.NewServer(opts), nil, nil
	}
	service := cmp.Or(o.WebhookService, webhookcert.DefaultWebhookServiceName)
	ss, err := webhookcert.NewServiceSelfSigned(service, namespace, opts.Port, o.WebhookHost)
	if err != nil {
		return nil, nil, fmt.Errorf("webhook certificate for Service %s/%s: %w", namespace, service, err)
	}
	config := cmp.Or(o.WebhookConfiguration, webhookcert.DefaultWebhookConfigName)
	ctrl.Log.WithName("setup").Info("No webhook certificate mounted; serving the pod webhook with a self-signed one", "certDir", dir, "service", namespace+"/"+service, "configuration", config)
	opts.TLSOpts = append(opts.TLSOpts, ss.TLSOption)
	return webhook.NewServer(opts), &claimwebhook.SelfRegistration{SelfSigned: ss, ConfigName: config, Namespace: namespace}, nil
}

// serviceAccountNamespaceFile holds the pod's namespace in a cluster.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// operatorNamespace is the operator's namespace: the configured one, else
// the pod's, else claimwebhook.DefaultNamespace (outside a cluster).
func operatorNamespace(configured string) string {
	if configured != "" {
		return configured
	}
	if data, err := os.ReadFile(serviceAccountNamespaceFile); err == nil {
		if ns := strings.TrimSpace(string(data)); ns != "" {
			return ns
		}
	}
	return claimwebhook.DefaultNamespace
}
