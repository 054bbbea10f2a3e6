//go:build linux

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
	"syscall"
	"time"
)

// sandbox is the first process of a node's namespaces: the pause program
// as process 1 of a new PID namespace, with new mount, network, UTS and
// IPC namespaces. Every other process of the node enters them through
// nsenter. When it dies (Stop, or the parent-death signal when the process
// that started the cluster is killed), the kernel kills every process of
// the PID namespace, and the namespaces, their mounts and the node's end
// of the veth pair (and so the machine's end) go with them.
type sandbox struct {
	comp    *component
	pid     int
	nsenter string
	// namespaces are the node's namespace identities, as /proc/PID/ns
	// shows them.
	namespaces []string
}

// sandboxNamespaces are the namespaces a sandbox makes and nsenter joins.
const sandboxCloneFlags = syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC

// startSandbox starts the pause program in new namespaces.
func startSandbox(name, pausePath, logDir string) (*sandbox, error) {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return nil, &UnsupportedError{Missing: "no nsenter on PATH (util-linux)"}
	}
	comp, err := startComponentWith(name, pausePath, nil, logDir, procOptions{attr: &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Cloneflags: sandboxCloneFlags,
	}})
	if err != nil {
		return nil, err
	}
	s := &sandbox{comp: comp, pid: comp.cmd.Process.Pid, nsenter: nsenter}
	if s.namespaces, err = ProcessNamespaces(s.pid); err != nil {
		_ = comp.stop()
		return nil, fmt.Errorf("namespaces of %s: %w", name, err)
	}
	return s, nil
}

// enterArgs are nsenter's arguments to run a command in the sandbox's
// namespaces, with / as working directory; the command follows.
func (s *sandbox) enterArgs() []string {
	return []string{"--target=" + strconv.Itoa(s.pid), "--mount", "--net", "--uts", "--ipc", "--pid", "--wd=/", "--"}
}

// run runs a command in the sandbox and waits for it.
func (s *sandbox) run(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, s.nsenter, append(s.enterArgs(), args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s in the node's namespaces: %w: %s", args[0], err, bytes.TrimSpace(out))
	}
	return nil
}

// start runs a long-lived command of the node (containerd, kube-proxy,
// kubelet) in the sandbox as a component. nsenter forks the command into
// the PID namespace and waits for it; both share the component's process
// group, so Stop's signals reach the command.
func (s *sandbox) start(name, logDir string, env []string, args ...string) (*component, error) {
	return startComponentWith(name, s.nsenter, append(s.enterArgs(), args...), logDir, procOptions{env: env})
}

