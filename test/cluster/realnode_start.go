//go:build linux

package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/drastack/drastack/internal/ociimage"
	"github.com/drastack/drastack/internal/pki"
)

// realNodes is the state of a cluster's real nodes: what is set up
// before the API server starts (slots, addresses, certificates) and what
// runs afterwards.
type realNodes struct {
	binDir string
	plans  []nodePlan
	locks  []*slotLock
	ca     *pki.CA
	// pki holds the API server's files that the real nodes need it to
	// use.
	pki string

	nodes      []*RealNode
	forwarders []*forwarder
}

// prepareRealNodes checks that this machine can run the real nodes,
// takes a slot for each (cleaning what a killed run left in it), and
// makes the certificates the API server must use so that nodes and pods
// can reach it.
func (c *Cluster) prepareRealNodes() error {
	n := c.opts.RealNodes
	if n < 0 || n > maxRealNodes {
		return fmt.Errorf("Options.RealNodes: %d, want 0 to %d", n, maxRealNodes)
	}
	binDir, binErr := ResolveNodeBinaryDir(c.opts.NodeBinaryDir, c.opts.version())
	if err := thisMachine().check(binDir, binErr); err != nil {
		return err
	}
	r := &realNodes{binDir: binDir, pki: filepath.Join(c.Dir, "pki")}
	c.real = r
	locks, err := takeSlots(n)
	if err != nil {
		return err
	}
	r.locks = locks
	for i, l := range locks {
		p, err := planNode(RealNodeName(i), l.slot, filepath.Join(c.Dir, "n"+strconv.Itoa(i)))
		if err != nil {
			return err
		}
		r.plans = append(r.plans, p)
	}
	if r.ca, err = pki.NewCA("drastack-local-cluster", certValidity); err != nil {
		return err
	}
	return nil
}

// takeSlots takes n free slots of this machine. It looks at every slot it
// can lock: a slot whose lock no live process holds may still hold what a
// killed run left (cgroups, a veth), which is removed first. A slot whose
// addresses this machine already routes is skipped.
func takeSlots(n int) ([]*slotLock, error) {
	routes, err := machineRoutes()
	if err != nil {
		return nil, err
	}
	var taken []*slotLock
	for slot := 0; slot < maxSlots; slot++ {
		l, err := tryLockSlot(slot)
		if err != nil {
			releaseSlots(taken)
			return nil, err
		}
		if l == nil {
			continue // a live run holds it
		}
		p, _ := planNode("", slot, "")
		if err := l.cleanStale(p); err != nil {
			l.release()
			releaseSlots(taken)
			return nil, fmt.Errorf("clean real node slot %d left by a run that was killed: %w", slot, err)
		}
		if len(taken) == n || overlaps(routes, p.LinkPrefix, p.PodCIDR) {
			l.release()
			continue
		}
		taken = append(taken, l)
	}
	if len(taken) < n {
		releaseSlots(taken)
		return nil, fmt.Errorf("no free real node slot on this machine (%d slots, each taken by a running cluster or its addresses routed)", maxSlots)
	}
	return taken, nil
}

func releaseSlots(locks []*slotLock) {
	for _, l := range locks {
		l.release()
	}
}

// machineRoutes are the destinations this machine routes and its own
// addresses, which a node's addresses must not overlap.
func machineRoutes() ([]netip.Prefix, error) {
	data, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return nil, fmt.Errorf("read routes: %w", err)
	}
	routes, err := parseProcRoutes(string(data))
	if err != nil {
		return nil, err
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
			routes = append(routes, p.Masked())
		}
	}
	return routes, nil
}

