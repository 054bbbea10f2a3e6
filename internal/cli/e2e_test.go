//go:build e2e

package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	drastackv1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/test/cluster"
)

// TestPoolsAgainstAPIServer runs `kubectl dra pools` against a real
// kube-apiserver with the DevicePool CRD: DevicePools are created with
// status as the operator would write it, then read back through a
// kubeconfig given by flag and by $KUBECONFIG.
//
//	go test -tags e2e -run TestPoolsAgainstAPIServer ./internal/cli
func TestPoolsAgainstAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{
		CRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")},
		StartTimeout:      5 * time.Minute,
		Logf:              t.Logf,
	})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})

	scheme := runtime.NewScheme()
	if err := drastackv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	k, err := client.New(c.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	statuses := map[string]drastackv1alpha1.DevicePoolStatus{
		"gpu.example.com-node-1": {
			Driver: "gpu.example.com", Pool: "node-1", Node: "node-1", Generation: 1,
			Slices:  drastackv1alpha1.SliceCounts{Current: 1, Expected: 1},
			Devices: drastackv1alpha1.DeviceCounts{Total: 8, Allocated: 2, Free: 6},
			Health:  drastackv1alpha1.PoolHealthy,
		},
		"gpu.example.com-node-2": {
			Driver: "gpu.example.com", Pool: "node-2", Node: "node-2", Generation: 2,
			Slices:  drastackv1alpha1.SliceCounts{Current: 2, Expected: 2},
			Devices: drastackv1alpha1.DeviceCounts{Total: 16},
			Health:  drastackv1alpha1.PoolInvalid, Reason: "MissingCounter",
			Problems: []drastackv1alpha1.PoolProblem{{
				Reason: "MissingCounter", Severity: "Error", Slice: "node-2-gpu-abc12", Device: "gpu-0-mig-1g-0",
				Message: "device gpu-0-mig-1g-0 consumes counter memorySlice9 that counter set gpu-0-counter-set does not define",
			}},
		},
	}
	for name, st := range statuses {
		p := &drastackv1alpha1.DevicePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := k.Create(ctx, p); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		p.Status = st
		if err := k.Status().Update(ctx, p); err != nil {
			t.Fatalf("update status of %s: %v", name, err)
		}
	}

	liveRun := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Run(args, strings.NewReader(""), &out, &errOut)
		return code, out.String(), errOut.String()
	}

	t.Run("all pools through --kubeconfig", func(t *testing.T) {
		code, stdout, stderr := liveRun("pools", "--kubeconfig", c.KubeconfigPath)
		if code != ExitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		containsAll(t, "stdout", stdout,
			"NAME", "AGE", "gpu.example.com-node-1", "Healthy", "gpu.example.com-node-2", "Invalid",
			"    Error MissingCounter (slice node-2-gpu-abc12, device gpu-0-mig-1g-0): device gpu-0-mig-1g-0 consumes counter memorySlice9")
	})
	t.Run("one pool through $KUBECONFIG", func(t *testing.T) {
		t.Setenv("KUBECONFIG", c.KubeconfigPath)
		code, stdout, stderr := liveRun("pools", "gpu.example.com/node-1", "-o", "json")
		if code != ExitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		containsAll(t, "stdout", stdout, `"pool": "node-1"`, `"allocatedDevices": 2`, `"health": "Healthy"`)
		if strings.Contains(stdout, "node-2") {
			t.Errorf("only node-1 was asked for:\n%s", stdout)
		}
	})
	t.Run("a pool that does not exist", func(t *testing.T) {
		code, _, stderr := liveRun("pools", "gpu.example.com/node-9", "--kubeconfig", c.KubeconfigPath)
		if code != ExitInvalidInput || !strings.Contains(stderr, "no DevicePool") {
			t.Errorf("exit %d, stderr %q; want 1 and no DevicePool", code, stderr)
		}
	})
}
