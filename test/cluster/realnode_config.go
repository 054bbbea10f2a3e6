package cluster

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// maxSlots is how many real nodes may run on one machine at once (each
// run's node takes a slot: its addresses and cgroup name derive from it).
const maxSlots = 64

// nodePlan is everything a real node's configuration derives from: its
// name, its slot on this machine, the addresses of its veth pair and pod
// network, and its private folder. It is computed, not discovered, so the
// configuration files are pure functions of it.
type nodePlan struct {
	Name string
	// Slot is the node's index among the real nodes running on this
	// machine (0..maxSlots-1).
	Slot int
	// HostIP and NodeIP are the two ends of the veth pair: HostIP in the
	// machine's network namespace, NodeIP (the node's InternalIP) in the
	// node's.
	HostIP, NodeIP netip.Addr
	// LinkPrefix is the pair's /30.
	LinkPrefix netip.Prefix
	// PodCIDR holds the node's pod addresses; its first address is the
	// bridge's.
	PodCIDR netip.Prefix
	// Dir is the node's private folder; every path below is inside it
	// unless it names a path of the node's own mount namespace.
	Dir string
	// APIServerPort is where the API server answers on HostIP.
	APIServerPort int
	// RuncPath, CNIBinDir and the node binaries' folder.
	RuncPath, CNIBinDir, BinDir string
	// FeatureGates is the --feature-gates value of every component.
	FeatureGates string
}

// planNode derives a node's addresses from its slot: the veth pair is
// 10.213.<slot>.0/30 and the pods 10.214.<slot>.0/24.
func planNode(name string, slot int, dir string) (nodePlan, error) {
	if slot < 0 || slot >= maxSlots {
		return nodePlan{}, fmt.Errorf("real node slot %d outside 0..%d", slot, maxSlots-1)
	}
	link := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 213, byte(slot), 0}), 30)
	return nodePlan{
		Name:       name,
		Slot:       slot,
		LinkPrefix: link,
		HostIP:     link.Addr().Next(),
		NodeIP:     link.Addr().Next().Next(),
		PodCIDR:    netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 214, byte(slot), 0}), 24),
		Dir:        dir,
	}, nil
}

// Names and paths of a node, relative to its plan.
func (p nodePlan) hostVeth() string     { return "drsnode" + strconv.Itoa(p.Slot) }
func (p nodePlan) cgroupName() string   { return "drastack-node-" + strconv.Itoa(p.Slot) }
func (p nodePlan) bridgeIP() netip.Addr { return p.PodCIDR.Addr().Next() }
func (p nodePlan) path(elem ...string) string {
	return filepath.Join(append([]string{p.Dir}, elem...)...)
}
func (p nodePlan) containerdSocket() string { return p.path("containerd.sock") }
func (p nodePlan) apiServerURL() string {
	return "https://" + netip.AddrPortFrom(p.HostIP, uint16(p.APIServerPort)).String()
}

// Private folders of the node: bindMounts are mounted over the paths the
// kubelet and drivers use whatever their configuration says; the others
// are named in the configuration files.
const (
	dirKubelet    = "kubelet"     // /var/lib/kubelet
	dirCDI        = "cdi"         // /var/run/cdi
	dirContainerd = "containerd"  // containerd's root
	dirCNIConf    = "cni"         // CNI configuration
	dirPodLogs    = "pod-logs"    // kubelet podLogsDir
	dirPKI        = "pki"         // certificates and kubeconfigs
	dirCgroupHold = "cgroup-hold" // where the cgroup mounts wait while /sys is replaced
)

// bindMounts are the node's private folders and where its mount namespace
// shows them: paths the kubelet and DRA drivers use whatever any flag says
// (the profiles' hostPaths name them), so the node has its own.
func (p nodePlan) bindMounts() [][2]string {
	return [][2]string{
		{p.path(dirKubelet), "/var/lib/kubelet"},
		{p.path(dirCDI), "/var/run/cdi"},
	}
}

// tmpfsMounts are replaced by an empty file system in the node's mount
// namespace, so that whatever is written there (containerd's state and
// shim sockets, CNI state, network namespace handles, container log
// links, lock files) is the node's alone and vanishes with it.
var tmpfsMounts = []string{"/run", "/var/lib", "/var/log"}