// configureAPIServer makes the API server reachable from the real nodes
// and their pods, and able to reach their kubelets and webhooks: a
// serving certificate of the cluster's CA that names the machine's end of
// each veth pair and the kubernetes Service's cluster IP, the address the
// kubernetes Service points at (relayed to the loopback address), node
// addresses before host names, the client certificate kubelets trust,
// webhooks called on their endpoints (there is no kube-proxy on this
// machine's side), and the ServiceAccount admission plugin, so pods get
// their tokens.
func (r *realNodes) configureAPIServer(api *envtest.APIServer) error {
	if len(r.plans) == 0 {
		return nil
	}
	hosts := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "127.0.0.1", kubernetesServiceIP}
	for _, p := range r.plans {
		hosts = append(hosts, p.HostIP.String())
	}
	serving, servingKey, err := r.ca.Issue(pki.Leaf{
		CommonName: "kube-apiserver",
		Hosts:      hosts,
		Server:     true,
		Validity:   certValidity,
	})
	if err != nil {
		return err
	}
	kubeletClient, kubeletClientKey, err := r.ca.Issue(pki.Leaf{
		CommonName:    "drastack:kube-apiserver-kubelet-client",
		Organizations: []string{"system:masters"},
		Validity:      certValidity,
	})
	if err != nil {
		return err
	}
	// envtest keeps a serving certificate it finds in its folder, and then
	// neither makes its own CA nor the service-account keys.
	if err := writeFiles(map[string][]byte{
		filepath.Join(api.CertDir, "apiserver.crt"): serving,
		filepath.Join(api.CertDir, "apiserver.key"): servingKey,
		filepath.Join(r.pki, "kubelet-client.crt"):  kubeletClient,
		filepath.Join(r.pki, "kubelet-client.key"):  kubeletClientKey,
		filepath.Join(r.pki, "ca.crt"):              r.ca.PEM,
	}); err != nil {
		return err
	}
	saKey, saPub := filepath.Join(r.pki, "sa.key"), filepath.Join(r.pki, "sa.pub")
	saKeyPEM, saPubPEM, err := pki.KeyPair()
	if err != nil {
		return err
	}
	if err := writeFiles(map[string][]byte{saKey: saKeyPEM, saPub: saPubPEM}); err != nil {
		return err
	}
	api.SecureServing.CA = r.ca.PEM
	args := api.Configure()
	args.Set("service-account-key-file", saPub)
	args.Set("service-account-signing-key-file", saKey)
	args.Set("advertise-address", r.plans[0].HostIP.String())
	args.Set("kubelet-preferred-address-types", "InternalIP,Hostname")
	args.Set("kubelet-client-certificate", filepath.Join(r.pki, "kubelet-client.crt"))
	args.Set("kubelet-client-key", filepath.Join(r.pki, "kubelet-client.key"))
	args.Set("enable-aggregator-routing", "true")
	args.Disable("disable-admission-plugins")
	return nil
}

// kubernetesServiceIP is the cluster IP of the kubernetes Service: the
// first address of envtest's service range (10.0.0.0/24).
const kubernetesServiceIP = "10.0.0.1"

// startRealNodes starts every planned node and waits until it is Ready.
func (c *Cluster) startRealNodes(ctx context.Context) error {
	r := c.real
	apiURL, err := url.Parse(c.Config.Host)
	if err != nil {
		return fmt.Errorf("API server address %q: %w", c.Config.Host, err)
	}
	port, err := strconv.Atoi(apiURL.Port())
	if err != nil {
		return fmt.Errorf("API server port of %q: %w", c.Config.Host, err)
	}
	pause := filepath.Join(c.Dir, "bin", "pause")
	if err := GoBuild(ctx, pause, "./test/cluster/cmd/pause"); err != nil {
		return err
	}
	base, err := c.baseImages(ctx, pause)
	if err != nil {
		return err
	}
	for i := range r.plans {
		p := &r.plans[i]
		p.APIServerPort = port
		p.RuncPath = "/usr/sbin/runc"
		p.CNIBinDir = "/usr/lib/cni"
		p.BinDir = r.binDir
		p.FeatureGates = c.gateFlag
		begin := time.Now()
		n, err := c.startRealNode(ctx, *p, r.locks[i], pause, base)
		if err != nil {
			return err
		}
		c.RealNodes = append(c.RealNodes, n)
		c.opts.logf("real node %s Ready after %s (pods %s, node %s)", n.Name, time.Since(begin).Round(100*time.Millisecond), n.PodCIDR, n.IP)
	}
	return nil
}

