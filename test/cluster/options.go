package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// KubernetesVersion is the release the control plane binaries are built
// from by default; the API server reports it as its git version.
const KubernetesVersion = "v1.37.2"

// CompatKubernetesVersion is the older release `make test` also runs a
// compatibility smoke on, so that feature detection is proven on both.
const CompatKubernetesVersion = "v1.36.3"

// BinaryDirEnv overrides where the control plane binaries are looked up,
// for machines that keep them outside the repository.
const BinaryDirEnv = "DRASTACK_K8S_BIN"

// Binaries are the executables a binary folder must hold.
var Binaries = []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl", "kwok"}

// runtimeConfigs enables, per release, every resource.k8s.io version its
// API server can serve: v1 for the DRA core types (and DeviceTaintRule
// from 1.37), v1beta2 for DeviceTaintRule in 1.36, and v1alpha3 for
// ResourcePoolStatusRequest. A release not listed gets v1 only.
var runtimeConfigs = map[string]string{
	"v1.36.3": "resource.k8s.io/v1=true,resource.k8s.io/v1beta2=true,resource.k8s.io/v1alpha3=true",
	"v1.37.2": "resource.k8s.io/v1=true,resource.k8s.io/v1beta2=true,resource.k8s.io/v1alpha3=true",
}

// RuntimeConfig returns the --runtime-config for a release (see
// runtimeConfigs).
func RuntimeConfig(version string) string {
	if rc, ok := runtimeConfigs[version]; ok {
		return rc
	}
	return "resource.k8s.io/v1=true"
}

// Options configures Start. The zero value starts a cluster without nodes
// from the default binary folder.
type Options struct {
	// Version is the Kubernetes release to run. Default: KubernetesVersion.
	// It picks the binary folder (unless BinaryDir is set) and the API
	// versions enabled.
	Version string

	// BinaryDir holds the control plane binaries (see Binaries). Default:
	// $DRASTACK_K8S_BIN when Version is the default, else
	// bin/k8s/<Version> under the module root found from the working
	// directory, else the per-user build cache that hack/build-k8s.sh
	// fills.
	BinaryDir string

	// DefaultGates starts every component with the release's default
	// feature gates and API versions (plus ExtraFeatureGates), as a
	// cluster whose admin changed nothing. By default every DRA feature
	// gate the release knows is turned on, alpha ones included, and every
	// resource.k8s.io version is served, so tests can exercise them all.
	DefaultGates bool

	// Nodes is how many kwok nodes to create before Start returns. They are
	// named kwok-node-0, kwok-node-1, ... and are Ready when Start returns.
	Nodes int

	// RealNodes is how many real nodes to start beside the kwok nodes: 0
	// (the default) or 1. A real node runs kubelet, kube-proxy, containerd
	// and runc in namespaces of its own (see RealNode), named
	// real-node-0, labelled type=real, Ready when Start returns. When this
	// machine cannot run one (no root, no cgroups, no overlayfs, binaries
	// or packages missing), Start fails with an *UnsupportedError naming
	// the missing piece; RealNodeSupport tells beforehand.
	RealNodes int

	// NodeBinaryDir holds the real node's binaries (see NodeBinaries,
	// built by hack/build-node.sh). Default: $DRASTACK_NODE_BIN when
	// Version is the default, else bin/node/<Version> under the module
	// root, else the per-user cache.
	NodeBinaryDir string

	// NodeLabels are added to every kwok node Start creates, on top of the
	// labels every kwok node gets (see NodeSpec).
	NodeLabels map[string]string

	// NodeCapacity is the capacity and allocatable of the nodes Start
	// creates. Default: DefaultNodeCapacity.
	NodeCapacity corev1.ResourceList

	// CRDDirectoryPaths are folders (or files) of CustomResourceDefinitions
	// installed before Start returns (see Cluster.InstallCRDs). A missing
	// path, or one without CRDs, is an error.
	CRDDirectoryPaths []string

	// LogDir receives one log file per component. It is kept after Stop so
	// that a failed run can be read. Default: a folder inside the cluster's
	// temporary directory, removed by Stop.
	LogDir string

	// ExtraFeatureGates are appended to the DRA gates for every component,
	// for example "SomeGate=false".
	ExtraFeatureGates []string

	// ExtraRuntimeConfig is appended to the API server's --runtime-config,
	// for example "scheduling.k8s.io/v1beta1=true" (the Workload API, with
	// the GenericWorkload gate in ExtraFeatureGates).
	ExtraRuntimeConfig []string

	// StartTimeout bounds each wait during Start (API server healthy,
	// scheduler and controller manager healthy, nodes Ready). Default: two
	// minutes, because a 2-core machine busy compiling is slow.
	StartTimeout time.Duration

	// NodeHeartbeat slows kwok down for clusters of many nodes: when set,
	// each Ready node posts a status heartbeat every NodeHeartbeat to
	// 1.5 x NodeHeartbeat (instead of every 10-15 s), renews its Lease
	// every NodeHeartbeat (instead of every 10 s), and
	// kube-controller-manager waits 4 x NodeHeartbeat (instead of 50 s)
	// before it marks a silent node unreachable. Zero keeps the defaults,
	// which a few dozen nodes need; a thousand nodes at the defaults make
	// kwok's writes the API server's main load. Rounded to seconds; at
	// least 15s when set.
	NodeHeartbeat time.Duration

	// Verbosity is the klog level of kube-scheduler and
	// kube-controller-manager. Default 0.
	Verbosity int

	// SchedulerArgs are added to kube-scheduler's flags
	// ("--kube-api-qps=300").
	SchedulerArgs []string

	// Logf receives progress lines ("etcd and kube-apiserver ready in
	// 3.1s"). Default: discard.
	Logf func(format string, args ...any)

	// AuditLog turns on the API server's audit log: one JSON line per
	// request of AuditUsers (metadata level, when the response starts and
	// when it ends), written to this file, which outlives the cluster.
	// Empty: no audit log.
	AuditLog string
	// AuditUsers are the user names whose requests AuditLog records; the
	// requests of every other user are left out, so the log stays small.
	AuditUsers []string
}

