// Command localcluster runs the drastack local control plane (etcd,
// kube-apiserver, kube-scheduler, kube-controller-manager, kwok) with a few
// kwok nodes until it is interrupted. `make demo` and people exploring by
// hand use it; tests use package cluster directly.
//
//	go run ./test/cluster/cmd/localcluster -nodes 3 -kubeconfig /tmp/drastack.kubeconfig
//
// Once everything is up it prints one line that scripts wait for:
//
//	cluster ready: kubeconfig=/tmp/drastack.kubeconfig
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/drastack/drastack/test/cluster"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}

func run() error {
	// A flag set of our own: controller-runtime registers -kubeconfig on
	// the global one.
	fs := flag.NewFlagSet("localcluster", flag.ExitOnError)
	nodes := fs.Int("nodes", 3, "number of kwok nodes (kwok-node-0, kwok-node-1, ...)")
	realNodes := fs.Int("real-nodes", 0, "number of real nodes (kubelet, containerd, runc; 0 or 1): real-node-0")
	realOptional := fs.Bool("real-nodes-optional", false, "with -real-nodes: when the real node cannot start, say why and go on with the kwok nodes only")
	nodeImages := fs.String("node-images", "", "comma-separated OCI image archives (make image writes them) to import into every real node")
	nodeBinDir := fs.String("node-bin-dir", "", "folder with the real node's binaries (default: $"+cluster.NodeBinaryDirEnv+", else bin/node/VERSION of the module)")
	kubeconfig := fs.String("kubeconfig", "", "write the administrator kubeconfig to this path (default: only inside the cluster's temporary folder)")
	crds := fs.String("crds", "", "folder of CustomResourceDefinitions to install before reporting ready")
	logDir := fs.String("log-dir", "", "folder for the component logs, kept after exit (default: temporary, removed on exit)")
	binDir := fs.String("bin-dir", "", "folder with the control plane binaries (default: $"+cluster.BinaryDirEnv+", else bin/k8s/VERSION of the module)")
	version := fs.String("version", cluster.KubernetesVersion, "Kubernetes release to run (its binaries must be built: make k8s)")
	defaultGates := fs.Bool("default-gates", false, "start with the release's default feature gates instead of every DRA gate on")
	deployDir := fs.String("operator-deploy", "", "kustomize folder (config/default) whose Namespace, ServiceAccount and RBAC are installed for the operator")
	operatorKubeconfig := fs.String("operator-kubeconfig", "", "with -operator-deploy: write a kubeconfig for the operator's ServiceAccount (token from the TokenRequest API) to this path")
	webhookURL := fs.String("operator-webhook-url", "", "with -operator-deploy: also install its MutatingWebhookConfiguration, calling this URL (for example https://127.0.0.1:9443) instead of the in-cluster Service; the operator sets the caBundle")
	verbosity := fs.Int("v", 0, "log level of kube-scheduler and kube-controller-manager")
	timeout := fs.Duration("start-timeout", 3*time.Minute, "how long to wait for the cluster to come up")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}

	opts := cluster.Options{
		BinaryDir:     *binDir,
		Version:       *version,
		DefaultGates:  *defaultGates,
		Nodes:         *nodes,
		RealNodes:     *realNodes,
		NodeBinaryDir: *nodeBinDir,
		LogDir:        *logDir,
		Verbosity:     *verbosity,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "localcluster: "+format+"\n", args...)
		},
	}
	if *crds != "" {
		opts.CRDDirectoryPaths = []string{*crds}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	startCtx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	begin := time.Now()
	c, err := cluster.Start(startCtx, opts)
	if err != nil && opts.RealNodes > 0 && *realOptional && startCtx.Err() == nil {
		// The real node is a bonus: one line says why it is missing, the
		// rest of the cluster starts anyway.
		reason := err.Error()
		if missing, ok := cluster.IsUnsupported(err); ok {
			reason = missing
		}
		fmt.Fprintf(os.Stderr, "localcluster: no real node: %s\n", strings.SplitN(reason, "\n", 2)[0])
		fmt.Printf("real nodes: none (%s)\n", strings.SplitN(reason, "\n", 2)[0])
		opts.RealNodes = 0
		c, err = cluster.Start(startCtx, opts)
	}
	if err != nil {
		return err
	}
	for _, n := range c.RealNodes {
		for _, archive := range strings.Split(*nodeImages, ",") {
			if archive == "" {
				continue
			}
			if err := n.ImportArchive(startCtx, archive); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "localcluster: imported %s into %s\n", archive, n.Name)
		}
		fmt.Printf("real node: %s ip=%s pods=%s\n", n.Name, n.IP, n.PodCIDR)
	}
	defer func() {
		fmt.Fprintln(os.Stderr, "localcluster: stopping")
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "localcluster: stop:", err)
		}
	}()

	path := c.KubeconfigPath
	if *kubeconfig != "" {
		if path, err = copyKubeconfig(c.KubeconfigPath, *kubeconfig); err != nil {
			return err
		}
	}
	if *deployDir != "" {
		id, err := c.DeployOperatorIdentity(startCtx, *deployDir)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "localcluster: operator identity %s installed from %s\n", id.Username, *deployDir)
		if *webhookURL != "" {
			names, err := c.DeployWebhookByURL(startCtx, *deployDir, *webhookURL)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "localcluster: webhook configurations %v call %s\n", names, *webhookURL)
		}
		if *operatorKubeconfig != "" {
			if _, err := copyKubeconfig(id.KubeconfigPath, *operatorKubeconfig); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(os.Stderr, "localcluster: started in %s; logs in %s\n", time.Since(begin).Round(100*time.Millisecond), c.LogDir)
	fmt.Printf("cluster ready: kubeconfig=%s\n", path)

	<-ctx.Done()
	// The kubeconfigs point at a server that is about to disappear.
	for _, p := range []string{*kubeconfig, *operatorKubeconfig} {
		if p != "" {
			_ = os.Remove(p)
		}
	}
	return nil
}

// copyKubeconfig copies the kubeconfig and returns the absolute path of the
// copy, so that the readiness line works from any folder.
func copyKubeconfig(from, to string) (string, error) {
	data, err := os.ReadFile(from)
	if err != nil {
		return "", fmt.Errorf("read kubeconfig: %w", err)
	}
	abs, err := filepath.Abs(to)
	if err != nil {
		return "", fmt.Errorf("kubeconfig path %s: %w", to, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return "", fmt.Errorf("kubeconfig folder: %w", err)
	}
	if err := os.WriteFile(abs, data, 0o600); err != nil {
		return "", fmt.Errorf("write kubeconfig: %w", err)
	}
	return abs, nil
}