// setupScript prepares the node's namespaces from the inside; it runs
// once, through nsenter, before containerd starts. The node's end of the
// veth pair (eth0) is already in its network namespace.
func (p nodePlan) setupScript() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("set -eu")
	w("# Nothing mounted here may reach the machine's mount namespace.")
	w("mount --make-rprivate /")
	w("# The cgroup hierarchies wait aside while /sys is replaced by a sysfs")
	w("# of the node's network namespace, then come back under it.")
	w("mkdir -p %s", shellQuote(p.path(dirCgroupHold)))
	w("mount --rbind /sys/fs/cgroup %s", shellQuote(p.path(dirCgroupHold)))
	w("mount -t sysfs -o nosuid,nodev,noexec sysfs /sys")
	w("mount --move %s /sys/fs/cgroup", shellQuote(p.path(dirCgroupHold)))
	w("mount -t proc -o nosuid,nodev,noexec proc /proc")
	for _, m := range tmpfsMounts {
		w("mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs %s", m)
	}
	for _, bm := range p.bindMounts() {
		w("mkdir -p %s %s", shellQuote(bm[0]), bm[1])
		w("mount --bind %s %s", shellQuote(bm[0]), bm[1])
	}
	w("hostname %s", shellQuote(p.Name))
	w("ip link set lo up")
	w("ip addr add %s/%d dev eth0", p.NodeIP, p.LinkPrefix.Bits())
	w("ip link set eth0 up")
	w("ip route add default via %s dev eth0", p.HostIP)
	w("# Pod traffic to the API server and back is routed through the node.")
	w("echo 1 > /proc/sys/net/ipv4/ip_forward")
	return b.String()
}

// disabledContainerdPlugins write outside the node's folders (opt creates
// /opt/containerd) or are not needed.
var disabledContainerdPlugins = []string{
	"io.containerd.internal.v1.opt",
	"io.containerd.nri.v1.nri",
	"io.containerd.internal.v1.tracing",
}

// containerdConfig is containerd's configuration (version 3): root on
// disk, state in the node's private /run, the socket in the node's folder
// (reachable from the machine, for image imports), CDI on, runc through
// cgroupfs, CNI from the node's folder, and the pause image pinned as the
// sandbox image so that nothing is ever pulled.
func (p nodePlan) containerdConfig() string {
	q := func(s string) string { return strconv.Quote(s) }
	quoted := make([]string, len(disabledContainerdPlugins))
	for i, d := range disabledContainerdPlugins {
		quoted[i] = q(d)
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("version = 3")
	w("root = %s", q(p.path(dirContainerd)))
	w("state = %q", "/run/containerd")
	w("disabled_plugins = [%s]", strings.Join(quoted, ", "))
	w("")
	w("[grpc]")
	w("  address = %s", q(p.containerdSocket()))
	w("")
	w("[plugins.'io.containerd.cri.v1.runtime']")
	w("  enable_cdi = true")
	w("  cdi_spec_dirs = [%q]", "/var/run/cdi")
	w("  # Without CAP_SYS_RESOURCE runc cannot lower oom_score_adj, and every")
	w("  # sandbox fails: keep containers at or above containerd's score.")
	w("  restrict_oom_score_adj = true")
	w("  [plugins.'io.containerd.cri.v1.runtime'.containerd]")
	w("    default_runtime_name = %q", "runc")
	w("    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]")
	w("      runtime_type = %q", "io.containerd.runc.v2")
	w("      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]")
	w("        BinaryName = %s", q(p.RuncPath))
	w("        SystemdCgroup = false")
	w("  [plugins.'io.containerd.cri.v1.runtime'.cni]")
	w("    bin_dirs = [%s]", q(p.CNIBinDir))
	w("    conf_dir = %s", q(p.path(dirCNIConf)))
	w("")
	w("[plugins.'io.containerd.cri.v1.images']")
	w("  snapshotter = %q", "overlayfs")
	w("  [plugins.'io.containerd.cri.v1.images'.pinned_images]")
	w("    sandbox = %q", PauseImage)
	return b.String()
}

// cniConfig is the pod network: a bridge in the node's network namespace
// with host-local addresses from the node's pod CIDR. Pods reach the API
// server through the bridge's gateway (the node), so no masquerading.
func (p nodePlan) cniConfig() ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "drastack",
		"plugins": []any{map[string]any{
			"type":        "bridge",
			"bridge":      "cni0",
			"isGateway":   true,
			"ipMasq":      false,
			"hairpinMode": true,
			"ipam": map[string]any{
				"type":   "host-local",
				"ranges": []any{[]any{map[string]any{"subnet": p.PodCIDR.String(), "gateway": p.bridgeIP().String()}}},
				"routes": []any{map[string]any{"dst": "0.0.0.0/0"}},
			},
		}},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// featureGateMap turns a --feature-gates value into the map of
// configuration files.
func featureGateMap(flag string) (map[string]bool, error) {
	gates := map[string]bool{}
	for _, kv := range strings.Split(flag, ",") {
		if kv == "" {
			continue
		}
		name, value, ok := strings.Cut(kv, "=")
		v, err := strconv.ParseBool(value)
		if !ok || err != nil {
			return nil, fmt.Errorf("feature gate %q: want NAME=true|false", kv)
		}
		gates[name] = v
	}
	return gates, nil
}

// kubeletConfig is the KubeletConfiguration of the node: cgroupfs under
// the node's own cgroup root, containerd's socket, the pod logs in the
// node's folder, loose eviction and image GC thresholds (the disk is the
// machine's, shared), serving on the node's address only, clients
// authenticated by the node CA's certificates (the API server's) and
// authorised by the API server, and the cluster's feature gates.
func (p nodePlan) kubeletConfig() ([]byte, error) {
	gates, err := featureGateMap(p.FeatureGates)
	if err != nil {
		return nil, err
	}
	cfg := kubeletv1beta1.KubeletConfiguration{
		TypeMeta:           metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		Address:            p.NodeIP.String(),
		Port:               10250,
		HealthzBindAddress: "127.0.0.1",
		HealthzPort:        ptr.To[int32](10248),
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: p.path(dirPKI, "ca.crt")},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
		},
		Authorization:            kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		CgroupDriver:             "cgroupfs",
		CgroupRoot:               "/" + p.cgroupName(),
		FailCgroupV1:             ptr.To(false),
		FailSwapOn:               ptr.To(false),
		ContainerRuntimeEndpoint: "unix://" + p.containerdSocket(),
		PodLogsDir:               p.path(dirPodLogs),
		ResolverConfig:           ptr.To(p.path("resolv.conf")),
		EvictionHard: map[string]string{
			"memory.available":  "1Mi",
			"nodefs.available":  "1%",
			"nodefs.inodesFree": "1%",
			"imagefs.available": "1%",
		},
		ImageGCHighThresholdPercent: ptr.To[int32](100),
		ImageGCLowThresholdPercent:  ptr.To[int32](99),
		SerializeImagePulls:         ptr.To(false),
		FeatureGates:                gates,
	}
	return yaml.Marshal(cfg)
}

