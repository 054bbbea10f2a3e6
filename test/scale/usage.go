package scale

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sampleInterval is how often the monitor reads the resident set of the
// processes it follows, to find each phase's peak.
const sampleInterval = 250 * time.Millisecond

// procRSS reads the resident set size of a process from
// /proc/<pid>/status (VmRSS) in bytes.
func procRSS(pid int) (int64, error) {
	return procStatusField(pid, "VmRSS:")
}

// procPeakRSS reads the process's peak resident set size so far
// (VmHWM) in bytes.
func procPeakRSS(pid int) (int64, error) {
	return procStatusField(pid, "VmHWM:")
}

func procStatusField(pid int, field string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, field)
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("/proc/%d/status: %s %q", pid, field, rest)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/status: %s: %w", pid, field, err)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, field)
}

// clusterProcesses finds the processes of a local control plane: those
// whose command line names its private folder (etcd's data directory,
// the certificate and kubeconfig paths of the others), by the base name of
// their executable. The operator child process is not among them (its
// kubeconfig comes from the environment).
func clusterProcesses(dir string) map[string]int {
	out := map[string]int{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	needle := []byte(dir)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmd, needle) {
			continue
		}
		argv0, _, _ := bytes.Cut(cmd, []byte{0})
		name := filepath.Base(string(argv0))
		if name == "setpriv" {
			// Started through setpriv and not yet replaced by the binary.
			continue
		}
		out[name] = pid
	}
	return out
}

// Harness is the name the monitor gives the harness process (this one:
// the simulated driver, the checks' watch cache, the burst's clients).
const Harness = "harness (sim, checks)"

// Operator is the name the monitor gives the operator process.
const Operator = "operator"

// ProcessUsage is what one process used in one phase.
type ProcessUsage struct {
	// CPU is user plus system time in the phase.
	CPU time.Duration
	// PeakRSS is the largest resident set sampled in the phase.
	PeakRSS int64
	// PeakAnon is the largest anonymous part of it sampled (RssAnon: the
	// heap and stacks; the rest is the binary's pages, which a container's
	// memory limit can reclaim rather than kill for).
	PeakAnon int64
}

// monitor follows the CPU time and resident set of the operator process,
// the control plane's processes and the harness, phase by phase.
type monitor struct {
	mu    sync.Mutex
	procs map[string]int
	// cpuAt is each process's CPU time when the current phase began.
	cpuAt map[string]time.Duration
	cur   map[string]ProcessUsage
	stop  chan struct{}
	done  chan struct{}
}

// startMonitor follows the processes of the cluster in dir, this process,
// and the operator process (pid 0: the operator runs in this process and
// is not followed apart).
func startMonitor(dir string, operatorPID int) *monitor {
	procs := clusterProcesses(dir)
	procs[Harness] = os.Getpid()
	if operatorPID != 0 {
		procs[Operator] = operatorPID
	}
	m := &monitor{procs: procs, stop: make(chan struct{}), done: make(chan struct{})}
	m.begin()
	go m.loop()
	return m
}

func (m *monitor) loop() {
	defer close(m.done)
	t := time.NewTicker(sampleInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.sample()
		}
	}
}

func (m *monitor) sample() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, pid := range m.procs {
		rss, err := procRSS(pid)
		if err != nil {
			continue
		}
		u := m.cur[name]
		u.PeakRSS = max(u.PeakRSS, rss)
		if anon, err := procStatusField(pid, "RssAnon:"); err == nil {
			u.PeakAnon = max(u.PeakAnon, anon)
		}
		m.cur[name] = u
	}
}

// begin starts a phase.
func (m *monitor) begin() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cpuAt = map[string]time.Duration{}
	m.cur = map[string]ProcessUsage{}
	for name, pid := range m.procs {
		if cpu, err := procCPU(pid); err == nil {
			m.cpuAt[name] = cpu
		}
	}
}

// end ends the current phase, returns what each process used in it, and
// begins the next.
func (m *monitor) end() map[string]ProcessUsage {
	m.sample()
	m.mu.Lock()
	out := make(map[string]ProcessUsage, len(m.procs))
	for name, pid := range m.procs {
		u := m.cur[name]
		if cpu, err := procCPU(pid); err == nil {
			u.CPU = cpu - m.cpuAt[name]
		}
		out[name] = u
	}
	m.mu.Unlock()
	m.begin()
	return out
}

func (m *monitor) close() {
	close(m.stop)
	<-m.done
}
