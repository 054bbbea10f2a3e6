package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/drastack/drastack/internal/bundle"
)

// OperatorProcess is one replica of the operator binary (cmd/manager) run
// as a child process of the test, under the identity of
// DeployOperatorIdentity, so that a test can do to it what happens to a
// pod: kill it (SIGKILL, an OOM kill or a node loss), pause it (SIGSTOP, a
// stalled node or a long garbage collection), resume it, or stop it
// gracefully (SIGTERM, a rollout).
type OperatorProcess struct {
	// Name names the replica in logs and errors.
	Name string
	// LogPath is the file its standard output and error go to.
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	mu      sync.Mutex
	exitErr error
}

// operatorStopGrace bounds a graceful stop: the manager's own shutdown
// timeout plus the time to release its lease.
const operatorStopGrace = 40 * time.Second

// StartOperatorProcess runs exe with args, KUBECONFIG set to kubeconfig
// (the ServiceAccount's token) and its output appended to
// logDir/<name>.log. The process gets its own process group and dies
// with the test process.
func StartOperatorProcess(name, exe string, args []string, kubeconfig, logDir string) (*OperatorProcess, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	cmd := exec.Command(exe, args...)
	// Only what the binary needs: in a pod it sees no test variables either.
	cmd.Env = []string{"KUBECONFIG=" + kubeconfig, "PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TMPDIR=" + os.TempDir()}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, exe, err)
	}
	p := &OperatorProcess{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *OperatorProcess) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *OperatorProcess) Done() <-chan struct{} { return p.done }

// ExitError is how the process ended (nil: still running or status 0).
func (p *OperatorProcess) ExitError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// Exited reports whether the process has ended.
func (p *OperatorProcess) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process group (the manager spawns nothing, but
// a group signal leaves no stray child either way).
func (p *OperatorProcess) signal(sig syscall.Signal) error {
	if p.Exited() {
		return fmt.Errorf("%s has already exited: %v", p.Name, p.ExitError())
	}
	if err := syscall.Kill(-p.Pid(), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("send %v to %s (process group %d): %w", sig, p.Name, p.Pid(), err)
	}
	return nil
}

// Kill sends SIGKILL and waits until the process is gone: it gets no
// chance to release its lease or finish a write.
func (p *OperatorProcess) Kill() error {
	if p.Exited() {
		return nil
	}
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.done
	return nil
}

// Pause sends SIGSTOP: the process keeps its sockets and its state but
// runs no instruction until Resume.
func (p *OperatorProcess) Pause() error { return p.signal(syscall.SIGSTOP) }

// Resume sends SIGCONT.
func (p *OperatorProcess) Resume() error { return p.signal(syscall.SIGCONT) }

// Terminate sends SIGTERM, as the kubelet does to a pod being deleted,
// and waits for the exit; after operatorStopGrace the process is killed
// and an error returned. A paused process is resumed first.
func (p *OperatorProcess) Terminate() error {
	if p.Exited() {
		return nil
	}
	_ = p.signal(syscall.SIGCONT)
	if err := p.signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(operatorStopGrace):
	}
	_ = p.Kill()
	return withLogTail(fmt.Errorf("%s did not exit within %s of SIGTERM; killed", p.Name, operatorStopGrace), p.LogPath)
}

// envRef is a $(NAME) reference in a container's args.
var envRef = regexp.MustCompile(`\$\([A-Za-z_][A-Za-z0-9_]*\)`)

// containerEnv is the environment the kubelet gives a container from its
// spec: literal values, and resource limits through resourceFieldRef
// (in bytes or cores, divisor 1). Other sources are left out.
func containerEnv(c map[string]any) (map[string]string, error) {
	env := map[string]string{}
	list, _, _ := unstructured.NestedSlice(c, "env")
	for _, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			continue
		}
		name, _ := m["name"].(string)
		if v, ok := m["value"].(string); ok {
			env[name] = v
			continue
		}
		res, ok, _ := unstructured.NestedString(m, "valueFrom", "resourceFieldRef", "resource")
		if !ok {
			continue
		}
		kind, what, _ := strings.Cut(res, ".")
		q, ok, _ := unstructured.NestedString(c, "resources", kind, what)
		if !ok {
			env[name] = "0"
			continue
		}
		qty, err := resource.ParseQuantity(q)
		if err != nil {
			return nil, fmt.Errorf("%s: resources.%s %q: %w", name, res, q, err)
		}
		env[name] = fmt.Sprint(qty.Value())
	}
	return env, nil
}

// DeploymentArgs returns the arguments of the manager container of the
// Deployment that deployDir (config/default) renders, with the values of
// the flags in override replaced or added ("--flag" -> "value"), so that
// a test runs the operator with the flags it ships with (leader election
// among them) and only addresses changed.
func DeploymentArgs(deployDir string, override map[string]string) ([]string, error) {
	objs, err := bundle.Build(deployDir)
	if err != nil {
		return nil, err
	}
	var args []string
	found := false
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			m, ok := c.(map[string]any)
			if !ok || m["name"] != "manager" {
				continue
			}
			list, _, err := unstructured.NestedStringSlice(m, "args")
			if err != nil {
				return nil, fmt.Errorf("args of the manager container of Deployment %s: %w", o.GetName(), err)
			}
			env, err := containerEnv(m)
			if err != nil {
				return nil, fmt.Errorf("env of the manager container of Deployment %s: %w", o.GetName(), err)
			}
			for i, a := range list {
				// The kubelet expands $(NAME) in args from the
				// container's environment; a process gets them expanded
				// the same way.
				list[i] = envRef.ReplaceAllStringFunc(a, func(ref string) string {
					if v, ok := env[ref[2:len(ref)-1]]; ok {
						return v
					}
					return ref
				})
			}
			args, found = list, true
		}
	}
	if !found {
		return nil, fmt.Errorf("%s renders no Deployment with a container named manager", deployDir)
	}
	return OverrideFlags(args, override), nil
}

// OverrideFlags replaces the value of each flag of override in args
// ("--flag=value" or "--flag"), or appends it; flags are added in sorted
// order so that the command line is the same from run to run.
func OverrideFlags(args []string, override map[string]string) []string {
	out := slices.Clone(args)
	seen := map[string]bool{}
	for i, a := range out {
		name, _, _ := strings.Cut(a, "=")
		if v, ok := override[name]; ok {
			out[i] = name + "=" + v
			seen[name] = true
		}
	}
	var extra []string
	for name, v := range override {
		if !seen[name] {
			extra = append(extra, name+"="+v)
		}
	}
	slices.Sort(extra)
	return append(out, extra...)
}
