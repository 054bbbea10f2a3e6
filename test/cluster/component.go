package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// component is one control plane process that this package started itself
// (kube-scheduler, kube-controller-manager, kwok). It runs in its own
// process group so that Stop reaches any child it may spawn, and logs to a
// file whose tail explains a failure.
type component struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	logFile *os.File

	done    chan struct{}
	mu      sync.Mutex
	exitErr error
}

// stopGrace is how long a component may take to exit after SIGTERM before
// its process group is killed. The components shut down in well under a
// second; waiting longer only slows every test.
const stopGrace = 10 * time.Second

// procOptions change how a component's process starts.
type procOptions struct {
	// attr replaces childProcAttr (it must keep its process group and
	// parent-death signal).
	attr *syscall.SysProcAttr
	// env replaces the environment when set.
	env []string
}

func startComponent(name, path string, args []string, logDir string) (*component, error) {
	return startComponentWith(name, path, args, logDir, procOptions{})
}

func startComponentWith(name, path string, args []string, logDir string, o procOptions) (*component, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = childProcAttr()
	if o.attr != nil {
		cmd.SysProcAttr = o.attr
	}
	cmd.Env = o.env
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &component{name: name, logPath: logPath, cmd: cmd, logFile: logFile, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		c.mu.Lock()
		c.exitErr = err
		c.mu.Unlock()
		_ = logFile.Close()
		close(c.done)
	}()
	return c, nil
}

// exited reports whether the process has ended, and how.
func (c *component) exited() (bool, error) {
	select {
	case <-c.done:
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.exitErr == nil {
			return true, errors.New("exited with status 0")
		}
		return true, c.exitErr
	default:
		return false, nil
	}
}

// failure wraps what went wrong with the tail of the component's log.
func (c *component) failure(what error) error {
	return withLogTail(fmt.Errorf("%s: %w", c.name, what), c.logPath)
}

// stop sends SIGTERM to the component's process group, waits, then kills
// the group. Stopping an exited component is a no-op.
func (c *component) stop() error {
	if c == nil {
		return nil
	}
	select {
	case <-c.done:
		return nil
	default:
	}
	pgid := c.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-c.done:
		return nil
	case <-time.After(stopGrace):
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s (process group %d): %w", c.name, pgid, err)
	}
	<-c.done
	return nil
}
