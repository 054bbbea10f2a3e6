//go:build e2e

// Package e2e holds the end-to-end suites. They run against the real local
// control plane (package test/cluster) with kwok nodes, so they are behind
// the e2e build tag: go test -tags e2e ./test/e2e/...
package e2e

import (
	"fmt"
	"os"
	"testing"
	"time"

	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/drastack/drastack/test/cluster"
	"github.com/drastack/drastack/test/scale"
)

// LogDirEnv names a folder that keeps the component logs of the suite's
// cluster after the run, for CI artefacts.
const LogDirEnv = "DRASTACK_E2E_LOG_DIR"

// CRDDir holds the project's CRDs. The shared cluster starts without them:
// a feature that needs them installs them in its Setup with
// cluster.FromContext(ctx).InstallCRDs(CRDDir), so that a suite that does
// not use them cannot be broken by them.
const CRDDir = "../../config/crd/bases"

// suiteNodes is how many kwok nodes the shared cluster starts with.
const suiteNodes = 2

var testenv env.Environment

func TestMain(m *testing.M) {
	// TestScale100 runs the operator in a child process started from this
	// binary, to measure its memory and CPU apart from the test's.
	if child, err := scale.OperatorProcessMain(); child {
		if err != nil {
			fmt.Fprintln(os.Stderr, "scale operator:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	audit, err := newPermissionAudit(os.Getenv(LogDirEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	opts := cluster.Options{
		Nodes:        suiteNodes,
		LogDir:       os.Getenv(LogDirEnv),
		StartTimeout: 3 * time.Minute,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "e2e cluster: "+format+"\n", args...)
		},
		// Every request of the operator's ServiceAccount is recorded, for
		// the permission audit after the suites (audit_test.go).
		AuditLog:   audit.log,
		AuditUsers: []string{audit.user},
	}
	testenv = env.NewWithConfig(envconf.New())
	testenv.Setup(cluster.Setup(opts))
	testenv.Finish(cluster.Finish())
	os.Exit(audit.check(testenv.Run(m)))
}
