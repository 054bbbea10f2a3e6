// Command manager is the drastack operator: one controller-runtime manager
// running every drastack controller, with leader election, health and
// readiness probes, a Prometheus metrics endpoint and graceful shutdown.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/drastack/drastack/internal/operator"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "drastack manager:", err)
		os.Exit(1)
	}
}

func run() error {
	var o operator.Options
	flag.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8443", "Address of the Prometheus metrics endpoint; 0 disables it.")
	flag.BoolVar(&o.MetricsSecure, "metrics-secure", true, "Serve the metrics over HTTPS to callers the API server authenticates and authorizes for GET /metrics (config/rbac's metrics-reader ClusterRole); false serves plain HTTP to anyone.")
	flag.StringVar(&o.MetricsCertDir, "metrics-cert-dir", "", "Folder with tls.crt and tls.key of the secure metrics endpoint; without them the operator serves a self-signed certificate.")
	flag.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints; 0 disables them.")
	flag.BoolVar(&o.LeaderElect, "leader-elect", false, "Elect a leader so that only one replica reconciles at a time.")
	flag.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election lease; defaults to the pod's namespace.")
	flag.StringVar(&o.ProbeNamespace, "probe-namespace", "default", "Existing namespace where the cluster probe sends dry-run ResourceClaims.")
	flag.DurationVar(&o.ShutdownTimeout, "graceful-shutdown-timeout", 30*time.Second, "How long running reconciles may take to finish on shutdown.")
	flag.IntVar(&o.WebhookPort, "webhook-port", 0, "Port of the pod admission webhook that holds pods until the operator allocated their claims (9443 in the bundle); 0 disables it.")
	flag.StringVar(&o.WebhookHost, "webhook-host", "", "Address the webhook listens on; default all addresses, 127.0.0.1 with --webhook-self-signed.")
	flag.StringVar(&o.WebhookCertDir, "webhook-cert-dir", "", "Folder with tls.crt and tls.key of the webhook (OLM mounts them); default controller-runtime's. Without them the operator makes its own certificate.")
	flag.StringVar(&o.WebhookService, "webhook-service", "", "Service in front of the webhook, for the certificate the operator makes when none is mounted (make deploy); default config/default's.")
	flag.StringVar(&o.WebhookConfiguration, "webhook-configuration", "", "MutatingWebhookConfiguration whose caBundle the operator sets when no certificate is mounted (make deploy); default config/default's.")
	flag.StringVar(&o.Namespace, "namespace", "", "The operator's namespace (the webhook Service's, left out of the webhook); default the pod's.")
	flag.BoolVar(&o.WebhookSelfSigned, "webhook-self-signed", false, "Make a self-signed certificate at startup and register the webhook with a URL to --webhook-host:--webhook-port, for an operator running outside the cluster.")
	flag.DurationVar(&o.DriverRolloutTimeout, "driver-rollout-timeout", 0, "How long a driver rollout may make no progress before it is reported as stalled, for drivers whose updateStrategy.progressDeadlineSeconds is unset; default 5m.")
	flag.Int64Var(&o.MemoryLimit, "memory-limit", 0, "The container's memory limit in bytes (the Deployment passes limits.memory); the Go runtime's soft memory limit is set to 90% of it unless GOMEMLIMIT is set. 0: none.")
	flag.StringVar(&o.AdmissionPolicies, "admission-policies", operator.AdmissionPoliciesInstall, "install: apply the operator's admission policies at start and start no controller before the API server enforces them; off: skip them (only for an operator run with a developer's own credentials).")
	qps := flag.Float64("kube-api-qps", operator.DefaultKubeAPIQPS, "Requests per second the operator sends to the API server at most (client side); negative: no client-side limit.")
	flag.IntVar(&o.KubeAPIBurst, "kube-api-burst", operator.DefaultKubeAPIBurst, "Requests the operator may send at once above --kube-api-qps.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	o.KubeAPIQPS = float32(*qps)
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	mgr, err := operator.New(cfg, o)
	if err != nil {
		return err
	}
	ctrl.Log.Info("Starting drastack manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		return fmt.Errorf("run manager: %w", err)
	}
	return nil
}
