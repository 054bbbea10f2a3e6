// Command drastack-example-plugin is the DRA kubelet plugin of the
// example driver profile: it registers with the kubelet, publishes the
// node's simulated GPUs (whole or as MIG-like partitions on shared
// counters), prepares claims through CDI (an environment variable and a
// mounted file per device), reports device health, and answers gRPC
// health checks for its probes. See package internal/exampleplugin.
//
// It reads the environment the example profile sets, the same variables
// the kubernetes-sigs dra-example-driver reads, so that one manifest runs
// either image: DRIVER_NAME, NODE_NAME, CDI_ROOT,
// KUBELET_REGISTRAR_DIRECTORY_PATH, KUBELET_PLUGINS_DIRECTORY_PATH,
// HEALTHCHECK_PORT, NUM_DEVICES and POD_UID, plus DEVICE_PARTITIONS (the
// MIG profile table, "a100-40gb" by default, "none" for whole GPUs).
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/drastack/drastack/internal/exampleplugin"
	"github.com/drastack/drastack/internal/simdriver"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "drastack-example-plugin:", err)
		os.Exit(1)
	}
}

// env returns an environment variable or its default.
func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) (int, error) {
	v := env(name, "")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: not a number", name, v)
	}
	return n, nil
}

func run() error {
	gpus, err := envInt("NUM_DEVICES", 8)
	if err != nil {
		return err
	}
	port, err := envInt("HEALTHCHECK_PORT", -1)
	if err != nil {
		return err
	}
	partitions := env("DEVICE_PARTITIONS", simdriver.ProfileA100_40GB)
	if partitions == "none" {
		partitions = ""
	}
	cfg := exampleplugin.Config{
		DriverName: env("DRIVER_NAME", "gpu.example.com"),
		NodeName:   env("NODE_NAME", ""),
		GPUs:       gpus,
		Partitions: partitions,
		Model:      "example-gpu",
	}
	inv, err := exampleplugin.NewInventory(cfg)
	if err != nil {
		return err
	}
	cdiDir := env("CDI_ROOT", "/var/run/cdi")
	registrar := env("KUBELET_REGISTRAR_DIRECTORY_PATH", kubeletplugin.KubeletRegistryDir)
	dataDir := filepath.Join(env("KUBELET_PLUGINS_DIRECTORY_PATH", kubeletplugin.KubeletPluginsDir), cfg.DriverName)

	// The kubelet plugin helper listens on a socket in the data folder.
	for _, dir := range []string{dataDir, cdiDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}

	restCfg, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		restCfg, err = clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	}
	if err != nil {
		return fmt.Errorf("API server configuration: %w", err)
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctx = klog.NewContext(ctx, klog.Background().WithValues("driver", cfg.DriverName, "node", cfg.NodeName))

	var driver *exampleplugin.Driver

	// helper is set before the helper can report an error.
	var helper *kubeletplugin.Helper
	var fallback sync.Once
	dropped := func(dropErr *resourceslice.DroppedFieldsError) {
		if cfg.Partitions == "" {
			cancel(dropErr)
			return
		}
		// A cluster without partitionable devices drops the counters:
		// publish whole GPUs instead.
		fallback.Do(func() {
			whole := cfg
			whole.Partitions = ""
			inv, err := exampleplugin.NewInventory(whole)
			if err == nil {
				err = helper.PublishResources(ctx, inv.Resources)
			}
			if err != nil {
				cancel(fmt.Errorf("publish whole GPUs after the cluster dropped the partitions: %w", err))
				return
			}
			driver.SetInventory(inv)
			klog.FromContext(ctx).Info("The cluster dropped fields of the partitions (disabled: " + strings.Join(dropErr.DisabledFeatures(), ", ") + "); publishing whole GPUs")
		})
	}
	driver = exampleplugin.NewDriver(cfg, inv, cdiDir, dataDir, func(err error) { cancel(err) }, dropped)
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(cfg.DriverName),
		kubeletplugin.NodeName(cfg.NodeName),
		kubeletplugin.KubeClient(client),
		kubeletplugin.RegistrarDirectoryPath(registrar),
		kubeletplugin.PluginDataDirectoryPath(dataDir),
	}
	if uid := env("POD_UID", ""); uid != "" {
		// Old and new plugin pods may overlap during a rollout.
		opts = append(opts, kubeletplugin.RollingUpdate(types.UID(uid)))
	}
	helper, err = kubeletplugin.Start(ctx, driver, opts...)
	if err != nil {
		return fmt.Errorf("start kubelet plugin: %w", err)
	}
	defer helper.Stop()
	if err := helper.PublishResources(ctx, inv.Resources); err != nil {
		return fmt.Errorf("publish devices: %w", err)
	}
	klog.FromContext(ctx).Info("Publishing", "pool", inv.Pool, "devices", len(inv.Devices))

	if port >= 0 {
		srv, err := serveHealth(ctx, port, helper)
		if err != nil {
			return err
		}
		defer srv.Stop()
	}
	<-ctx.Done()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// serveHealth answers gRPC health checks of the service "liveness" (what
// the profile's probes ask): SERVING once the kubelet has registered the
// plugin.
func serveHealth(ctx context.Context, port int, helper *kubeletplugin.Helper) (*grpc.Server, error) {
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return nil, fmt.Errorf("health check port: %w", err)
	}
	hs := health.NewServer()
	hs.SetServingStatus("liveness", healthpb.HealthCheckResponse_NOT_SERVING)
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(ln) }()
	go func() {
		for {
			status := healthpb.HealthCheckResponse_NOT_SERVING
			if s := helper.RegistrationStatus(); s != nil && s.PluginRegistered {
				status = healthpb.HealthCheckResponse_SERVING
			}
			hs.SetServingStatus("liveness", status)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}()
	return srv, nil
}
