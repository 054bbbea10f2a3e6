package cluster

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

func testPlan(t *testing.T, slot int) nodePlan {
	t.Helper()
	p, err := planNode("real-node-0", slot, "/tmp/c/n0")
	if err != nil {
		t.Fatal(err)
	}
	p.APIServerPort = 43210
	p.RuncPath = "/usr/sbin/runc"
	p.CNIBinDir = "/usr/lib/cni"
	p.FeatureGates = "DRAPartitionableDevices=true,DRAListTypeAttributes=false"
	return p
}

func TestPlanNode(t *testing.T) {
	tests := []struct {
		slot                         int
		host, node, link, pods, veth string
	}{
		{0, "10.213.0.1", "10.213.0.2", "10.213.0.0/30", "10.214.0.0/24", "drsnode0"},
		{7, "10.213.7.1", "10.213.7.2", "10.213.7.0/30", "10.214.7.0/24", "drsnode7"},
		{maxSlots - 1, "10.213.63.1", "10.213.63.2", "10.213.63.0/30", "10.214.63.0/24", "drsnode63"},
	}
	for _, tt := range tests {
		p := testPlan(t, tt.slot)
		if p.HostIP.String() != tt.host || p.NodeIP.String() != tt.node || p.LinkPrefix.String() != tt.link ||
			p.PodCIDR.String() != tt.pods || p.hostVeth() != tt.veth {
			t.Errorf("slot %d: %s %s %s %s %s", tt.slot, p.HostIP, p.NodeIP, p.LinkPrefix, p.PodCIDR, p.hostVeth())
		}
		if !p.LinkPrefix.Contains(p.HostIP) || !p.LinkPrefix.Contains(p.NodeIP) || p.PodCIDR.Overlaps(p.LinkPrefix) {
			t.Errorf("slot %d: addresses outside their prefixes", tt.slot)
		}
		if len(p.hostVeth()) > 15 {
			t.Errorf("slot %d: interface name %q longer than the kernel's 15 characters", tt.slot, p.hostVeth())
		}
		if got := p.apiServerURL(); got != "https://"+tt.host+":43210" {
			t.Errorf("slot %d: API server URL %s", tt.slot, got)
		}
	}
	for _, bad := range []int{-1, maxSlots} {
		if _, err := planNode("x", bad, "/d"); err == nil {
			t.Errorf("slot %d accepted", bad)
		}
	}
	// No two slots share an address.
	seen := map[netip.Prefix]int{}
	for s := 0; s < maxSlots; s++ {
		p := testPlan(t, s)
		for _, pr := range []netip.Prefix{p.LinkPrefix, p.PodCIDR} {
			for other, os := range seen {
				if other.Overlaps(pr) {
					t.Fatalf("slots %d and %d overlap: %s %s", s, os, other, pr)
				}
			}
		}
		seen[p.LinkPrefix], seen[p.PodCIDR] = s, s
	}
}

func TestSetupScript(t *testing.T) {
	s := testPlan(t, 3).setupScript()
	lines := strings.Split(s, "\n")
	index := func(prefix string) int {
		for i, l := range lines {
			if strings.HasPrefix(l, prefix) {
				return i
			}
		}
		t.Fatalf("setup script lacks %q:\n%s", prefix, s)
		return -1
	}
	private := index("mount --make-rprivate /")
	// Everything else is mounted after the namespace is private.
	for _, l := range []string{"mount --rbind /sys/fs/cgroup", "mount -t sysfs", "mount -t proc", "mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run",
		"mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /var/lib", "mount --bind '/tmp/c/n0/kubelet' /var/lib/kubelet", "mount --bind '/tmp/c/n0/cdi' /var/run/cdi"} {
		if i := index(l); i < private {
			t.Errorf("%q before the mount namespace is private", l)
		}
	}
	// The kubelet folder is mounted on the private /var/lib, not on the machine's.
	if index("mount --bind '/tmp/c/n0/kubelet' /var/lib/kubelet") < index("mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /var/lib") {
		t.Error("/var/lib/kubelet bound before /var/lib is private")
	}
	if index("mount --move") < index("mount -t sysfs") {
		t.Error("the cgroup hierarchies come back before sysfs is replaced")
	}
	for _, want := range []string{"set -eu", "hostname 'real-node-0'", "ip addr add 10.213.3.2/30 dev eth0", "ip route add default via 10.213.3.1 dev eth0",
		"echo 1 > /proc/sys/net/ipv4/ip_forward"} {
		index(want)
	}
}

func TestContainerdConfig(t *testing.T) {
	cfg := testPlan(t, 0).containerdConfig()
	for _, want := range []string{
		"version = 3",
		`root = "/tmp/c/n0/containerd"`,
		`state = "/run/containerd"`,
		`address = "/tmp/c/n0/containerd.sock"`,
		"enable_cdi = true",
		`cdi_spec_dirs = ["/var/run/cdi"]`,
		"restrict_oom_score_adj = true",
		`BinaryName = "/usr/sbin/runc"`,
		"SystemdCgroup = false",
		`bin_dirs = ["/usr/lib/cni"]`,
		`conf_dir = "/tmp/c/n0/cni"`,
		`snapshotter = "overlayfs"`,
		`sandbox = "` + PauseImage + `"`,
		`"io.containerd.internal.v1.opt"`,
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("containerd config lacks %s:\n%s", want, cfg)
		}
	}
}

