// Command pause holds a namespace open and does nothing else: it is the
// sandbox process of the real node's pause image (what containerd runs
// first in every pod) and the first process of the node's own PID
// namespace. As process 1 it reaps the orphans the kernel hands it, and it
// exits on SIGTERM or SIGINT, which a process 1 would otherwise ignore.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every child that has exited; signals coalesce, so one
// SIGCHLD may stand for several.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
