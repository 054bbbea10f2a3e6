//go:build e2e

package e2e

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/drastack/drastack/internal/admissionpolicy"
	"github.com/drastack/drastack/internal/permissions"
)

// permissionAudit compares, after every suite of the package ran, what the
// operator's ServiceAccount did (the API server's audit log of the shared
// cluster, cluster.Options.AuditLog) with what its RBAC grants
// (internal/permissions): a granted verb the operator never used fails the
// run unless its marker says why it is held, and so does a write the
// operator made before its admission policies were in force. It costs one
// log file and a second of parsing: the suites that already run are the
// evidence. Runs of a subset of the tests (-run, -skip) can only show
// which grants they used; they fail only on early writes.
type permissionAudit struct {
	dir, log, user string
	cleanup        bool
}

func newPermissionAudit(logDir string) (*permissionAudit, error) {
	a := &permissionAudit{user: admissionpolicy.DefaultIdentity.Username(), dir: logDir}
	if a.dir == "" {
		dir, err := os.MkdirTemp("", "drastack-e2e-audit-")
		if err != nil {
			return nil, fmt.Errorf("folder for the audit log: %w", err)
		}
		a.dir, a.cleanup = dir, true
	}
	a.log = filepath.Join(a.dir, "operator-audit.log")
	return a, nil
}

// check runs the audit after the suites exited with code and returns the
// exit code of the whole run.
func (a *permissionAudit) check(code int) int {
	if a.cleanup {
		defer os.RemoveAll(a.dir)
	}
	if code != 0 {
		fmt.Fprintln(os.Stderr, "permission audit: skipped, the suites failed")
		return code
	}
	f, err := os.Open(a.log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "permission audit:", err)
		return 1
	}
	defer f.Close()
	reqs, err := permissions.ParseAudit(f, a.user)
	if err != nil {
		fmt.Fprintln(os.Stderr, "permission audit:", err)
		return 1
	}
	markers, err := permissions.OperatorMarkers()
	if err != nil {
		fmt.Fprintln(os.Stderr, "permission audit:", err)
		return 1
	}
	rep := permissions.Compare(markers, reqs, map[string]string{"system": admissionpolicy.DefaultIdentity.Namespace})
	table := filepath.Join(a.dir, "permission-audit.md")
	if !a.cleanup {
		_ = os.WriteFile(table, []byte(rep.Table()), 0o600)
	}
	used, held := 0, 0
	for _, u := range rep.Uses {
		switch {
		case u.Count > 0:
			used++
		case u.Marker.Held():
			held++
		}
	}
	fmt.Fprintf(os.Stderr, "permission audit: %d requests of %s; %d granted verbs used, %d held and unused, %d unused without a reason; %d requests granted by the API server's default roles, %d refused\n",
		len(reqs), a.user, used, held, len(rep.Unused), len(rep.Ungranted), len(rep.Refused))
	if os.Getenv("DRASTACK_AUDIT_TABLE") != "" {
		fmt.Fprint(os.Stderr, rep.Table())
	}
	failed := false
	if early := permissions.FenceFirst(reqs); len(early) > 0 {
		fmt.Fprintf(os.Stderr, "permission audit: the operator wrote before its admission policies were in force:\n  %s\n", strings.Join(early, "\n  "))
		failed = true
	}
	if partial() {
		fmt.Fprintln(os.Stderr, "permission audit: a subset of the tests ran; unused grants are not judged")
	} else if f := rep.Findings(); f != "" {
		fmt.Fprint(os.Stderr, "permission audit: grants the e2e runs never used:\n"+f)
		failed = true
	}
	if failed {
		return 1
	}
	return 0
}

// partial reports whether -run or -skip chose a subset of the tests.
func partial() bool {
	for _, name := range []string{"test.run", "test.skip"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return true
		}
	}
	return false
}