func TestCNIConfig(t *testing.T) {
	data, err := testPlan(t, 5).cniConfig()
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		CNIVersion string `json:"cniVersion"`
		Plugins    []struct {
			Type   string `json:"type"`
			IPMasq bool   `json:"ipMasq"`
			IPAM   struct {
				Type   string `json:"type"`
				Ranges [][]struct {
					Subnet, Gateway string
				} `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &conf); err != nil {
		t.Fatal(err)
	}
	if conf.CNIVersion != "1.0.0" || len(conf.Plugins) != 1 || conf.Plugins[0].Type != "bridge" || conf.Plugins[0].IPMasq ||
		conf.Plugins[0].IPAM.Type != "host-local" || conf.Plugins[0].IPAM.Ranges[0][0].Subnet != "10.214.5.0/24" ||
		conf.Plugins[0].IPAM.Ranges[0][0].Gateway != "10.214.5.1" {
		t.Errorf("CNI config: %s", data)
	}
}

func TestKubeletConfig(t *testing.T) {
	data, err := testPlan(t, 2).kubeletConfig()
	if err != nil {
		t.Fatal(err)
	}
	var cfg kubeletv1beta1.KubeletConfiguration
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatalf("the kubelet configuration does not decode strictly: %v\n%s", err, data)
	}
	if cfg.Kind != "KubeletConfiguration" || cfg.APIVersion != "kubelet.config.k8s.io/v1beta1" {
		t.Errorf("type %s %s", cfg.APIVersion, cfg.Kind)
	}
	checks := []struct {
		what string
		ok   bool
	}{
		{"serves on the node address only", cfg.Address == "10.213.2.2"},
		{"cgroupfs", cfg.CgroupDriver == "cgroupfs"},
		{"own cgroup root", cfg.CgroupRoot == "/drastack-node-2"},
		{"cgroup v1 allowed", cfg.FailCgroupV1 != nil && !*cfg.FailCgroupV1},
		{"swap allowed", cfg.FailSwapOn != nil && !*cfg.FailSwapOn},
		{"containerd socket", cfg.ContainerRuntimeEndpoint == "unix:///tmp/c/n0/containerd.sock"},
		{"pod logs in the node folder", cfg.PodLogsDir == "/tmp/c/n0/pod-logs"},
		{"no anonymous requests", cfg.Authentication.Anonymous.Enabled != nil && !*cfg.Authentication.Anonymous.Enabled},
		{"client CA", cfg.Authentication.X509.ClientCAFile == "/tmp/c/n0/pki/ca.crt"},
		{"authorised by the API server", cfg.Authorization.Mode == kubeletv1beta1.KubeletAuthorizationModeWebhook},
		{"image GC off", cfg.ImageGCHighThresholdPercent != nil && *cfg.ImageGCHighThresholdPercent == 100},
		{"loose eviction", cfg.EvictionHard["nodefs.available"] == "1%"},
		{"gates", cfg.FeatureGates["DRAPartitionableDevices"] && !cfg.FeatureGates["DRAListTypeAttributes"] && len(cfg.FeatureGates) == 2},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("kubelet configuration: %s: no\n%s", c.what, data)
		}
	}
	args := strings.Join(testPlan(t, 2).kubeletArgs(), " ")
	for _, want := range []string{"--root-dir=/var/lib/kubelet", "--node-ip=10.213.2.2", "--hostname-override=real-node-0", "--node-labels=type=real"} {
		if !strings.Contains(args, want) {
			t.Errorf("kubelet args %q lack %s", args, want)
		}
	}
}

func TestKubeProxyConfig(t *testing.T) {
	data, err := testPlan(t, 1).kubeProxyConfig()
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	conntrack, _ := cfg["conntrack"].(map[string]any)
	if cfg["mode"] != "nftables" || cfg["hostnameOverride"] != "real-node-0" || cfg["clusterCIDR"] != "10.214.1.0/24" ||
		conntrack["maxPerCore"] != float64(0) || cfg["oomScoreAdj"] != float64(0) {
		t.Errorf("kube-proxy configuration:\n%s", data)
	}
}

func TestFeatureGateMap(t *testing.T) {
	got, err := featureGateMap("A=true,B=false,")
	if err != nil || len(got) != 2 || !got["A"] || got["B"] {
		t.Errorf("got %v %v", got, err)
	}
	for _, bad := range []string{"A", "A=yes", "=true=false"} {
		if _, err := featureGateMap(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseProcRoutes(t *testing.T) {
	table := `Iface	Destination	Gateway 	Flags	RefCnt	Use	Metric	Mask		MTU	Window	IRTT
eth0	00000000	010200C0	0003	0	0	0	00000000	0	0	0
eth0	000200C0	00000000	0001	0	0	0	00FFFFFF	0	0	0
drsnode0	0000D60A	0200D50A	0003	0	0	0	00FFFFFF	0	0	0
`
	got, err := parseProcRoutes(table)
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("10.214.0.0/24")}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got %v, want %v", got, want)
	}
	if _, err := parseProcRoutes("h\neth0 zz 0 0 0 0 0 00FFFFFF\n"); err == nil {
		t.Error("a bad destination was accepted")
	}
	if !overlaps(got, netip.MustParsePrefix("10.214.0.0/24")) || overlaps(got, netip.MustParsePrefix("10.214.1.0/24"), netip.MustParsePrefix("10.213.1.0/30")) {
		t.Error("overlaps is wrong")
	}
}

func TestNodeLabelFlag(t *testing.T) {
	if got := nodeLabelFlag(map[string]string{"b": "2", "a": "1"}); got != "a=1,b=2" {
		t.Errorf("got %q", got)
	}
}
