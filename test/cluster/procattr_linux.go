package cluster

import "syscall"

// childProcAttr puts a component in its own process group (so that Stop can
// signal the whole group) and asks the kernel to kill it when the process
// that started it dies, so that a test binary killed by a timeout or a
// signal does not leave a control plane running.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
