package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// nodeNamespaces are the namespaces of a real node's sandbox that identify
// it (its UTS and IPC namespaces go with them).
var nodeNamespaces = []string{"net", "mnt", "pid"}

// ProcessNamespaces returns the net, mount and PID namespaces of a process
// as the kernel names them ("net:[4026532281]").
func ProcessNamespaces(pid int) ([]string, error) {
	var ids []string
	for _, ns := range nodeNamespaces {
		link, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns", ns))
		if err != nil {
			return nil, fmt.Errorf("namespace %s of process %d: %w", ns, pid, err)
		}
		ids = append(ids, link)
	}
	return ids, nil
}

// NamespacesAlive lists the namespaces of ids (as ProcessNamespaces names
// them) that some process of this machine still uses.
func NamespacesAlive(ids []string) []string {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	found := map[string]bool{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		for _, ns := range nodeNamespaces {
			link, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", ns))
			if err == nil && want[link] {
				found[link] = true
			}
		}
	}
	var out []string
	for _, id := range ids {
		if found[id] {
			out = append(out, id)
		}
	}
	return out
}
