//go:build e2e

// Package realnode holds the end-to-end suites that need pods that really
// run: a local cluster with a real node (kubelet, kube-proxy, containerd
// and runc, see test/cluster.RealNode) beside a kwok node. The example
// driver is installed from the DRAStack and its plugin, built from this
// tree, registers with the kubelet, publishes its devices and prepares
// them for containers, which print what they got.
//
// Where this machine cannot run a real node (no root, no cgroups, no
// overlayfs, ...), every test skips with one line naming the missing
// piece.
//
// The tests share the cluster and run in file order (driver_test.go,
// operator_test.go, teardown_test.go); each cleans up what it made.
package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/drastack/drastack/internal/driver"
	"github.com/drastack/drastack/internal/images"
	"github.com/drastack/drastack/internal/ociimage"
	"github.com/drastack/drastack/test/cluster"
)

// LogDirEnv names a folder that keeps the component logs of the suite's
// cluster after the run.
const LogDirEnv = "DRASTACK_E2E_LOG_DIR"

// Paths from this package's folder.
const (
	crdDir    = "../../../config/crd/bases"
	deployDir = "../../../config/default"
)

// upgradeImage is the example plugin under a second tag: the upgrade test
// rolls the driver from driver.ExampleImage to it.
const upgradeImage = "ghcr.io/drastack/drastack-example-plugin:v0.1.0-upgrade"

var (
	// suite is the shared cluster; nil when skipReason is set.
	suite *cluster.Cluster
	// skipReason names what this machine lacks for a real node.
	skipReason string
	// binDir holds the binaries built for the suite.
	binDir string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if err := cluster.RealNodeSupport(""); err != nil {
		missing, ok := cluster.IsUnsupported(err)
		if !ok {
			fmt.Fprintln(os.Stderr, "realnode e2e:", err)
			return 1
		}
		skipReason = missing
		fmt.Fprintln(os.Stderr, "realnode e2e: every test skips: "+missing)
		return m.Run()
	}
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var err error
	binDir, err = os.MkdirTemp("", "drastack-realnode-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "realnode e2e:", err)
		return 1
	}
	defer os.RemoveAll(binDir)
	c, err := cluster.Start(ctx, cluster.Options{
		Nodes:             1,
		RealNodes:         1,
		CRDDirectoryPaths: []string{crdDir},
		LogDir:            os.Getenv(LogDirEnv),
		StartTimeout:      3 * time.Minute,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "realnode e2e cluster: "+format+"\n", args...)
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "realnode e2e: start the cluster:", err)
		return 1
	}
	defer func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "realnode e2e: stop the cluster:", err)
		}
	}()
	if err := importPlugin(ctx, c.RealNodes[0]); err != nil {
		fmt.Fprintln(os.Stderr, "realnode e2e:", err)
		return 1
	}
	suite = c
	fmt.Fprintf(os.Stderr, "realnode e2e: cluster, real node and plugin image ready in %s\n", time.Since(begin).Round(100*time.Millisecond))
	return m.Run()
}

// importPlugin builds the example plugin from this tree and imports its
// image under the profile's default reference and under upgradeImage.
func importPlugin(ctx context.Context, n *cluster.RealNode) error {
	bin := filepath.Join(binDir, "drastack-example-plugin")
	if err := cluster.GoBuild(ctx, bin, "./cmd/drastack-example-plugin"); err != nil {
		return err
	}
	img, err := images.ExamplePlugin(bin, "")
	if err != nil {
		return err
	}
	return n.Import(ctx, ociimage.Tagged{Ref: driver.ExampleImage, Image: img}, ociimage.Tagged{Ref: upgradeImage, Image: img})
}

// realNode returns the suite's cluster and real node, or skips the test
// with the one line that says what this machine lacks.
func realNode(t *testing.T) (*cluster.Cluster, *cluster.RealNode) {
	t.Helper()
	if skipReason != "" {
		t.Skip("no real node on this machine: " + skipReason)
	}
	if suite == nil {
		t.Fatal("the suite's cluster did not start")
	}
	return suite, suite.RealNodes[0]
}
