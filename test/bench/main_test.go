package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestRunJSON(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"-format", "json", "-budget", "5s", "-workloads", "unsatisfiable", "-engines", "native"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var rows []map[string]any
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatalf("output is not a JSON array: %v\n%s", err, out.String())
	}
	if len(rows) != 1 {
		t.Fatalf("want one row, got %d", len(rows))
	}
	keys := []string{"workload", "engine", "claims", "allocated", "timedOut", "seconds", "claimsPerSecond", "p50Seconds", "p99Seconds"}
	if len(rows[0]) != len(keys) {
		t.Errorf("row has fields %v, want exactly %v", rows[0], keys)
	}
	for _, k := range keys {
		if _, ok := rows[0][k]; !ok {
			t.Errorf("row lacks %q: %v", k, rows[0])
		}
	}
	if rows[0]["workload"] != "unsatisfiable" || rows[0]["engine"] != "native" || rows[0]["allocated"] != 0.0 {
		t.Errorf("unexpected row %v", rows[0])
	}
}

func TestRunTableSkipsUpstreamForNativeOnlyWorkloads(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"-budget", "2s", "-workloads", "cel-contiguous", "-engines", "upstream"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "workload") {
		t.Errorf("want only the header, got %q", out.String())
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-format", "xml"},
		{"-workloads", "nope"},
		{"-engines", "nope"},
		{"-no-such-flag"},
	} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 0.5, 0},
		{ms(7), 0.99, 7 * time.Millisecond},
		{ms(4, 1, 3, 2), 0.5, 2 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 100), 0.99, 100 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 100), 0.5, 5 * time.Millisecond},
	}
	for _, tc := range tests {
		if got := percentile(tc.in, tc.p); got != tc.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", tc.in, tc.p, got, tc.want)
		}
	}
}
