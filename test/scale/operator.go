package scale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/drastack/drastack/internal/bundle"
	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/test/cluster"
)

// Environment of the operator child process (see OperatorProcessMain).
const (
	operatorCountsEnv  = "DRASTACK_SCALE_OPERATOR_COUNTS"
	operatorProbeNSEnv = "DRASTACK_SCALE_OPERATOR_PROBE_NAMESPACE"
	operatorHeapEnv    = "DRASTACK_SCALE_OPERATOR_HEAP_PROFILE"
	operatorCPUEnv     = "DRASTACK_SCALE_OPERATOR_CPU_PROFILE"
	operatorWebhookEnv = "DRASTACK_SCALE_OPERATOR_WEBHOOK_PORT"
	operatorMemoryEnv  = "DRASTACK_SCALE_OPERATOR_MEMORY"
	operatorTuningEnv  = "DRASTACK_SCALE_OPERATOR_TUNING"
)

// Tuning overrides operator.Options defaults of the operator under test
// (zero: the operator's own default), to size them from measurements.
type Tuning struct {
	// KubeAPIQPS and KubeAPIBurst are operator.Options.KubeAPIQPS and
	// KubeAPIBurst.
	KubeAPIQPS   float32 `json:"kubeAPIQPS,omitempty"`
	KubeAPIBurst int     `json:"kubeAPIBurst,omitempty"`
	// ClaimWorkers and PoolWorkers are operator.Options.ClaimWorkers and
	// PoolWorkers.
	ClaimWorkers int `json:"claimWorkers,omitempty"`
	PoolWorkers  int `json:"poolWorkers,omitempty"`
	// MemoryLimit is operator.Options.MemoryLimit: by default (0) the
	// memory limit of the Deployment config/default installs, as the
	// Deployment passes it; negative: none.
	MemoryLimit int64 `json:"memoryLimit,omitempty"`
}

func (t Tuning) apply(o *operator.Options) {
	o.KubeAPIQPS, o.KubeAPIBurst, o.ClaimWorkers, o.PoolWorkers = t.KubeAPIQPS, t.KubeAPIBurst, t.ClaimWorkers, t.PoolWorkers
	o.MemoryLimit = max(t.MemoryLimit, 0)
}

// deployedMemoryLimit reads the memory limit of the operator's container
// in the Deployment deployDir (config/default) renders, in bytes (0: none).
func deployedMemoryLimit(deployDir string) (int64, error) {
	objs, err := bundle.Build(deployDir)
	if err != nil {
		return 0, err
	}
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if err != nil {
			return 0, fmt.Errorf("Deployment %s: %w", o.GetName(), err)
		}
		for _, c := range containers {
			cm, ok := c.(map[string]any)
			if !ok || cm["name"] != "manager" {
				continue
			}
			limit, ok, err := unstructured.NestedString(cm, "resources", "limits", "memory")
			if err != nil || !ok {
				return 0, err
			}
			q, err := resource.ParseQuantity(limit)
			if err != nil {
				return 0, fmt.Errorf("Deployment %s: limits.memory %q: %w", o.GetName(), limit, err)
			}
			return q.Value(), nil
		}
	}
	return 0, fmt.Errorf("%s renders no Deployment with a container named manager", deployDir)
}

// String lists what is set, for the report.
func (t Tuning) String() string {
	var parts []string
	if t.KubeAPIQPS != 0 || t.KubeAPIBurst != 0 {
		parts = append(parts, fmt.Sprintf("client limit %g/s burst %d", t.KubeAPIQPS, t.KubeAPIBurst))
	}
	if t.ClaimWorkers != 0 {
		parts = append(parts, fmt.Sprintf("%d claim workers", t.ClaimWorkers))
	}
	if t.PoolWorkers != 0 {
		parts = append(parts, fmt.Sprintf("%d pool workers", t.PoolWorkers))
	}
	switch {
	case t.MemoryLimit > 0:
		parts = append(parts, fmt.Sprintf("container memory limit %d MiB (soft limit 90%%)", t.MemoryLimit>>20))
	case t.MemoryLimit < 0:
		parts = append(parts, "no memory limit")
	}
	if len(parts) == 0 {
		return "the operator's defaults"
	}
	return strings.Join(parts, ", ")
}

// countsInterval is how often the child process writes its request counts
// unasked (the parent reads them after the child exits, too).
const countsInterval = time.Second

// countsSignal asks the operator child process to write its request
// counts now: the parent splits them by phase, and counts up to a second
// old put the requests of a phase's last second into the next one
// (TestScale100 once counted the DevicePool creates of the publication in
// the burst).
const countsSignal = syscall.SIGUSR2

// operatorShutdown bounds the operator's graceful shutdown.
const operatorShutdown = 10 * time.Second

