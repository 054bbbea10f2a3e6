package publisher

import (
	"fmt"
	"strings"
	"testing"

	"github.com/drastack/drastack/internal/topology"
)

func TestPoolProblems(t *testing.T) {
	missing := func(coords ...string) []topology.Problem {
		var out []topology.Problem
		for _, c := range coords {
			out = append(out, topology.Problem{Reason: topology.ReasonMissingHost, Coordinates: c, Message: "no usable host at coordinates " + c})
		}
		return out
	}
	withheld := topology.Problem{Reason: topology.ReasonPoolWithheld, Message: "pool p is withheld: 4 of 8 hosts are missing and the policy is Withhold"}
	many := make([]string, 20)
	for i := range many {
		many[i] = fmt.Sprintf("0.%d", i)
	}
	tests := []struct {
		name     string
		problems []topology.Problem
		want     []string
	}{
		{
			name:     "a few missing hosts are one line each, with the pool named",
			problems: missing("0.0", "1.3"),
			want: []string{
				"MissingHost: pool p: no usable host at coordinates 0.0",
				"MissingHost: pool p: no usable host at coordinates 1.3",
			},
		},
		{
			name:     "many missing hosts fold into one line where the first was; a message naming the pool is kept as is",
			problems: append(missing("0.0", "0.1", "0.2", "0.3"), withheld),
			want: []string{
				"MissingHost: pool p: no usable host at 4 positions: 0.0, 0.1, 0.2, 0.3",
				"PoolWithheld: pool p is withheld: 4 of 8 hosts are missing and the policy is Withhold",
			},
		},
		{
			name:     "a folded line lists at most 16 positions",
			problems: missing(many...),
			want:     []string{"MissingHost: pool p: no usable host at 20 positions: " + strings.Join(many[:16], ", ") + " and 4 more"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := poolProblems("p", tt.problems)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestCapProblems(t *testing.T) {
	lines := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprint("p", i)
		}
		return out
	}
	tests := []struct {
		in, max int
		last    string
		length  int
	}{
		{in: 0, max: 3, length: 0},
		{in: 3, max: 3, last: "p2", length: 3},
		{in: 4, max: 3, last: "... and 2 more problems", length: 3},
		{in: 100, max: MaxProblemsPerEntry, last: "... and 69 more problems", length: MaxProblemsPerEntry},
	}
	for _, tt := range tests {
		got := capProblems(lines(tt.in), tt.max)
		if len(got) != tt.length || (tt.length > 0 && got[len(got)-1] != tt.last) {
			t.Errorf("capProblems(%d lines, %d) = %v, want %d lines ending with %q", tt.in, tt.max, got, tt.length, tt.last)
		}
	}
}