// DefaultNodeCapacity is what a kwok node offers when Options.NodeCapacity
// or NodeSpec.Capacity is empty: enough for many small test pods.
func DefaultNodeCapacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
}

const defaultStartTimeout = 2 * time.Minute

func (o Options) startTimeout() time.Duration {
	if o.StartTimeout <= 0 {
		return defaultStartTimeout
	}
	return o.StartTimeout
}

// minNodeHeartbeat is the smallest Options.NodeHeartbeat honoured: below
// it the defaults are faster anyway.
const minNodeHeartbeat = 15 * time.Second

// nodeHeartbeat returns Options.NodeHeartbeat rounded to seconds and
// raised to minNodeHeartbeat, or zero when unset.
func (o Options) nodeHeartbeat() time.Duration {
	if o.NodeHeartbeat <= 0 {
		return 0
	}
	return max(o.NodeHeartbeat.Round(time.Second), minNodeHeartbeat)
}

func (o Options) logf(format string, args ...any) {
	if o.Logf != nil {
		o.Logf(format, args...)
	}
}

func (o Options) version() string {
	if o.Version == "" {
		return KubernetesVersion
	}
	return o.Version
}

// ResolveBinaryDir returns the folder the binaries of the default release
// are taken from (see ResolveBinaryDirFor).
func ResolveBinaryDir(explicit string) (string, error) {
	return ResolveBinaryDirFor(explicit, KubernetesVersion)
}

// ResolveBinaryDirFor returns the folder the binaries of a release are
// taken from, in the order documented on Options.BinaryDir, and checks that
// every binary is there. The error names the missing binaries and how to
// build them.
func ResolveBinaryDirFor(explicit, version string) (string, error) {
	var candidates []string
	switch {
	case explicit != "":
		candidates = []string{explicit}
	case os.Getenv(BinaryDirEnv) != "" && version == KubernetesVersion:
		candidates = []string{os.Getenv(BinaryDirEnv)}
	default:
		if root, err := moduleRoot(); err == nil {
			candidates = append(candidates, filepath.Join(root, "bin", "k8s", version))
		}
		if cache, err := userCacheDir(); err == nil {
			candidates = append(candidates, filepath.Join(cache, "drastack", "k8s", version))
		}
	}
	var problems []string
	for _, dir := range candidates {
		missing := missingBinaries(dir)
		if len(missing) == 0 {
			abs, err := filepath.Abs(dir)
			if err != nil {
				return "", fmt.Errorf("absolute path of %s: %w", dir, err)
			}
			return abs, nil
		}
		problems = append(problems, fmt.Sprintf("%s lacks %s", dir, strings.Join(missing, ", ")))
	}
	if len(candidates) == 0 {
		return "", errors.New("no folder to look for the control plane binaries in: set " + BinaryDirEnv)
	}
	return "", fmt.Errorf("control plane binaries not found (%s); build them with K8S_VERSION=%s hack/build-k8s.sh bin/k8s/%s or set %s",
		strings.Join(problems, "; "), version, version, BinaryDirEnv)
}

func missingBinaries(dir string) []string {
	var missing []string
	for _, b := range Binaries {
		info, err := os.Stat(filepath.Join(dir, b))
		if err != nil || info.IsDir() || info.Mode().Perm()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	return missing
}

// userCacheDir follows hack/build-k8s.sh: $XDG_CACHE_HOME, else ~/.cache.
func userCacheDir() (string, error) {
	if dir := os.Getenv("XDG_CACHE_HOME"); dir != "" {
		return dir, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("home directory: %w", err)
	}
	return filepath.Join(home, ".cache"), nil
}

// moduleRoot walks up from the working directory to the go.mod of this
// module. Tests run in their package folder and `go run` in the caller's,
// so the working directory is the only anchor that works for both.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(data), "module github.com/drastack/drastack\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod of github.com/drastack/drastack not found above the working directory")
		}
		dir = parent
	}
}
