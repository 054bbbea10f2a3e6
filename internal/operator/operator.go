// Package operator wires every drastack controller into one
// controller-runtime manager. cmd/manager and the e2e tests both use it, so
// the tests run exactly what ships.
package operator

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/claimwebhook"
	"github.com/drastack/drastack/internal/clusterprobe"
	claimsctrl "github.com/drastack/drastack/internal/controller/claims"
	driverctrl "github.com/drastack/drastack/internal/controller/driver"
	poolctrl "github.com/drastack/drastack/internal/controller/pool"
	publisherctrl "github.com/drastack/drastack/internal/controller/publisher"
	stackctrl "github.com/drastack/drastack/internal/controller/stack"
	"github.com/drastack/drastack/internal/driver"
	"github.com/drastack/drastack/internal/webhookcert"
)

// Options configure the operator.
type Options struct {
	// MetricsAddr is the Prometheus endpoint address; "0" disables it.
	MetricsAddr string
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
	// AdmissionPolicies is AdmissionPoliciesInstall (the default when
	// empty: the operator applies its admission policies at start and
	// starts no controller before the API server enforces them) or
	// AdmissionPoliciesOff.
	AdmissionPolicies string
}

// Client-side rate limits of the operator. Each allocation costs up to
// three requests (finalizer, status, Event) and a pod's placement one
// more (its gate): controller-runtime's own default of 20 per second
// would cap a burst at about seven claims a second. kube-scheduler, which
// writes the same objects, uses 50 and 100; the operator also validates
// pools and installs drivers beside it.
const (
	DefaultKubeAPIQPS   = 100
	DefaultKubeAPIBurst = 200
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

// Scheme returns a scheme with the Kubernetes and drastack types.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

// New creates the manager with every controller registered. Start it with
// mgr.Start(ctx).
func New(cfg *rest.Config, o Options) (manager.Manager, error) {
	cfg = rateLimited(cfg, o)
	shutdown := o.ShutdownTimeout
	if shutdown == 0 {
		shutdown = 30 * time.Second
	}
	webhookServer, registration, err := claimWebhookServer(o)
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		WebhookServer:           webhookServer,
		Scheme:                  Scheme(),
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:  o.ProbeAddr,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        "drastack.drastack.io",
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
	if err := (&stackctrl.Reconciler{
		Client:        mgr.GetClient(),
		Prober:        &clusterprobe.Prober{Client: clientset, Namespace: o.ProbeNamespace},
		Recorder:      mgr.GetEventRecorder("drastack"),
		ProbeInterval: o.ClusterProbeInterval,
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up DRAStack controller: %w", err)
	}
	if err := (&poolctrl.Reconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("drastack-pool"),
		Workers:  o.PoolWorkers,
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up DevicePool controller: %w", err)
	}
	if err := (&publisherctrl.Reconciler{
		Client:     mgr.GetClient(),
		KubeClient: clientset,
		Recorder:   mgr.GetEventRecorder("drastack-publisher"),
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up multi-host publisher: %w", err)
	}
	if err := (&claimsctrl.Reconciler{
		Client:         mgr.GetClient(),
		APIReader:      mgr.GetAPIReader(),
		Recorder:       mgr.GetEventRecorder("drastack-claims"),
		StatusInterval: o.ClaimStatusInterval,
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
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("drastack-driver"),
		Settings:  driver.Settings{PublishGrace: o.DriverPublishGrace, RolloutTimeout: o.DriverRolloutTimeout},
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up driver lifecycle controller: %w", err)
	}
	switch o.AdmissionPolicies {
	case "", AdmissionPoliciesInstall:
		direct, err := client.New(cfg, client.Options{Scheme: mgr.GetScheme()})
		if err != nil {
			return nil, fmt.Errorf("create client: %w", err)
		}
		gate := newPolicyGate(mgr, clientset, direct)
		if err := mgr.Add(gate); err != nil {
			return nil, fmt.Errorf("add the admission policy gate: %w", err)
		}
		ready["admission-policies"] = gate.ready
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

// cacheByObject scopes what the manager caches per kind.
func cacheByObject() map[client.Object]cache.ByObject {
	by := map[client.Object]cache.ByObject{
		// Only the pool controller reads DevicePools, and never their
		// managedFields, which for a pool with many counters are as
		// large as its status: 10,000 of them would cost tens of MB.
		&v1alpha1.DevicePool{}: {Transform: cache.TransformStripManagedFields()},
	}
	// The driver lifecycle controller watches the objects it renders for
	// drivers, to restore them when they are deleted or changed; no
	// controller reads the cluster's other namespaces, service accounts,
	// roles or admission policies, so only those labelled for a stack are
	// cached (metadata only, see driverctrl SetupWithManager).
	stackLabelled, err := labels.NewRequirement(driver.LabelStack, selection.Exists, nil)
	utilruntime.Must(err)
	owned := cache.ByObject{Label: labels.NewSelector().Add(*stackLabelled)}
	for _, obj := range []client.Object{
		&corev1.Namespace{}, &corev1.ServiceAccount{},
		&rbacv1.ClusterRole{}, &rbacv1.ClusterRoleBinding{}, &rbacv1.Role{}, &rbacv1.RoleBinding{},
		&admissionregistrationv1.ValidatingAdmissionPolicy{}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{},
	} {
		by[obj] = owned
	}
	return by
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
