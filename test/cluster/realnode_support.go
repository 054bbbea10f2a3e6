package cluster

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// nodeTools are the programs of this machine a real node runs, where
// Debian installs them, and the package (hack/build-node.sh installs it
// with apt-get where it is missing).
var nodeTools = []struct{ name, path, pkg string }{
	{"runc", "/usr/sbin/runc", "runc"},
	{"the CNI bridge plugin", "/usr/lib/cni/bridge", "containernetworking-plugins"},
	{"the CNI host-local plugin", "/usr/lib/cni/host-local", "containernetworking-plugins"},
	{"nft", "/usr/sbin/nft", "nftables"},
	{"a static busybox", "/bin/busybox", "busybox-static"},
	{"ip", "/usr/sbin/ip", "iproute2"},
}

// nodeCommands must be on PATH.
var nodeCommands = []struct{ name, pkg string }{
	{"nsenter", "util-linux"},
	{"mount", "mount"},
	{"go", "the Go toolchain, to build the pause program"},
}

// machine is what the support check reads of this machine; tests replace
// it.
type machine struct {
	goos        string
	euid        int
	filesystems string // /proc/filesystems
	cgroupRoot  string // where the cgroup hierarchies are mounted
	exists      func(path string) bool
	readFile    func(path string) string
	lookPath    func(name string) (string, error)
	staticBin   func(path string) bool
}

func thisMachine() machine {
	return machine{
		goos:        runtime.GOOS,
		euid:        os.Geteuid(),
		filesystems: readFileString("/proc/filesystems"),
		cgroupRoot:  "/sys/fs/cgroup",
		exists: func(p string) bool {
			_, err := os.Stat(p)
			return err == nil
		},
		readFile:  readFileString,
		lookPath:  exec.LookPath,
		staticBin: isStatic,
	}
}

func readFileString(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(data)
}

// isStatic reports whether an ELF executable has no program interpreter
// (is statically linked), so that it runs in an image without libc.
func isStatic(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// cgroupControllers a real node needs, in cgroup v1 hierarchies or in
// cgroup v2's root.
var cgroupControllers = []string{"cpu", "cpuset", "memory", "pids"}

// check reports the first missing piece, or nil. nodeBinDir is the
// resolved node binary folder, or the error resolving it.
func (m machine) check(nodeBinDir string, nodeBinErr error) error {
	missing := func(format string, args ...any) error {
		return &UnsupportedError{Missing: fmt.Sprintf(format, args...)}
	}
	if m.goos != "linux" {
		return missing("not Linux (%s)", m.goos)
	}
	if m.euid != 0 {
		return missing("not root (namespaces, mounts and cgroups need it)")
	}
	if !strings.Contains(m.filesystems, "\toverlay\n") {
		return missing("no overlayfs (containerd's snapshotter needs it: modprobe overlay)")
	}
	if !strings.Contains(m.filesystems, "\tcgroup") {
		return missing("no cgroups in /proc/filesystems")
	}
	if m.exists(filepath.Join(m.cgroupRoot, "cgroup.controllers")) {
		controllers := m.readFile(filepath.Join(m.cgroupRoot, "cgroup.controllers"))
		for _, c := range cgroupControllers {
			if !strings.Contains(" "+strings.TrimSpace(controllers)+" ", " "+c+" ") {
				return missing("no cgroup v2 controller %s in %s/cgroup.controllers", c, m.cgroupRoot)
			}
		}
	} else {
		for _, c := range cgroupControllers {
			if !m.exists(filepath.Join(m.cgroupRoot, c, "cgroup.procs")) {
				return missing("no cgroup v1 hierarchy with controller %s under %s", c, m.cgroupRoot)
			}
		}
	}
	for _, t := range nodeTools {
		if !m.exists(t.path) {
			return missing("no %s (%s; package %s: make node installs it)", t.name, t.path, t.pkg)
		}
	}
	if !m.staticBin("/bin/busybox") {
		return missing("/bin/busybox is not statically linked (package busybox-static: make node installs it)")
	}
	for _, c := range nodeCommands {
		if _, err := m.lookPath(c.name); err != nil {
			return missing("no %s on PATH (%s)", c.name, c.pkg)
		}
	}
	if nodeBinErr != nil {
		return &UnsupportedError{Missing: nodeBinErr.Error()}
	}
	for _, b := range NodeBinaries {
		if !m.exists(filepath.Join(nodeBinDir, b)) {
			return missing("no %s in %s (make node builds it)", b, nodeBinDir)
		}
	}
	return nil
}

// RealNodeSupport reports why this machine cannot run a real node, as an
// *UnsupportedError naming the first missing piece, or nil when it can.
// nodeBinDir is Options.NodeBinaryDir (empty: the default lookup).
func RealNodeSupport(nodeBinDir string) error {
	dir, err := ResolveNodeBinaryDir(nodeBinDir, KubernetesVersion)
	return thisMachine().check(dir, err)
}

// ResolveNodeBinaryDir returns the folder the node binaries of a release
// are taken from: explicit, else $DRASTACK_NODE_BIN for the default
// release, else bin/node/<version> of the module, else the per-user cache
// that hack/build-node.sh fills. The error names what is missing.
func ResolveNodeBinaryDir(explicit, version string) (string, error) {
	var candidates []string
	switch {
	case explicit != "":
		candidates = []string{explicit}
	case os.Getenv(NodeBinaryDirEnv) != "" && version == KubernetesVersion:
		candidates = []string{os.Getenv(NodeBinaryDirEnv)}
	default:
		if root, err := moduleRoot(); err == nil {
			candidates = append(candidates, filepath.Join(root, "bin", "node", version))
		}
		if cache, err := userCacheDir(); err == nil {
			candidates = append(candidates, filepath.Join(cache, "drastack", "node", version+"-containerd-"+ContainerdVersion))
		}
	}
	var problems []string
	for _, dir := range candidates {
		var missing []string
		for _, b := range NodeBinaries {
			info, err := os.Stat(filepath.Join(dir, b))
			if err != nil || info.IsDir() || info.Mode().Perm()&0o111 == 0 {
				missing = append(missing, b)
			}
		}
		if len(missing) == 0 {
			return filepath.Abs(dir)
		}
		problems = append(problems, fmt.Sprintf("%s lacks %s", dir, strings.Join(missing, ", ")))
	}
	if len(candidates) == 0 {
		return "", fmt.Errorf("no folder to look for the node binaries in: set %s", NodeBinaryDirEnv)
	}
	return "", fmt.Errorf("node binaries not found (%s); build them with make node", strings.Join(problems, "; "))
}
