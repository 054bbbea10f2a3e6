// Package operator wires every drastack controller into one
// controller-runtime manager. cmd/manager and the e2e tests both use it, so
// the tests run exactly what ships.
package operator

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/clusterprobe"
	stackctrl "github.com/drastack/drastack/internal/controller/stack"
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
	shutdown := o.ShutdownTimeout
	if shutdown == 0 {
		shutdown = 30 * time.Second
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  Scheme(),
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:  o.ProbeAddr,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        "drastack.drastack.io",
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		// The leader steps down on shutdown so a new one takes over at once.
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &shutdown,
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
	if o.ProbeAddr != "" && o.ProbeAddr != "0" {
		if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
			return nil, fmt.Errorf("add health check: %w", err)
		}
		if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
			return nil, fmt.Errorf("add readiness check: %w", err)
		}
	}
	return mgr, nil
}