// OperatorProcessMain runs the operator when this process was started as
// the operator child of Run (Config.OperatorExecutable) and reports true;
// otherwise it does nothing and reports false. The operator is wired as
// cmd/manager wires it (ctrl.GetConfig from $KUBECONFIG, which holds the
// ServiceAccount token, with controller-runtime's client rate limits),
// with every request counted by verb and resource into a file the parent
// reads.
func OperatorProcessMain() (bool, error) {
	countsPath := os.Getenv(operatorCountsEnv)
	if countsPath == "" {
		return false, nil
	}
	ctrl.SetLogger(zap.New())
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return true, fmt.Errorf("load kubeconfig: %w", err)
	}
	reqs := NewRequests()
	port, err := strconv.Atoi(os.Getenv(operatorWebhookEnv))
	if err != nil {
		return true, fmt.Errorf("%s: %w", operatorWebhookEnv, err)
	}
	o := operatorOptions(os.Getenv(operatorProbeNSEnv), port)
	if raw := os.Getenv(operatorTuningEnv); raw != "" {
		var t Tuning
		if err := json.Unmarshal([]byte(raw), &t); err != nil {
			return true, fmt.Errorf("%s: %w", operatorTuningEnv, err)
		}
		t.apply(&o)
	}
	mgr, err := operator.New(reqs.Wrap(cfg), o)
	if err != nil {
		return true, err
	}
	if path := os.Getenv(operatorCPUEnv); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return true, fmt.Errorf("create the CPU profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return true, fmt.Errorf("start the CPU profile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}
	if path := os.Getenv(operatorHeapEnv); path != "" {
		go profilePeaks(peakPath(path))
	}
	signalled := ctrl.SetupSignalHandler()
	measure := make(chan os.Signal, 1)
	signal.Notify(measure, measureSignal)
	count := make(chan os.Signal, 1)
	signal.Notify(count, countsSignal)
	memoryPath, seq, countSeq := os.Getenv(operatorMemoryEnv), 0, 0
	writeCountsNow := func() error {
		countSeq++
		return writeCounts(countsPath, countSeq, reqs.Snapshot())
	}
	mgrCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()
	for stopped := false; !stopped; {
		select {
		case <-measure:
			seq++
			if err := writeMemory(memoryPath, measureMemory(seq)); err != nil {
				ctrl.Log.Error(err, "Memory not written")
			}
		case <-signalled.Done():
			if path := os.Getenv(operatorHeapEnv); path != "" {
				// Before the manager lets go of its caches.
				if err := writeHeapProfile(path); err != nil {
					ctrl.Log.Error(err, "Heap profile not written")
				}
			}
			cancel()
			err, stopped = <-done, true
		case err = <-done:
			stopped = true
		case <-count:
			if err := writeCountsNow(); err != nil {
				ctrl.Log.Error(err, "Request counts not written")
			}
		case <-time.After(countsInterval):
			_ = writeCountsNow()
		}
	}
	if werr := writeCountsNow(); werr != nil && err == nil {
		err = werr
	}
	return true, err
}

// peakPath is where the heap profile at the peak of the resident set goes,
// beside the one written at the end.
func peakPath(path string) string {
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "-peak" + ext
}

// peakStep is how much the resident set must grow past its last profiled
// peak before the heap is profiled again.
const peakStep = 1.1

// profilePeaks writes the heap profile (in use as of the last collection,
// no collection forced) whenever the resident set reaches a new peak, so
// that what made the peak can be read after the run.
func profilePeaks(path string) {
	var peak int64 = 128 << 20
	for range time.Tick(500 * time.Millisecond) {
		rss, err := procRSS(os.Getpid())
		if err != nil || float64(rss) < float64(peak)*peakStep {
			continue
		}
		peak = rss
		f, err := os.Create(path)
		if err != nil {
			continue
		}
		_ = pprof.WriteHeapProfile(f)
		_ = f.Close()
	}
}

// writeHeapProfile writes the in-use heap after a collection.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	return errors.Join(pprof.WriteHeapProfile(f), f.Close())
}

func operatorOptions(probeNS string, webhookPort int) operator.Options {
	return operator.Options{MetricsAddr: "0", ProbeAddr: "0", ProbeNamespace: probeNS, ShutdownTimeout: operatorShutdown,
		WebhookPort: webhookPort, WebhookHost: "127.0.0.1"}
}

// runningOperator is the operator under test, in this process or in a
// child process.
type runningOperator struct {
	// in-process
	reqs   *Requests
	cancel context.CancelFunc
	done   chan error

	// child process
	cmd        *exec.Cmd
	countsPath string
	memoryPath string
	exited     chan error
}

