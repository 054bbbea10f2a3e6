package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"syscall"
	"time"
)

// Memory is the operator process's memory after a full garbage
// collection that returned freed pages to the system
// (debug.FreeOSMemory): what it holds, not what it has not yet
// collected.
type Memory struct {
	// Seq numbers the measurements of one process.
	Seq int `json:"seq"`
	// RSS is the resident set (VmRSS) after the collection.
	RSS int64 `json:"rss"`
	// HeapLive is the Go heap reachable at the collection
	// (runtime/metrics /gc/heap/live:bytes).
	HeapLive int64 `json:"heapLive"`
}

// measureSignal asks the operator child process to measure its memory
// (measureMemory) and write it to its memory file.
const measureSignal = syscall.SIGUSR1

// measureTimeout bounds a measurement: a full collection of a few GiB on
// a loaded machine takes seconds.
const measureTimeout = time.Minute

// measureMemory collects, returns the freed pages to the system and reads
// what is left.
func measureMemory(seq int) Memory {
	debug.FreeOSMemory()
	m := Memory{Seq: seq}
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		m.HeapLive = int64(s[0].Value.Uint64())
	}
	if rss, err := procRSS(os.Getpid()); err == nil {
		m.RSS = rss
	}
	return m
}

func writeMemory(path string, m Memory) error { return writeJSON(path, m) }

func readMemory(path string) (Memory, error) {
	var m Memory
	err := readJSON(path, "memory file", &m)
	return m, err
}

// writeJSON replaces the file whole with v as JSON: the parent process
// never reads half of what the child wrote.
func writeJSON(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readJSON reads what writeJSON wrote; what names the file in errors.
func readJSON(path, what string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read the operator's %s: %w", what, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("parse the operator's %s %s: %w", what, path, err)
	}
	return nil
}

// memory asks the operator child process to measure its memory and waits
// for the answer; false for an operator in this process, whose memory
// cannot be told apart from the harness's.
func (r *runningOperator) memory(ctx context.Context) (Memory, bool, error) {
	if r.cmd == nil {
		return Memory{}, false, nil
	}
	before, _ := readMemory(r.memoryPath)
	if err := r.cmd.Process.Signal(measureSignal); err != nil {
		return Memory{}, false, fmt.Errorf("ask the operator to measure its memory: %w", err)
	}
	var got Memory
	err := awaitAnswer(ctx, "measure its memory", func() bool {
		m, err := readMemory(r.memoryPath)
		got = m
		return err == nil && m.Seq > before.Seq
	})
	return got, err == nil, err
}

// awaitAnswer polls answered until it reports true, for at most
// measureTimeout: the child process answers a signal by writing a file
// with a higher sequence number.
func awaitAnswer(ctx context.Context, what string, answered func() bool) error {
	deadline := time.Now().Add(measureTimeout)
	for !answered() {
		if time.Now().After(deadline) {
			return fmt.Errorf("the operator did not %s within %s", what, measureTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}
