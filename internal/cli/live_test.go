package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	drastackv1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// livePools is a cluster with a healthy node-local pool, an invalid one
// whose status lists two problems and leaves three out, and a shared pool
// whose pool name has a slash.
func livePools(t *testing.T) client.Reader {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := drastackv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	created := metav1.NewTime(testNow.Add(-90 * time.Minute))
	pools := []client.Object{
		&drastackv1alpha1.DevicePool{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu.example.com-node-2-x7k2p", CreationTimestamp: created},
			Status: drastackv1alpha1.DevicePoolStatus{
				Driver: "gpu.example.com", Pool: "node-2", Node: "node-2", Generation: 3,
				Slices:  drastackv1alpha1.SliceCounts{Current: 2, Expected: 2},
				Devices: drastackv1alpha1.DeviceCounts{Total: 16, Allocated: 3, Free: 13},
				Health:  drastackv1alpha1.PoolInvalid, Reason: "MissingCounter",
				Problems: []drastackv1alpha1.PoolProblem{
					{Reason: "MissingCounter", Severity: "Error", Slice: "node-2-gpu-abc12", Device: "gpu-0-mig-1g-0", Message: "device gpu-0-mig-1g-0 consumes counter memorySlice9 that counter set gpu-0-counter-set does not define"},
					{Reason: "StaleSlices", Severity: "Warning", Message: "pool has 1 slices of older generations"},
				},
				MoreProblems: 3,
			},
		},
		&drastackv1alpha1.DevicePool{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu.example.com-node-1-a1b2c", CreationTimestamp: metav1.NewTime(testNow.Add(-3 * 24 * time.Hour))},
			Status: drastackv1alpha1.DevicePoolStatus{
				Driver: "gpu.example.com", Pool: "node-1", Node: "node-1", Generation: 1,
				Slices:  drastackv1alpha1.SliceCounts{Current: 1, Expected: 1},
				Devices: drastackv1alpha1.DeviceCounts{Total: 8, Allocated: 8},
				Health:  drastackv1alpha1.PoolHealthy,
			},
		},
		&drastackv1alpha1.DevicePool{
			ObjectMeta: metav1.ObjectMeta{Name: "tpu.example.com-rack-1-slice-q9z8y", CreationTimestamp: created},
			Status: drastackv1alpha1.DevicePoolStatus{
				Driver: "tpu.example.com", Pool: "rack-1/slice", Generation: 7,
				Slices:  drastackv1alpha1.SliceCounts{Current: 1, Expected: 4},
				Devices: drastackv1alpha1.DeviceCounts{Total: 64},
				Health:  drastackv1alpha1.PoolIncomplete,
			},
		},
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(pools...).Build()
}

func TestPoolsLive(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		noCluster  bool
		wantCode   int
		golden     string
		wantStdout []string
		wantStderr []string
	}{{
		name:     "all pools, sorted by driver and pool, problems underneath",
		args:     []string{"pools"},
		wantCode: ExitOK,
		golden:   "pools-all.txt",
	}, {
		name:     "one pool",
		args:     []string{"pools", "gpu.example.com/node-2"},
		wantCode: ExitOK,
		golden:   "pools-one.txt",
	}, {
		name:       "a pool name with a slash",
		args:       []string{"pools", "tpu.example.com/rack-1/slice", "-o", "json"},
		wantCode:   ExitOK,
		wantStdout: []string{`"pool": "rack-1/slice"`, `"health": "Incomplete"`},
	}, {
		name:       "a pool that does not exist",
		args:       []string{"pools", "gpu.example.com/node-9"},
		wantCode:   ExitInvalidInput,
		wantStderr: []string{`no DevicePool for driver "gpu.example.com" and pool "node-9"`},
	}, {
		name:       "not DRIVER/POOL",
		args:       []string{"pools", "gpu.example.com"},
		wantCode:   ExitUsage,
		wantStderr: []string{`want DRIVER/POOL, not "gpu.example.com"`},
	}, {
		name:       "two pools",
		args:       []string{"pools", "a/b", "c/d"},
		wantCode:   ExitUsage,
		wantStderr: []string{"at most one DRIVER/POOL"},
	}, {
		name:       "no cluster",
		args:       []string{"pools"},
		noCluster:  true,
		wantCode:   ExitInvalidInput,
		wantStderr: []string{"no cluster in this test"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c client.Reader
			if !tt.noCluster {
				c = livePools(t)
			}
			code, stdout, stderr := run(t, "", c, tt.args...)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.wantCode, stdout, stderr)
			}
			if tt.golden != "" {
				golden(t, tt.golden, stdout)
			}
			containsAll(t, "stdout", stdout, tt.wantStdout...)
			containsAll(t, "stderr", stderr, tt.wantStderr...)
		})
	}
}

// TestPoolsLiveJSON checks that the live view prints the pool entries of
// validate.
func TestPoolsLiveJSON(t *testing.T) {
	code, stdout, stderr := run(t, "", livePools(t), "pools", "-o", "json")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	out := decodeMap(t, []byte(stdout))
	wantKeys(t, "top level", out, "pools")
	var typed ValidateOutput
	if err := json.Unmarshal([]byte(stdout), &typed); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range typed.Pools {
		got = append(got, p.Driver+"/"+p.Pool+" "+p.Health)
	}
	want := "gpu.example.com/node-1 Healthy,gpu.example.com/node-2 Invalid,tpu.example.com/rack-1/slice Incomplete"
	if strings.Join(got, ",") != want {
		t.Errorf("pools = %v, want %s", got, want)
	}
	inv := typed.Pools[1]
	if inv.Slices != 2 || inv.Devices != 16 || inv.AllocatedDevices != 3 || inv.Generation != 3 || len(inv.Problems) != 2 || inv.Problems[0].Device != "gpu-0-mig-1g-0" {
		t.Errorf("node-2 entry = %+v", inv)
	}
}

// TestNewClientKubeconfig checks that a kubeconfig that cannot be loaded is
// reported, not a panic or a hang.
func TestNewClientKubeconfig(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	_, err := NewClient(t.TempDir()+"/missing", "")
	if err == nil || !strings.Contains(err.Error(), "load kubeconfig") {
		t.Errorf("err = %v, want a load kubeconfig error", err)
	}
}

func TestUtilizationBar(t *testing.T) {
	tests := []struct {
		allocated, total int
		want             string
	}{
		{0, 0, "<none>"},
		{0, 8, "[----------] 0%"},
		{4, 10, "[####------] 40%"},
		{3, 16, "[#---------] 18%"},
		{1, 200, "[----------] 1%"},
		{199, 200, "[#########-] 99%"},
		{8, 8, "[##########] 100%"},
		{9, 8, "[##########] 100%"},
		{-1, 8, "[----------] 0%"},
	}
	for _, tt := range tests {
		if got := utilizationBar(tt.allocated, tt.total); got != tt.want {
			t.Errorf("utilizationBar(%d, %d) = %q, want %q", tt.allocated, tt.total, got, tt.want)
		}
	}
}
