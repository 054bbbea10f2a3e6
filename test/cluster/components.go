package cluster

import (
	"context"
	"crypto/tls"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// kwokStages makes kwok behave like a fast kubelet: nodes become Ready and
// keep heartbeating, pods bound to them become Running, deleted pods go
// away. kwok refuses to start without stages.
//
//go:embed stages/kwok-stages.yaml
var kwokStages []byte

// kwokPodCIDR is where kwok takes pod IPs from. Its default /24 runs out
// after 254 pods, which a benchmark passes quickly.
const kwokPodCIDR = "10.244.0.0/16"

// healthPollInterval is how often a starting component's /healthz is asked.
const healthPollInterval = 200 * time.Millisecond

// startComponents starts kube-scheduler, kube-controller-manager and kwok,
// each with its own system:masters identity, and waits until the first two
// answer /healthz.
func (c *Cluster) startComponents(ctx context.Context) error {
	// An empty --feature-gates= is accepted and changes nothing.
	gates := "--feature-gates=" + c.gateFlag
	verbosity := "--v=" + strconv.Itoa(c.opts.Verbosity)

	schedKubeconfig, err := c.writeUserKubeconfig("system:kube-scheduler")
	if err != nil {
		return err
	}
	schedPort, err := FreePort()
	if err != nil {
		return err
	}
	sched, err := c.start("kube-scheduler", append([]string{
		"--kubeconfig=" + schedKubeconfig,
		"--authentication-kubeconfig=" + schedKubeconfig,
		"--authorization-kubeconfig=" + schedKubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(schedPort),
		"--cert-dir=" + filepath.Join(c.Dir, "kube-scheduler"),
		"--leader-elect=false",
		gates, verbosity}, c.opts.SchedulerArgs...)...)
	if err != nil {
		return err
	}

	kcmKubeconfig, err := c.writeUserKubeconfig("system:kube-controller-manager")
	if err != nil {
		return err
	}
	kcmPort, err := FreePort()
	if err != nil {
		return err
	}
	kcmArgs := []string{
		"--kubeconfig=" + kcmKubeconfig,
		"--authentication-kubeconfig=" + kcmKubeconfig,
		"--authorization-kubeconfig=" + kcmKubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(kcmPort),
		"--cert-dir=" + filepath.Join(c.Dir, "kube-controller-manager"),
		"--leader-elect=false",
		// No service-account signing key is given to it, so the token
		// controller could only fail.
		"--controllers=*,-serviceaccount-token",
		gates, verbosity}
	if hb := c.opts.nodeHeartbeat(); hb > 0 {
		kcmArgs = append(kcmArgs, "--node-monitor-grace-period="+(4*hb).String())
	}
	kcm, err := c.start("kube-controller-manager", kcmArgs...)
	if err != nil {
		return err
	}

	kwokKubeconfig, err := c.writeUserKubeconfig("kwok")
	if err != nil {
		return err
	}
	stagesPath := filepath.Join(c.Dir, "kwok-stages.yaml")
	// Nodes report the release the cluster runs as their kubelet version.
	stages := strings.ReplaceAll(string(kwokStages), "KUBELET_VERSION", c.opts.version())
	// kwok manages the nodes NewNode marks as fake, never a real node (it
	// would overwrite the kubelet's status of it and its pods).
	kwokArgs := []string{"--kubeconfig=" + kwokKubeconfig, "--config=" + stagesPath,
		"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=" + KwokNodeAnnotationValue, "--cidr=" + kwokPodCIDR}
	if hb := c.opts.nodeHeartbeat(); hb > 0 {
		stages, err = slowHeartbeat(stages, hb)
		if err != nil {
			return err
		}
		kwokArgs = append(kwokArgs, "--node-lease-duration-seconds="+strconv.Itoa(int(4*hb/time.Second)))
	}
	if err := os.WriteFile(stagesPath, []byte(stages), 0o644); err != nil {
		return fmt.Errorf("write kwok stages: %w", err)
	}
	if _, err := c.start("kwok", kwokArgs...); err != nil {
		return err
	}

	for _, w := range []struct {
		comp *component
		port int
	}{{sched, schedPort}, {kcm, kcmPort}} {
		if err := c.waitHealthy(ctx, w.comp, w.port); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) start(name string, args ...string) (*component, error) {
	comp, err := startComponent(name, filepath.Join(c.BinaryDir, name), args, c.LogDir)
	if err != nil {
		return nil, err
	}
	c.components = append(c.components, comp)
	return comp, nil
}

// writeUserKubeconfig provisions a client certificate for user in group
// system:masters and writes a kubeconfig for it into the cluster folder.
func (c *Cluster) writeUserKubeconfig(user string) (string, error) {
	u, err := c.env.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("provision user %s: %w", user, err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		return "", fmt.Errorf("kubeconfig of %s: %w", user, err)
	}
	path := filepath.Join(c.Dir, strings.ReplaceAll(user, ":", "-")+".kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", fmt.Errorf("write kubeconfig of %s: %w", user, err)
	}
	return path, nil
}

// waitHealthy polls https://127.0.0.1:port/healthz of a component until it
// answers 200, the component exits, or the start timeout passes.
func (c *Cluster) waitHealthy(ctx context.Context, comp *component, port int) error {
	client := &http.Client{
		Timeout: 2 * time.Second,
		// The component serves a self-signed certificate; only liveness
		// matters here.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec
	}
	defer client.CloseIdleConnections()
	url := "https://127.0.0.1:" + strconv.Itoa(port) + "/healthz"
	ctx, cancel := context.WithTimeout(ctx, c.opts.startTimeout())
	defer cancel()
	var lastErr error
	for {
		if done, err := comp.exited(); done {
			return comp.failure(fmt.Errorf("exited while starting: %w", err))
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("health request for %s: %w", comp.name, err)
		}
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s answered %s", url, resp.Status)
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return comp.failure(fmt.Errorf("not healthy after %s: %w", c.opts.startTimeout(), lastErr))
		case <-time.After(healthPollInterval):
		}
	}
}

// FreePort asks the kernel for a loopback port that is free right now. The
// component binds it a moment later; on a test machine nothing else races
// for it in that window often enough to matter.
func FreePort() (int, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// FreePorts returns n distinct free ports of the loopback address. Each
// listener stays open until all n are found: ports asked for one after
// another, each closed at once, can come back twice (a replica's metrics
// and webhook servers were once given the same port).
func FreePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// heartbeatDelay is the delay of the heartbeat stage in kwok-stages.yaml:
// between 10 and 15 s (kwok's jitter is the upper bound of the interval).
const heartbeatDelay = "    durationMilliseconds: 10000\n    jitterDurationMilliseconds: 15000\n"

// slowHeartbeat rewrites the heartbeat stage of the stages document so
// that a node posts its heartbeat every hb to 1.5 x hb.
func slowHeartbeat(stages string, hb time.Duration) (string, error) {
	if strings.Count(stages, heartbeatDelay) != 1 {
		return "", errors.New("kwok stages: the heartbeat stage's delay is not the one expected; update heartbeatDelay with the stages file")
	}
	ms := hb.Milliseconds()
	return strings.Replace(stages, heartbeatDelay,
		fmt.Sprintf("    durationMilliseconds: %d\n    jitterDurationMilliseconds: %d\n", ms, ms*3/2), 1), nil
}
