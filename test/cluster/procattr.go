package cluster

import "syscall"

// ChildProcAttr are the process attributes of the cluster's components,
// for the other processes a test starts beside them (Prometheus): on
// Linux the kernel kills such a process when the test binary dies, so it
// never outlives the test, nor keeps the files it inherited open (the
// lock `flock` holds for the run among them).
func ChildProcAttr() *syscall.SysProcAttr { return childProcAttr() }