// startOperator runs the operator under the ServiceAccount and RBAC that
// config/default installs (cluster.DeployOperatorIdentity), in a child
// process running exe when exe is set, else in this process.
func startOperator(ctx context.Context, c *cluster.Cluster, deployDir, probeNS, exe, logDir, heapProfile, cpuProfile string, tuning Tuning) (*runningOperator, error) {
	id, err := c.DeployOperatorIdentity(ctx, deployDir)
	if err != nil {
		return nil, err
	}

	// The webhooks, as config/default installs them, called by URL on
	// 127.0.0.1 (the operator sets their caBundle).
	port, err := cluster.FreePort()
	if err != nil {
		return nil, err
	}
	if _, err := c.DeployWebhookByURL(ctx, deployDir, fmt.Sprintf("https://127.0.0.1:%d", port)); err != nil {
		return nil, err
	}
	if exe == "" {
		o := operatorOptions(probeNS, port)
		tuning.apply(&o)
		// The e2e suites run several managers in one process.
		o.SkipNameValidation = true
		r := &runningOperator{reqs: NewRequests(), done: make(chan error, 1)}
		mgr, err := operator.New(r.reqs.Wrap(id.Config), o)
		if err != nil {
			return nil, err
		}
		opCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		r.cancel = cancel
		go func() { r.done <- mgr.Start(opCtx) }()
		return r, nil
	}
	log, err := os.Create(filepath.Join(logDir, "operator.log"))
	if err != nil {
		return nil, fmt.Errorf("create the operator log: %w", err)
	}
	defer log.Close()
	r := &runningOperator{countsPath: filepath.Join(c.Dir, "operator-requests.json"), memoryPath: filepath.Join(c.Dir, "operator-memory.json"),
		exited: make(chan error, 1)}
	rawTuning, err := json.Marshal(tuning)
	if err != nil {
		return nil, err
	}
	r.cmd = exec.Command(exe)
	r.cmd.Env = append(operatorEnviron(), "KUBECONFIG="+id.KubeconfigPath, operatorCountsEnv+"="+r.countsPath, operatorProbeNSEnv+"="+probeNS,
		operatorHeapEnv+"="+heapProfile, operatorCPUEnv+"="+cpuProfile, operatorWebhookEnv+"="+strconv.Itoa(port), operatorMemoryEnv+"="+r.memoryPath,
		operatorTuningEnv+"="+string(rawTuning))
	r.cmd.Stdout, r.cmd.Stderr = log, log
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the operator process %s: %w", exe, err)
	}
	go func() { r.exited <- r.cmd.Wait() }()
	return r, nil
}

// operatorEnviron is this process's environment without the Go
// runtime's tuning (GOGC, GOMEMLIMIT): the operator runs with its own
// defaults, whatever the harness was given.
func operatorEnviron() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOGC=") && !strings.HasPrefix(kv, "GOMEMLIMIT=") {
			out = append(out, kv)
		}
	}
	return out
}

// requests returns the requests made so far: a child process is asked to
// write its counts, and the answer is awaited.
func (r *runningOperator) requests(ctx context.Context) (RequestCounts, error) {
	if r.cmd == nil {
		return r.reqs.Snapshot(), nil
	}
	before, _ := readCounts(r.countsPath)
	if err := r.cmd.Process.Signal(countsSignal); err != nil {
		return RequestCounts{}, fmt.Errorf("ask the operator for its request counts: %w", err)
	}
	var got countsFile
	err := awaitAnswer(ctx, "write its request counts", func() bool {
		c, err := readCounts(r.countsPath)
		got = c
		return err == nil && c.Seq > before.Seq
	})
	return got.Counts, err
}

// cpu returns the child process's CPU time so far (user and system), false
// for an operator in this process.
func (r *runningOperator) cpu() (time.Duration, bool) {
	if r.cmd == nil {
		return 0, false
	}
	d, err := procCPU(r.cmd.Process.Pid)
	return d, err == nil
}

// Usage is what the operator process used over its life.
type Usage struct {
	// Measured is false for an operator that ran in the test's process.
	Measured bool
	// CPU is user plus system time.
	CPU time.Duration
	// PeakRSS is the maximum resident set size in bytes.
	PeakRSS int64
}

// stop ends the operator and returns its final request counts and usage.
func (r *runningOperator) stop() (RequestCounts, Usage, error) {
	if r.cmd == nil {
		r.cancel()
		err := <-r.done
		return r.reqs.Snapshot(), Usage{}, err
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-r.exited:
	case <-time.After(3 * operatorShutdown):
		_ = r.cmd.Process.Kill()
		err = errors.Join(errors.New("the operator did not stop on SIGTERM; killed"), <-r.exited)
	}
	u := Usage{Measured: true, CPU: r.cmd.ProcessState.UserTime() + r.cmd.ProcessState.SystemTime()}
	if ru, ok := r.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		u.PeakRSS = ru.Maxrss * 1024 // kilobytes on Linux
	}
	counts, cerr := readCounts(r.countsPath)
	return counts.Counts, u, errors.Join(err, cerr)
}

// userHZ is the unit of the CPU times in /proc/<pid>/stat (USER_HZ,
// 100 on every Linux architecture Go supports).
const userHZ = 100

// procCPU reads utime+stime of a process from /proc.
func procCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces; fields restart after its ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(ut+st) * time.Second / userHZ, nil
}

// pid is the operator child process's, 0 for an operator in this process.
func (r *runningOperator) pid() int {
	if r.cmd == nil {
		return 0
	}
	return r.cmd.Process.Pid
}