// kubeProxyConfig runs kube-proxy in nftables mode in the node's network
// namespace, so that pods reach Services (the API server's kubernetes
// Service first of all) by their cluster IP. It leaves the machine-wide
// conntrack settings and its own OOM score alone.
func (p nodePlan) kubeProxyConfig() ([]byte, error) {
	gates, err := featureGateMap(p.FeatureGates)
	if err != nil {
		return nil, err
	}
	cfg := map[string]any{
		"apiVersion":         "kubeproxy.config.k8s.io/v1alpha1",
		"kind":               "KubeProxyConfiguration",
		"mode":               "nftables",
		"clientConnection":   map[string]any{"kubeconfig": p.path(dirPKI, "kube-proxy.kubeconfig")},
		"hostnameOverride":   p.Name,
		"clusterCIDR":        p.PodCIDR.String(),
		"healthzBindAddress": "127.0.0.1:10256",
		"metricsBindAddress": "127.0.0.1:10249",
		"oomScoreAdj":        0,
		"conntrack": map[string]any{
			"maxPerCore":            0,
			"min":                   0,
			"tcpEstablishedTimeout": "0s",
			"tcpCloseWaitTimeout":   "0s",
		},
	}
	if len(gates) > 0 {
		cfg["featureGates"] = gates
	}
	return yaml.Marshal(cfg)
}

// kubeletArgs are the kubelet's flags: what its configuration file cannot
// say.
func (p nodePlan) kubeletArgs() []string {
	return []string{
		"--config=" + p.path("kubelet.yaml"),
		"--kubeconfig=" + p.path(dirPKI, "kubelet.kubeconfig"),
		"--root-dir=/var/lib/kubelet",
		"--cert-dir=" + p.path(dirPKI, "kubelet"),
		"--hostname-override=" + p.Name,
		"--node-ip=" + p.NodeIP.String(),
		"--node-labels=" + nodeLabelFlag(realNodeLabels(p.Name)),
	}
}

// nodeLabelFlag renders labels as --node-labels wants them, sorted.
func nodeLabelFlag(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + labels[k]
	}
	return strings.Join(parts, ",")
}