// waitNamespacesGone waits until no process uses the namespaces.
func waitNamespacesGone(ids []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		alive := NamespacesAlive(ids)
		if len(alive) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("namespaces %v still in use %s after the node stopped", alive, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ip runs iproute2 in this machine's network namespace.
func ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// linkExists reports whether a network interface of that name exists here.
func linkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// connectNode makes the veth pair: the machine's end with HostIP, the
// node's end (eth0) moved into the sandbox's network namespace, and a
// route to the node's pods through it. The node configures its end in
// the setup script.
func connectNode(ctx context.Context, p nodePlan, pid int) error {
	host := p.hostVeth()
	if err := ip(ctx, "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", strconv.Itoa(pid)); err != nil {
		return err
	}
	if err := ip(ctx, "addr", "add", p.HostIP.String()+"/"+strconv.Itoa(p.LinkPrefix.Bits()), "dev", host); err != nil {
		return err
	}
	return ip(ctx, "link", "set", host, "up")
}

// routePods sends traffic for the node's pods (the API server calling a
// webhook on a pod) through the veth pair. The route goes with the link.
func routePods(ctx context.Context, p nodePlan) error {
	return ip(ctx, "route", "add", p.PodCIDR.String(), "via", p.NodeIP.String(), "dev", p.hostVeth())
}

// slotLock holds a slot of this machine for the life of this process: a
// flock on a file of the slot folder, which the kernel releases when the
// process dies, however it dies.
type slotLock struct {
	slot int
	file *os.File
}

// slotDir holds the lock files of the slots.
func slotDir() string { return filepath.Join(os.TempDir(), "drastack-real-nodes") }

// tryLockSlot takes the slot's lock if no live process holds it.
func tryLockSlot(slot int) (*slotLock, error) {
	if err := os.MkdirAll(slotDir(), 0o755); err != nil {
		return nil, fmt.Errorf("real node slots: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(slotDir(), "slot-"+strconv.Itoa(slot)+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("real node slot %d: %w", slot, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("lock real node slot %d: %w", slot, err)
	}
	return &slotLock{slot: slot, file: f}, nil
}

// record writes what a later run needs to clean up after this one if it
// is killed: the sandbox's PID and its command line.
func (l *slotLock) record(pid int) {
	cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	_ = l.file.Truncate(0)
	_, _ = l.file.WriteAt([]byte(strconv.Itoa(pid)+"\n"+string(cmdline)), 0)
}

// release clears and unlocks the slot.
func (l *slotLock) release() {
	_ = l.file.Truncate(0)
	_ = l.file.Close()
}

// cleanStale removes what a killed run may have left in the slot: a
// sandbox still alive (the kernel ends it with its parent, so only a
// sandbox whose parent-death signal was lost), the machine's end of the
// veth pair, and the slot's cgroups (the kernel removes processes, not
// cgroup folders).
func (l *slotLock) cleanStale(p nodePlan) error {
	data := make([]byte, 4096)
	n, _ := l.file.ReadAt(data, 0)
	if pidLine, cmdline, ok := strings.Cut(string(data[:n]), "\n"); ok {
		if pid, err := strconv.Atoi(pidLine); err == nil && pid > 1 {
			now, _ := os.ReadFile(filepath.Join("/proc", pidLine, "cmdline"))
			if len(now) > 0 && string(now) == cmdline {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	var errs []error
	if linkExists(p.hostVeth()) {
		if err := ip(context.Background(), "link", "delete", p.hostVeth()); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removeCgroup("/sys/fs/cgroup", p.cgroupName(), 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// cgroupHierarchies lists the folders under root where a cgroup of the
// node must exist: root itself on cgroup v2, else each v1 hierarchy
// (symbolic links such as cpu -> cpu,cpuacct are skipped: they name a
// hierarchy already listed).
func cgroupHierarchies(root string) ([]string, error) {
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return []string{root}, nil
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("cgroup hierarchies: %w", err)
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() || e.Type()&os.ModeSymlink != 0 {
			continue
		}
		dir := filepath.Join(root, e.Name())
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err == nil {
			out = append(out, dir)
		}
	}
	return out, nil
}

// prepareCgroup creates the node's cgroup root in every hierarchy (the
// kubelet refuses a cgroup root that does not exist). A v1 cpuset starts
// with no CPUs and no memory nodes; it gets its parent's.
func prepareCgroup(root, name string) error {
	hierarchies, err := cgroupHierarchies(root)
	if err != nil {
		return err
	}
	for _, h := range hierarchies {
		dir := filepath.Join(h, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		if h == root {
			// cgroup v2: let the node's cgroup hand controllers on.
			for _, c := range cgroupControllers {
				_ = os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+"+c), 0o644)
				_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0o644)
			}
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			parent, err := os.ReadFile(filepath.Join(h, f))
			if err != nil {
				continue // not the cpuset hierarchy
			}
			if err := os.WriteFile(filepath.Join(dir, f), parent, 0o644); err != nil {
				return fmt.Errorf("initialise %s: %w", filepath.Join(dir, f), err)
			}
		}
	}
	return nil
}

// removeCgroup removes the node's cgroup tree from every hierarchy,
// deepest first, killing any process still in it (there is none once the
// node's PID namespace is gone; a cgroup that still holds a dying process
// cannot be removed, so it retries until timeout).
func removeCgroup(root, name string, timeout time.Duration) error {
	hierarchies, err := cgroupHierarchies(root)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for _, h := range hierarchies {
		top := filepath.Join(h, name)
		for {
			err := removeCgroupTree(top)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("remove cgroup %s: %w", top, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// removeCgroupTree kills the processes of a cgroup tree and removes its
// folders, children first. A missing tree is not an error.
func removeCgroupTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeCgroupTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
		for _, f := range strings.Fields(string(procs)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
		return err
	}
	return nil
}
