package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Cluster is a running local control plane. Create it with Start and
// release it with Stop.
type Cluster struct {
	// Config reaches the API server as an administrator (group
	// system:masters).
	Config *rest.Config

	// Client is a clientset for Config.
	Client kubernetes.Interface

	// KubeconfigPath is a kubeconfig file for Config, for kubectl and for
	// processes such as the operator or the simulated driver.
	KubeconfigPath string

	// Dir is the cluster's private folder (kubeconfigs, certificates, etcd
	// data); Stop removes it.
	Dir string

	// LogDir holds one log file per component (etcd.log,
	// kube-apiserver.log, kube-scheduler.log, kube-controller-manager.log,
	// kwok.log).
	LogDir string

	// BinaryDir is where the binaries were taken from.
	BinaryDir string

	// Gates are the DRA feature gates the release knows, with their
	// defaults; unless Options.DefaultGates, every one of them is on.
	Gates []FeatureGate

	// RealNodes are the real nodes (Options.RealNodes), Ready.
	RealNodes []*RealNode

	// gateFlag is the --feature-gates value of every component.
	gateFlag string

	opts       Options
	real       *realNodes
	env        *envtest.Environment
	components []*component
	stopOnce   sync.Once
	stopErr    error
}

// Start brings up etcd, kube-apiserver, kube-scheduler,
// kube-controller-manager and kwok on 127.0.0.1, installs the CRDs of
// opts.CRDDirectoryPaths and creates opts.Nodes Ready kwok nodes.
//
// ctx bounds the start only: the processes run until Stop. If Start fails,
// everything it started is stopped again and the error carries the tail of
// the failing component's log.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	begin := time.Now()
	binDir, err := ResolveBinaryDirFor(opts.BinaryDir, opts.version())
	if err != nil {
		return nil, err
	}
	// A binary that lists no gates (a test's stand-in) starts with the
	// release's defaults; the e2e suites check the features they need.
	release, err := ReleaseFeatureGates(ctx, binDir)
	if err != nil {
		opts.logf("no feature gates found, starting with the defaults: %v", err)
	}
	removeStaleClusterDirs(os.TempDir())
	dir, err := os.MkdirTemp("", clusterDirPattern)
	if err != nil {
		return nil, fmt.Errorf("create cluster folder: %w", err)
	}
	if err := writeOwner(dir); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("mark cluster folder: %w", err)
	}
	logDir := opts.LogDir
	if logDir == "" {
		logDir = filepath.Join(dir, "logs")
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("create log folder: %w", err)
	}
	c := &Cluster{Dir: dir, LogDir: logDir, BinaryDir: binDir, opts: opts, Gates: DRAGates(release),
		gateFlag: gateFlag(release, opts.DefaultGates, opts.ExtraFeatureGates)}
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()

	if opts.RealNodes != 0 {
		if err := c.prepareRealNodes(); err != nil {
			return nil, err
		}
	}
	if err := c.startAPIServer(); err != nil {
		return nil, err
	}
	opts.logf("etcd and kube-apiserver ready after %s", time.Since(begin).Round(100*time.Millisecond))

	if err := c.startComponents(ctx); err != nil {
		return nil, err
	}
	opts.logf("kube-scheduler, kube-controller-manager and kwok ready after %s", time.Since(begin).Round(100*time.Millisecond))

	if len(opts.CRDDirectoryPaths) > 0 {
		if err := c.InstallCRDs(opts.CRDDirectoryPaths...); err != nil {
			return nil, err
		}
		opts.logf("CRDs installed after %s", time.Since(begin).Round(100*time.Millisecond))
	}

	if opts.Nodes > 0 {
		specs := make([]NodeSpec, opts.Nodes)
		for i := range specs {
			specs[i] = NodeSpec{Name: "kwok-node-" + strconv.Itoa(i), Labels: opts.NodeLabels, Capacity: opts.NodeCapacity}
		}
		if err := c.AddNodes(ctx, specs...); err != nil {
			return nil, err
		}
		opts.logf("%d kwok nodes Ready after %s", opts.Nodes, time.Since(begin).Round(100*time.Millisecond))
	}
	if c.real != nil {
		if err := c.startRealNodes(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// startAPIServer runs etcd and kube-apiserver through envtest and writes
// the administrator kubeconfig.
func (c *Cluster) startAPIServer() error {
	etcdLog, err := os.Create(filepath.Join(c.LogDir, "etcd.log"))
	if err != nil {
		return fmt.Errorf("create etcd log: %w", err)
	}
	apiLog, err := os.Create(filepath.Join(c.LogDir, "kube-apiserver.log"))
	if err != nil {
		_ = etcdLog.Close()
		return fmt.Errorf("create kube-apiserver log: %w", err)
	}
	// The files stay open for the life of the processes; closing our copy
	// does not affect them.
	defer etcdLog.Close()
	defer apiLog.Close()

	etcdPath, err := c.guardedBinary("etcd")
	if err != nil {
		return err
	}
	apiPath, err := c.guardedBinary("kube-apiserver")
	if err != nil {
		return err
	}

	// CRDs are installed later by InstallCRDs, so that a broken CRD is
	// reported as such and not as an API server failure.
	te := &envtest.Environment{
		BinaryAssetsDirectory:    c.BinaryDir,
		ControlPlaneStartTimeout: c.opts.startTimeout(),
		ControlPlaneStopTimeout:  stopGrace,
	}
	te.ControlPlane.Etcd = &envtest.Etcd{
		Path:    etcdPath,
		DataDir: filepath.Join(c.Dir, "etcd"),
		Out:     etcdLog,
		Err:     etcdLog,
	}
	// A test cluster loses nothing worth keeping if etcd skips fsync, and
	// on a busy machine fsync latency is what makes the API server slow.
	te.ControlPlane.Etcd.Configure().Set("unsafe-no-fsync", "true")
	api := te.ControlPlane.GetAPIServer()
	api.Path = apiPath
	api.CertDir = filepath.Join(c.Dir, "apiserver")
	api.Out = apiLog
	api.Err = apiLog
	api.Configure().Set("authorization-mode", "RBAC")
	runtimeConfig := c.opts.ExtraRuntimeConfig
	if !c.opts.DefaultGates {
		runtimeConfig = append([]string{RuntimeConfig(c.opts.version())}, runtimeConfig...)
	}
	if len(runtimeConfig) > 0 {
		api.Configure().Set("runtime-config", strings.Join(runtimeConfig, ","))
	}
	if c.gateFlag != "" {
		api.Configure().Set("feature-gates", c.gateFlag)
	}
	if c.opts.AuditLog != "" {
		policy, err := c.writeAuditPolicy()
		if err != nil {
			return err
		}
		api.Configure().Set("audit-policy-file", policy)
		api.Configure().Set("audit-log-path", c.opts.AuditLog)
		api.Configure().Set("audit-log-format", "json")
		api.Configure().Set("audit-log-maxbackup", "0")
	}
	for _, d := range []string{te.ControlPlane.Etcd.DataDir, api.CertDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	if c.real != nil {
		if err := c.real.configureAPIServer(api); err != nil {
			return err
		}
	}

	c.env = te
	cfg, err := te.Start()
	if err != nil {
		logs := []string{apiLog.Name()}
		if strings.Contains(err.Error(), "etcd") {
			logs = []string{etcdLog.Name()}
		}
		return withLogTail(fmt.Errorf("start etcd and kube-apiserver: %w", err), logs...)
	}
	cfg.QPS, cfg.Burst = 200, 400
	c.Config = cfg
	c.Client, err = kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client for the API server: %w", err)
	}
	c.KubeconfigPath = filepath.Join(c.Dir, "kubeconfig")
	if err := os.WriteFile(c.KubeconfigPath, te.KubeConfig, 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// guardedBinary returns a path that runs the named binary with the parent
// death signal set, through setpriv, because envtest starts etcd and
// kube-apiserver itself and gives no way to set it. Without setpriv the
// binary runs unguarded and only Stop ends it.
func (c *Cluster) guardedBinary(name string) (string, error) {
	real := filepath.Join(c.BinaryDir, name)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return real, nil
	}
	wrapDir := filepath.Join(c.Dir, "bin")
	if err := os.MkdirAll(wrapDir, 0o755); err != nil {
		return "", fmt.Errorf("create wrapper folder: %w", err)
	}
	script := fmt.Sprintf("#!/bin/sh\nexec %s --pdeathsig KILL -- %s \"$@\"\n", shellQuote(setpriv), shellQuote(real))
	path := filepath.Join(wrapDir, name)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		return "", fmt.Errorf("write wrapper for %s: %w", name, err)
	}
	return path, nil
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// InstallCRDs creates the CustomResourceDefinitions found in paths (folders
// or files) and waits until the API server serves them. A missing path is
// an error.
func (c *Cluster) InstallCRDs(paths ...string) error {
	crds, err := envtest.InstallCRDs(c.Config, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true})
	if err != nil {
		return fmt.Errorf("install CRDs from %s: %w", strings.Join(paths, ", "), err)
	}
	if len(crds) == 0 {
		return fmt.Errorf("install CRDs: no CustomResourceDefinition found in %s", strings.Join(paths, ", "))
	}
	return nil
}

// Kubectl runs the cluster's kubectl with the administrator kubeconfig and
// returns its combined output.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinaryDir, "kubectl"), append([]string{"--kubeconfig", c.KubeconfigPath}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// Healthy reports the first component that has exited, with its log tail.
// Tests call it when something hangs, to tell a dead scheduler from a slow
// one.
func (c *Cluster) Healthy() error {
	for _, comp := range c.components {
		if done, err := comp.exited(); done {
			return comp.failure(err)
		}
	}
	return nil
}

// Stop ends every process of the cluster (the real nodes' kubelet,
// kube-proxy, containerd and namespaces, kwok, kube-controller-manager,
// kube-scheduler, kube-apiserver, etcd, in that order), removes the real
// nodes' cgroups, and removes Dir.
// LogDir is kept when Options.LogDir named it. Stop is safe to call more
// than once.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		for i := len(c.components) - 1; i >= 0; i-- {
			if err := c.components[i].stop(); err != nil {
				errs = append(errs, err)
			}
		}
		if c.real != nil {
			if err := c.real.stop(); err != nil {
				errs = append(errs, fmt.Errorf("stop real nodes: %w", err))
			}
		}
		if c.env != nil {
			if err := c.env.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("stop etcd and kube-apiserver: %w", err))
			}
		}
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", c.Dir, err))
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}
