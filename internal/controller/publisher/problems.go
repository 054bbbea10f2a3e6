package publisher

import (
	"fmt"
	"strings"

	"github.com/drastack/drastack/internal/topology"
)

// MaxProblemsPerEntry bounds status.multiHost[].problems: a domain whose
// nodes all vanished has one missing host per grid position, and status
// is for people, not a log.
const MaxProblemsPerEntry = 32

// maxListedCoordinates is how many positions (or nodes) one folded line
// names.
const maxListedCoordinates = 16

// compactAfter is the number of MissingHost problems of one pool above
// which they become one line.
const compactAfter = 3

// poolProblems formats a pool's topology problems as status lines,
// "<Reason>: pool <pool>: <message>", with many missing hosts of one pool
// folded into one line that lists their coordinates.
func poolProblems(pool string, problems []topology.Problem) []string {
	var missing []string
	for _, p := range problems {
		if p.Reason == topology.ReasonMissingHost {
			missing = append(missing, p.Coordinates)
		}
	}
	fold := len(missing) > compactAfter
	var out []string
	folded := false
	for _, p := range problems {
		if fold && p.Reason == topology.ReasonMissingHost {
			if !folded {
				out = append(out, missingLine(pool, missing))
				folded = true
			}
			continue
		}
		msg := p.Message
		if !strings.Contains(msg, "pool "+pool) {
			msg = "pool " + pool + ": " + msg
		}
		out = append(out, string(p.Reason)+": "+msg)
	}
	return out
}

// missingLine is one line for many missing hosts of a pool.
func missingLine(pool string, coords []string) string {
	return fmt.Sprintf("%s: pool %s: no usable host at %s", topology.ReasonMissingHost, pool, listNames("position", coords))
}

// listNames names a few things of a kind on one line: "node a", "3 nodes:
// a, b, c", "20 nodes: a, ..., p and 4 more".
func listNames(kind string, names []string) string {
	if len(names) == 1 {
		return kind + " " + names[0]
	}
	listed, more := names, ""
	if len(listed) > maxListedCoordinates {
		listed = listed[:maxListedCoordinates]
		more = fmt.Sprintf(" and %d more", len(names)-maxListedCoordinates)
	}
	return fmt.Sprintf("%d %ss: %s%s", len(names), kind, strings.Join(listed, ", "), more)
}

// capProblems keeps the first n problems and says how many were left out.
func capProblems(problems []string, n int) []string {
	if len(problems) <= n {
		return problems
	}
	out := append([]string(nil), problems[:n-1]...)
	return append(out, fmt.Sprintf("... and %d more problems", len(problems)-(n-1)))
}
