package cluster

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// goodMachine is a machine that can run a real node, with cgroup v1.
func goodMachine() machine {
	return machine{
		goos:        "linux",
		euid:        0,
		filesystems: "nodev\tcgroup\nnodev\tcgroup2\nnodev\toverlay\n",
		cgroupRoot:  "/sys/fs/cgroup",
		exists:      func(p string) bool { return !strings.HasSuffix(p, "cgroup.controllers") },
		readFile:    readFileString,
		lookPath:    func(n string) (string, error) { return "/usr/bin/" + n, nil },
		staticBin:   func(string) bool { return true },
	}
}

func TestMachineCheck(t *testing.T) {
	without := func(missing string) func(string) bool {
		return func(p string) bool {
			return !strings.HasSuffix(p, missing) && !strings.HasSuffix(p, "cgroup.controllers")
		}
	}
	tests := []struct {
		name   string
		change func(*machine)
		binErr error
		want   string
	}{
		{"good", func(*machine) {}, nil, ""},
		{"not linux", func(m *machine) { m.goos = "darwin" }, nil, "not Linux"},
		{"not root", func(m *machine) { m.euid = 1000 }, nil, "not root"},
		{"no overlayfs", func(m *machine) { m.filesystems = "nodev\tcgroup\n" }, nil, "no overlayfs"},
		{"no cgroups", func(m *machine) { m.filesystems = "nodev\toverlay\n" }, nil, "no cgroups"},
		{"no memory hierarchy", func(m *machine) {
			m.exists = func(p string) bool {
				return !strings.HasSuffix(p, "cgroup.controllers") && p != "/sys/fs/cgroup/memory/cgroup.procs"
			}
		}, nil, "controller memory"},
		{"no runc", func(m *machine) { m.exists = without("/usr/sbin/runc") }, nil, "no runc (/usr/sbin/runc; package runc"},
		{"no CNI", func(m *machine) { m.exists = without("/usr/lib/cni/bridge") }, nil, "containernetworking-plugins"},
		{"dynamic busybox", func(m *machine) { m.staticBin = func(string) bool { return false } }, nil, "busybox-static"},
		{"no nsenter", func(m *machine) {
			m.lookPath = func(n string) (string, error) {
				if n == "nsenter" {
					return "", errors.New("not found")
				}
				return n, nil
			}
		}, nil, "no nsenter on PATH"},
		{"no node binaries", func(*machine) {}, errors.New("node binaries not found (x lacks kubelet); build them with make node"), "make node"},
		{"kubelet missing", func(m *machine) { m.exists = without("/bin/node/kubelet") }, nil, "no kubelet in /bin/node"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := goodMachine()
			tt.change(&m)
			err := m.check("/bin/node", tt.binErr)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected: %v", err)
				}
				return
			}
			missing, ok := IsUnsupported(err)
			if !ok || !strings.Contains(missing, tt.want) {
				t.Errorf("got %v, want an UnsupportedError containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("the reason is not one line: %q", err)
			}
		})
	}
}

func TestMachineCheckCgroupV2(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte("cpuset cpu io memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := goodMachine()
	m.cgroupRoot = dir
	m.exists = func(string) bool { return true }
	if err := m.check("/bin/node", nil); err != nil {
		t.Errorf("cgroup v2 with every controller: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte("cpu io memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if missing, ok := IsUnsupported(m.check("/bin/node", nil)); !ok || !strings.Contains(missing, "controller cpuset") {
		t.Errorf("cgroup v2 without cpuset: %q", missing)
	}
}

func TestResolveNodeBinaryDir(t *testing.T) {
	dir := t.TempDir()
	if _, err := ResolveNodeBinaryDir(dir, KubernetesVersion); err == nil || !strings.Contains(err.Error(), "lacks kubelet") {
		t.Errorf("empty folder: %v", err)
	}
	for _, b := range NodeBinaries {
		if err := os.WriteFile(filepath.Join(dir, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ResolveNodeBinaryDir(dir, KubernetesVersion)
	if err != nil || got != dir {
		t.Errorf("got %q %v", got, err)
	}
	t.Setenv(NodeBinaryDirEnv, dir)
	if got, err := ResolveNodeBinaryDir("", KubernetesVersion); err != nil || got != dir {
		t.Errorf("from $%s: %q %v", NodeBinaryDirEnv, got, err)
	}
}

func TestForwarder(t *testing.T) {
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	go func() {
		for {
			c, err := target.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				data, _ := io.ReadAll(c)
				_, _ = fmt.Fprintf(c, "echo:%s", data)
			}()
		}
	}()
	f, err := forward("127.0.0.1:0", target.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		c, err := net.Dial("tcp", f.Addr())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = fmt.Fprintf(c, "hello %d", i)
		_ = c.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(c)
		_ = c.Close()
		if err != nil || string(got) != fmt.Sprintf("echo:hello %d", i) {
			t.Errorf("round trip %d: %q %v", i, got, err)
		}
	}
	// A connection left open ends when the forwarder closes.
	open, err := net.Dial("tcp", f.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	closed := make(chan error, 1)
	go func() { closed <- f.close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("close waited for an open connection")
	}
	if _, err := net.DialTimeout("tcp", f.Addr(), time.Second); err == nil {
		t.Error("still listening after close")
	}
}

// FreePorts never gives one port twice in a call.
func TestFreePorts(t *testing.T) {
	ports, err := FreePorts(50)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] || p <= 0 {
			t.Fatalf("ports %v: %d twice or invalid", ports, p)
		}
		seen[p] = true
	}
}
