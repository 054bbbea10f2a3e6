//go:build e2e

package realnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drastack/drastack/test/cluster"
)

// runTrace is what one run of a real node puts on this machine.
type runTrace struct {
	dir        string   // the cluster folder
	namespaces []string // the node's namespaces ("net:[...]")
	veth       string   // the machine's end of the veth pair
	cgroup     string   // the node's cgroup root
}

// remains lists what of a run is still on this machine.
func (r runTrace) remains(t *testing.T) []string {
	t.Helper()
	var out []string
	if alive := cluster.NamespacesAlive(r.namespaces); len(alive) > 0 {
		out = append(out, fmt.Sprintf("processes in namespaces %v", alive))
	}
	if _, err := os.Stat("/sys/class/net/" + r.veth); err == nil {
		out = append(out, "interface "+r.veth)
	}
	if cg, _ := filepath.Glob("/sys/fs/cgroup/*/" + r.cgroup); len(cg) > 0 {
		out = append(out, fmt.Sprintf("cgroups %v", cg))
	}
	if _, err := os.Stat(r.dir); err == nil {
		out = append(out, "folder "+r.dir)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		if strings.Contains(line, r.dir) || strings.Contains(line, r.cgroup) {
			out = append(out, "mount "+line)
		}
	}
	return out
}

// sandboxOf finds the pause process a run started as its node's first
// process, and its namespaces.
func sandboxOf(t *testing.T, parent int) []string {
	t.Helper()
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		stat, err := os.ReadFile(filepath.Join("/proc", p.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(stat)
		end := strings.LastIndexByte(s, ')')
		if end < 0 || !strings.HasSuffix(s[:end], "(pause") {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 2 || f[1] != strconv.Itoa(parent) {
			continue
		}
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			t.Fatal(err)
		}
		ids, err := cluster.ProcessNamespaces(pid)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	t.Fatalf("no sandbox process of run %d", parent)
	return nil
}

// TestKilledRunThenANewRun kills a run with a real node (kill -9 of the
// process that started it, a pod running on the node), checks that the
// kernel took its processes, namespaces, mounts and interface with it,
// then starts a new run on the same machine, which removes what was left
// (cgroup folders, the cluster folder), and stops it: nothing of either
// run remains.
func TestKilledRunThenANewRun(t *testing.T) {
	c, _ := realNode(t)
	ctx := context.Background()
	bin := filepath.Join(binDir, "localcluster")
	if err := cluster.GoBuild(ctx, bin, "./test/cluster/cmd/localcluster"); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	kubeconfig := filepath.Join(work, "kubeconfig")
	cmd := exec.Command(bin, "-nodes", "0", "-real-nodes", "1", "-kubeconfig", kubeconfig, "-log-dir", filepath.Join(work, "logs"))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	var nodeIP string
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		line := lines.Text()
		if rest, ok := strings.CutPrefix(line, "real node: "); ok {
			for _, f := range strings.Fields(rest) {
				if v, ok := strings.CutPrefix(f, "ip="); ok {
					nodeIP = v
				}
			}
		}
		if strings.HasPrefix(line, "cluster ready") {
			break
		}
	}
	if nodeIP == "" {
		t.Fatal("the run reported no real node")
	}
	// The slot is the third byte of the node's address (10.213.<slot>.2).
	slot := strings.Split(nodeIP, ".")[2]
	trace := runTrace{veth: "drsnode" + slot, cgroup: "drastack-node-" + slot, namespaces: sandboxOf(t, cmd.Process.Pid)}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "drastack-cluster-*"))
	for _, d := range dirs {
		if owner, err := os.ReadFile(filepath.Join(d, "owner.pid")); err == nil && strings.TrimSpace(string(owner)) == strconv.Itoa(cmd.Process.Pid) {
			trace.dir = d
		}
	}
	if trace.dir == "" {
		t.Fatal("no cluster folder of the run")
	}

	// A pod runs on its node: a shim and a container besides the node.
	kubectl := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, filepath.Join(c.BinaryDir, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := kubectl("run", "sleeper", "--image="+cluster.BusyboxImage, "--image-pull-policy=Never", "--restart=Never", "--command", "--", "sleep", "3600"); err != nil {
		t.Fatalf("kubectl run: %v: %s", err, out)
	}
	eventually(ctx, t, "the killed run's pod running", func(context.Context) error {
		out, err := kubectl("get", "pod", "sleeper", "-o", "jsonpath={.status.phase}")
		if err != nil || out != "Running" {
			return fmt.Errorf("%s %v", out, err)
		}
		return nil
	})
	if got := trace.remains(t); len(got) < 4 {
		t.Fatalf("the run shows only %v: the checks below would prove nothing", got)
	}

	begin := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed = true
	eventually(ctx, t, "the kernel ends the killed run's node", func(context.Context) error {
		var left []string
		for _, r := range trace.remains(t) {
			if !strings.HasPrefix(r, "cgroups ") && !strings.HasPrefix(r, "folder ") {
				left = append(left, r)
			}
		}
		if len(left) > 0 {
			return errors.New(strings.Join(left, "; "))
		}
		return nil
	})
	t.Logf("timing: the killed run's processes, namespaces, mounts and interface gone %s after kill -9; left: %v",
		time.Since(begin).Round(100*time.Millisecond), trace.remains(t))

	// A new run on the same machine.
	next, err := cluster.Start(ctx, cluster.Options{RealNodes: 1, StartTimeout: 3 * time.Minute})
	if err != nil {
		t.Fatalf("a new run after the killed one: %v", err)
	}
	n := next.RealNodes[0]
	nextTrace := runTrace{dir: next.Dir, namespaces: n.Namespaces(), veth: n.HostInterface(), cgroup: n.CgroupName()}
	if got := trace.remains(t); len(got) > 0 && nextTrace.cgroup != trace.cgroup {
		t.Errorf("the new run left what the killed run left: %v", got)
	}
	if _, err := os.Stat(trace.dir); err == nil {
		t.Errorf("the killed run's folder %s is still there", trace.dir)
	}
	if err := next.Stop(); err != nil {
		t.Fatalf("stop the new run: %v", err)
	}
	for _, r := range []runTrace{trace, nextTrace} {
		if got := r.remains(t); len(got) > 0 {
			t.Errorf("after the new run stopped, left of run %s: %v", r.dir, got)
		}
	}
}
