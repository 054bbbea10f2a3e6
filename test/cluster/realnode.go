package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/drastack/drastack/internal/ociimage"
)

// ContainerdVersion is the containerd release hack/build-node.sh builds;
// the per-user cache of node binaries is keyed by it and KubernetesVersion.
const ContainerdVersion = "v2.2.9"

// NodeBinaryDirEnv overrides where the real node's binaries are looked up.
const NodeBinaryDirEnv = "DRASTACK_NODE_BIN"

// NodeBinaries are the executables a node binary folder must hold.
var NodeBinaries = []string{"kubelet", "kube-proxy", "containerd", "ctr", "containerd-shim-runc-v2"}

// Images every real node holds from the start, built from files of this
// machine (see BuildBusyboxImage): the sandbox image containerd pins, and
// a shell for test pods. Pods use them with imagePullPolicy Never or
// IfNotPresent; nothing is ever pulled.
const (
	PauseImage   = "drastack.local/pause:v1"
	BusyboxImage = "drastack.local/busybox:v1"
)

// RealNodeTypeValue is the value of KwokTypeLabel on a real node (kwok
// nodes have KwokTypeValue), for node selectors of tests and the demo.
const RealNodeTypeValue = "real"

// realNodeLabels are the labels a real node registers with.
func realNodeLabels(string) map[string]string {
	return map[string]string{KwokTypeLabel: RealNodeTypeValue}
}

// RealNodeName is the name of the i-th real node of a cluster.
func RealNodeName(i int) string { return "real-node-" + strconv.Itoa(i) }

// maxRealNodes is how many real nodes one cluster runs: each is a network
// namespace of its own, routed to the machine only, so pods of two real
// nodes could not reach each other.
const maxRealNodes = 1

// UnsupportedError says why this machine cannot run a real node: the one
// missing piece, named. Tests that need a real node skip on it.
type UnsupportedError struct {
	// Missing names what is missing and, where it helps, how to get it.
	Missing string
}

func (e *UnsupportedError) Error() string {
	return "this machine cannot run a real node: " + e.Missing
}

// IsUnsupported reports whether err says that this machine cannot run a
// real node, and why.
func IsUnsupported(err error) (string, bool) {
	var u *UnsupportedError
	if errors.As(err, &u) {
		return u.Missing, true
	}
	return "", false
}

// RealNode is a kubelet node of the cluster with containerd and runc,
// whose pods really run. It lives in namespaces of its own, as a node
// container would: a network namespace joined to this machine by a veth
// pair (the only addresses it has besides loopback), a mount namespace in
// which /run, /var/lib and /var/log are private and /var/lib/kubelet and
// /var/run/cdi are folders of the cluster, a PID namespace whose first
// process holds it all (when that process dies, the kernel ends every
// other), and a cgroup root of its own. Two runs on one machine, or a run
// after one that was killed, never meet.
type RealNode struct {
	// Name is the node's name (real-node-0).
	Name string
	// IP is the node's InternalIP, its end of the veth pair; HostIP is the
	// machine's end, where the node reaches the API server.
	IP, HostIP string
	// PodCIDR holds the addresses of the node's pods.
	PodCIDR string
	// Dir is the node's private folder.
	Dir string
	// KubeletDir is the node's /var/lib/kubelet as this machine sees it.
	KubeletDir string
	// CDIDir is the node's /var/run/cdi as this machine sees it: where
	// DRA drivers write the CDI specs of prepared claims.
	CDIDir string
	// ContainerdAddress is containerd's socket.
	ContainerdAddress string

	plan    nodePlan
	ctrPath string
	logDir  string
	sandbox *sandbox
}

// ImportArchive imports the images of an OCI image archive into the node's
// containerd, where the kubelet finds them by name.
func (n *RealNode) ImportArchive(ctx context.Context, path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("image archive %s: %w", path, err)
	}
	// ctr needs the socket's absolute path (a relative one is parsed as
	// a URL).
	cmd := exec.CommandContext(ctx, n.ctrPath, "--address", n.ContainerdAddress, "--namespace", "k8s.io",
		"images", "import", abs)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("import %s into %s: %w: %s", path, n.Name, err, bytes.TrimSpace(out))
	}
	return nil
}

// Import writes images into an archive in the node's folder and imports
// it.
func (n *RealNode) Import(ctx context.Context, images ...ociimage.Tagged) error {
	f, err := os.CreateTemp(n.Dir, "import-*.tar")
	if err != nil {
		return fmt.Errorf("image archive for %s: %w", n.Name, err)
	}
	_ = f.Close()
	defer os.Remove(f.Name())
	if err := ociimage.WriteArchiveFile(f.Name(), images...); err != nil {
		return fmt.Errorf("image archive for %s: %w", n.Name, err)
	}
	return n.ImportArchive(ctx, f.Name())
}

// Images lists the image names the node's containerd holds.
func (n *RealNode) Images(ctx context.Context) ([]string, error) {
	out, err := exec.CommandContext(ctx, n.ctrPath, "--address", n.ContainerdAddress, "--namespace", "k8s.io",
		"images", "list", "--quiet").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("list images of %s: %w: %s", n.Name, err, bytes.TrimSpace(out))
	}
	return strings.Fields(string(out)), nil
}

// Exec runs a command inside the node's namespaces (as its kubelet sees
// the machine) and returns its combined output.
func (n *RealNode) Exec(ctx context.Context, args ...string) ([]byte, error) {
	if n.sandbox == nil {
		return nil, errors.New("node " + n.Name + " is not running")
	}
	cmd := exec.CommandContext(ctx, n.sandbox.nsenter, append(n.sandbox.enterArgs(), args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s on node %s: %w: %s", strings.Join(args, " "), n.Name, err, bytes.TrimSpace(out))
	}
	return out, nil
}

// LogPath is the log file of one of the node's components: containerd,
// kube-proxy or kubelet.
func (n *RealNode) LogPath(component string) string {
	return filepath.Join(n.logDir, n.Name+"-"+component+".log")
}

// Namespaces returns the identities ("net:[4026532301]") of the node's
// network, mount and PID namespaces, for checking that none is left after
// Stop.
func (n *RealNode) Namespaces() []string {
	if n.sandbox == nil {
		return nil
	}
	return n.sandbox.namespaces
}

// CgroupName is the node's cgroup root (under every hierarchy).
func (n *RealNode) CgroupName() string { return n.plan.cgroupName() }

// HostInterface is the machine's end of the node's veth pair.
func (n *RealNode) HostInterface() string { return n.plan.hostVeth() }

// realNodeStartTimeout bounds each wait of a real node's start.
const realNodeStartTimeout = 2 * time.Minute