// baseImages builds the pause and busybox images every node holds.
func (c *Cluster) baseImages(ctx context.Context, pausePath string) ([]ociimage.Tagged, error) {
	pause, err := BuildPauseImage(pausePath)
	if err != nil {
		return nil, err
	}
	busybox, err := BuildBusyboxImage(ctx, "/bin/busybox")
	if err != nil {
		return nil, err
	}
	return []ociimage.Tagged{{Ref: PauseImage, Image: pause}, {Ref: BusyboxImage, Image: busybox}}, nil
}

// startRealNode sets up one node: files, cgroups, namespaces, network,
// containerd (with the base images), kube-proxy and the kubelet, then
// waits for the Node to be Ready.
func (c *Cluster) startRealNode(ctx context.Context, p nodePlan, lock *slotLock, pausePath string, base []ociimage.Tagged) (*RealNode, error) {
	n := &RealNode{
		Name:              p.Name,
		IP:                p.NodeIP.String(),
		HostIP:            p.HostIP.String(),
		PodCIDR:           p.PodCIDR.String(),
		Dir:               p.Dir,
		KubeletDir:        p.path(dirKubelet),
		CDIDir:            p.path(dirCDI),
		ContainerdAddress: p.containerdSocket(),
		plan:              p,
		ctrPath:           filepath.Join(p.BinDir, "ctr"),
		logDir:            c.LogDir,
	}
	if err := c.writeNodeFiles(p); err != nil {
		return nil, err
	}
	if err := prepareCgroup("/sys/fs/cgroup", p.cgroupName()); err != nil {
		return nil, err
	}
	sb, err := startSandbox(p.Name+"-sandbox", pausePath, c.LogDir)
	if err != nil {
		return nil, err
	}
	c.components = append(c.components, sb.comp)
	n.sandbox = sb
	c.real.nodes = append(c.real.nodes, n)
	lock.record(sb.pid)
	if err := connectNode(ctx, p, sb.pid); err != nil {
		return nil, err
	}
	if err := sb.run(ctx, "/bin/sh", "-c", p.setupScript()); err != nil {
		return nil, fmt.Errorf("set up node %s: %w", p.Name, err)
	}
	if err := routePods(ctx, p); err != nil {
		return nil, err
	}
	fw, err := forward(netip.AddrPortFrom(p.HostIP, uint16(p.APIServerPort)).String(), "127.0.0.1:"+strconv.Itoa(p.APIServerPort))
	if err != nil {
		return nil, err
	}
	c.real.forwarders = append(c.real.forwarders, fw)

	// The shim is found on containerd's PATH.
	env := []string{"PATH=" + p.BinDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	containerd, err := sb.start(p.Name+"-containerd", c.LogDir, env, filepath.Join(p.BinDir, "containerd"), "--config="+p.path("containerd.toml"))
	if err != nil {
		return nil, err
	}
	c.components = append(c.components, containerd)
	if err := waitFor(ctx, realNodeStartTimeout, containerd, func() error {
		out, err := exec.CommandContext(ctx, n.ctrPath, "--address", n.ContainerdAddress, "version").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := n.Import(ctx, base...); err != nil {
		return nil, err
	}

	proxy, err := sb.start(p.Name+"-kube-proxy", c.LogDir, env, filepath.Join(p.BinDir, "kube-proxy"),
		"--config="+p.path("kube-proxy.yaml"), "--v="+strconv.Itoa(c.opts.Verbosity))
	if err != nil {
		return nil, err
	}
	c.components = append(c.components, proxy)
	kubelet, err := sb.start(p.Name+"-kubelet", c.LogDir, env,
		append([]string{filepath.Join(p.BinDir, "kubelet")}, append(p.kubeletArgs(), "--v="+strconv.Itoa(c.opts.Verbosity))...)...)
	if err != nil {
		return nil, err
	}
	c.components = append(c.components, kubelet)
	if err := waitFor(ctx, realNodeStartTimeout, kubelet, func() error {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !NodeReady(node) {
			return errors.New("not Ready")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return n, nil
}

// writeNodeFiles writes the node's folders, configuration files and
// kubeconfigs.
func (c *Cluster) writeNodeFiles(p nodePlan) error {
	for _, d := range []string{dirKubelet, dirCDI, dirContainerd, dirCNIConf, dirPodLogs, dirPKI} {
		if err := os.MkdirAll(p.path(d), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", p.path(d), err)
		}
	}
	kubelet, err := p.kubeletConfig()
	if err != nil {
		return err
	}
	proxy, err := p.kubeProxyConfig()
	if err != nil {
		return err
	}
	cni, err := p.cniConfig()
	if err != nil {
		return err
	}
	resolv, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		resolv = nil // pods then get no name servers, which they do not need
	}
	files := map[string][]byte{
		p.path("containerd.toml"):                  []byte(p.containerdConfig()),
		p.path("kubelet.yaml"):                     kubelet,
		p.path("kube-proxy.yaml"):                  proxy,
		p.path(dirCNIConf, "10-drastack.conflist"): cni,
		p.path("resolv.conf"):                      resolv,
		p.path(dirPKI, "ca.crt"):                   c.real.ca.PEM,
	}
	if err := writeFiles(files); err != nil {
		return err
	}
	// The kubelet and kube-proxy run as administrators, like the other
	// components of this cluster; the kubelet with a node's name and group.
	for _, u := range []struct {
		file string
		user envtest.User
	}{
		{"kubelet.kubeconfig", envtest.User{Name: "system:node:" + p.Name, Groups: []string{"system:nodes", "system:masters"}}},
		{"kube-proxy.kubeconfig", envtest.User{Name: "system:kube-proxy", Groups: []string{"system:masters"}}},
	} {
		if err := c.writeNodeKubeconfig(p, u.file, u.user); err != nil {
			return err
		}
	}
	return nil
}

// writeNodeKubeconfig provisions a client certificate and writes a
// kubeconfig that reaches the API server on the machine's end of the
// node's veth pair.
func (c *Cluster) writeNodeKubeconfig(p nodePlan, file string, user envtest.User) error {
	u, err := c.env.AddUser(user, nil)
	if err != nil {
		return fmt.Errorf("provision user %s: %w", user.Name, err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig of %s: %w", user.Name, err)
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		return fmt.Errorf("kubeconfig of %s: %w", user.Name, err)
	}
	for _, cl := range kc.Clusters {
		cl.Server = p.apiServerURL()
	}
	if err := clientcmd.WriteToFile(*kc, p.path(dirPKI, file)); err != nil {
		return fmt.Errorf("write kubeconfig of %s: %w", user.Name, err)
	}
	return nil
}

// waitFor polls check until it succeeds, the component exits, or timeout
// passes; failures carry the component's log tail.
func waitFor(ctx context.Context, timeout time.Duration, comp *component, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := check()
		if err == nil {
			return nil
		}
		if done, exitErr := comp.exited(); done {
			return comp.failure(fmt.Errorf("exited while starting: %w", exitErr))
		}
		select {
		case <-ctx.Done():
			return comp.failure(fmt.Errorf("not ready after %s: %w", timeout, err))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// stopRealNodes runs after every component was stopped: it waits until
// the kernel has ended every process of the nodes' namespaces, closes the
// relays to the API server, removes the nodes' cgroups and releases their
// slots.
func (r *realNodes) stop() error {
	var errs []error
	for _, n := range r.nodes {
		if n.sandbox != nil {
			if err := waitNamespacesGone(n.sandbox.namespaces, 30*time.Second); err != nil {
				errs = append(errs, fmt.Errorf("node %s: %w", n.Name, err))
			}
		}
	}
	for _, f := range r.forwarders {
		if err := f.close(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range r.plans {
		if err := removeCgroup("/sys/fs/cgroup", p.cgroupName(), 30*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	releaseSlots(r.locks)
	return errors.Join(errs...)
}
