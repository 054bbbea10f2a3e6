// Command manager is the drastack operator: one controller-runtime manager
// running every drastack controller, with leader election, health and
// readiness probes, a Prometheus metrics endpoint and graceful shutdown.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/clusterprobe"
	stackctrl "github.com/drastack/drastack/internal/controller/stack"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "drastack manager:", err)
		os.Exit(1)
	}
}

// options are the manager's command-line flags.
type options struct {
	metricsAddr      string
	probeAddr        string
	leaderElect      bool
	leaderElectionNS string
	probeNamespace   string
	shutdownTimeout  time.Duration
}

func run() error {
	var o options
	flag.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint; 0 disables it.")
	flag.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	flag.BoolVar(&o.leaderElect, "leader-elect", false, "Elect a leader so that only one replica reconciles at a time.")
	flag.StringVar(&o.leaderElectionNS, "leader-election-namespace", "", "Namespace of the leader election lease; defaults to the pod's namespace.")
	flag.StringVar(&o.probeNamespace, "probe-namespace", "default", "Existing namespace where the cluster probe sends dry-run ResourceClaims.")
	flag.DurationVar(&o.shutdownTimeout, "graceful-shutdown-timeout", 30*time.Second, "How long running reconciles may take to finish on shutdown.")
	zapOpts := zap.Options{Development: false}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	shutdown := o.shutdownTimeout
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:  o.probeAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "drastack.drastack.io",
		LeaderElectionNamespace: o.leaderElectionNS,
		// The leader steps down on shutdown so a new one takes over at once.
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &shutdown,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("create clientset: %w", err)
	}
	if err := (&stackctrl.Reconciler{
		Client:   mgr.GetClient(),
		Prober:   &clusterprobe.Prober{Client: clientset, Namespace: o.probeNamespace},
		Recorder: mgr.GetEventRecorder("drastack"),
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up DRAStack controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("add readiness check: %w", err)
	}
	ctrl.Log.Info("Starting drastack manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		return fmt.Errorf("run manager: %w", err)
	}
	return nil
}
