package cli

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// table renders rows in aligned columns, like kubectl get, with free-form
// lines under each row (a pool's problems, a claim's devices). Columns are
// aligned across all rows even though the lines underneath are not part of
// the table.
type table struct {
	header []string
	rows   [][]string
	under  [][]string
}

func (t *table) add(row []string, under ...string) {
	t.rows = append(t.rows, row)
	t.under = append(t.under, under)
}

func (t *table) write(w io.Writer) error {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.header, "\t"))
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	var out strings.Builder
	out.WriteString(strings.TrimRight(lines[0], " ") + "\n")
	for i, l := range lines[1:] {
		out.WriteString(strings.TrimRight(l, " ") + "\n")
		for _, u := range t.under[i] {
			out.WriteString("    " + u + "\n")
		}
	}
	_, err := io.WriteString(w, out.String())
	return err
}

// dash shows an empty cell the way kubectl shows missing values.
func dash(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// problemLines renders problems for the lines under a pool row.
func problemLines(problems []ProblemEntry, more int) []string {
	out := make([]string, 0, len(problems)+1)
	for _, p := range problems {
		var where []string
		if p.Slice != "" {
			where = append(where, "slice "+p.Slice)
		}
		if p.Device != "" {
			where = append(where, "device "+p.Device)
		}
		l := p.Severity + " " + p.Reason
		if len(where) > 0 {
			l += " (" + strings.Join(where, ", ") + ")"
		}
		out = append(out, l+": "+p.Message)
	}
	if more > 0 {
		out = append(out, "... and "+strconv.Itoa(more)+" more problems")
	}
	return out
}

// topReason is the reason code shown in the REASON column: the most
// important problem's (problems are sorted errors first).
func topReason(problems []ProblemEntry) string {
	if len(problems) == 0 {
		return ""
	}
	return problems[0].Reason
}

// writePoolTable renders offline pools: the columns of `kubectl get pool`
// that a snapshot has (no object name, no age), with slices as
// current/expected.
func writePoolTable(w io.Writer, pools []PoolEntry) error {
	t := &table{header: []string{"DRIVER", "POOL", "NODE", "GENERATION", "SLICES", "DEVICES", "ALLOCATED", "HEALTH", "REASON"}}
	for _, p := range pools {
		t.add([]string{
			p.Driver, p.Pool, dash(p.node),
			strconv.FormatInt(p.Generation, 10),
			fmt.Sprintf("%d/%d", p.Slices, p.expectedSlices),
			strconv.Itoa(p.Devices), strconv.Itoa(p.AllocatedDevices),
			p.Health, dash(topReason(p.Problems)),
		}, problemLines(p.Problems, p.moreProblems)...)
	}
	return t.write(w)
}
