//go:build !linux

package cluster

import "syscall"

// childProcAttr puts a component in its own process group. Only Linux can
// also tie its life to ours; elsewhere Stop is the only cleanup.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
