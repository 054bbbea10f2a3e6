package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// clusterDirPattern names cluster folders in the temporary directory.
const clusterDirPattern = "drastack-cluster-"

// ownerFile records which process owns a cluster folder. When that process
// was killed (so Stop never ran), the parent-death signal has already
// ended the components, but the folder is left behind; the next Start
// removes it.
const ownerFile = "owner.pid"

func writeOwner(dir string) error {
	return os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644)
}

// removeStaleClusterDirs deletes cluster folders in tmp whose owner process
// no longer exists. Folders without an owner file, or owned by a live
// process (another test binary running in parallel), are left alone.
func removeStaleClusterDirs(tmp string) {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), clusterDirPattern) {
			continue
		}
		dir := filepath.Join(tmp, e.Name())
		data, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}

// processAlive asks the kernel with signal 0; EPERM means the process
// exists but belongs to someone else.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
