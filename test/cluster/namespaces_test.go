package cluster

import (
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestNamespacesOfThisProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc namespaces are Linux's")
	}
	ids, err := ProcessNamespaces(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 3 || !strings.HasPrefix(ids[0], "net:[") || !strings.HasPrefix(ids[1], "mnt:[") || !strings.HasPrefix(ids[2], "pid:[") {
		t.Fatalf("ProcessNamespaces = %v, want net, mnt and pid", ids)
	}
	if got := NamespacesAlive(ids); !slices.Equal(got, ids) {
		t.Errorf("NamespacesAlive(this process's) = %v, want %v", got, ids)
	}
	if got := NamespacesAlive([]string{"net:[1]", ids[0]}); !slices.Equal(got, ids[:1]) {
		t.Errorf("NamespacesAlive with one no process uses = %v, want %v", got, ids[:1])
	}
}
