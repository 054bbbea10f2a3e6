package frag

import (
	"context"
	"os"
	"strconv"
	"testing"
)

func TestTry(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("N"))
	load, _ := strconv.ParseFloat(os.Getenv("LOAD"), 64)
	seqs := Sequences(Options{Arrivals: n, Load: load})
	var res []Result
	only := os.Getenv("SEQ")
	for _, s := range seqs {
		if only != "" && s.Name != only {
			continue
		}
		for _, p := range Placers {
			if os.Getenv("SKIPKUBE") != "" && p == KubeScheduler { continue }
			r, err := Run(context.Background(), s, p)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s %s done in %.1fs", s.Name, p, r.Seconds)
			res = append(res, r)
		}
	}
	WriteTable(os.Stdout, seqs, res)
}
