package scale

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	ctrlpool "github.com/drastack/drastack/internal/controller/pool"
	"github.com/drastack/drastack/internal/pool"
)

func TestRequestKey(t *testing.T) {
	f := &apirequest.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}
	for _, tc := range []struct{ method, url, want string }{
		{http.MethodGet, "/api/v1/nodes", "list nodes"},
		{http.MethodGet, "/api/v1/nodes?watch=true", "watch nodes"},
		{http.MethodGet, "/api/v1/nodes/n1", "get nodes"},
		{http.MethodPatch, "/apis/drastack.io/v1alpha1/devicepools/p/status", "patch devicepools/status.drastack.io"},
		{http.MethodPost, "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims", "create resourceclaims.resource.k8s.io"},
		{http.MethodDelete, "/apis/resource.k8s.io/v1/devicetaintrules/r", "delete devicetaintrules.resource.k8s.io"},
		{http.MethodGet, "/apis", "discovery GET"},
		{http.MethodGet, "/version", "discovery GET"},
	} {
		req := httptest.NewRequest(tc.method, tc.url, nil)
		if got := requestKey(f, req); got != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.method, tc.url, got, tc.want)
		}
	}
}

func TestRequestCounts(t *testing.T) {
	before := RequestCounts{ByVerbResource: map[string]int{"list nodes": 1, "get nodes": 2}, Refused: []string{"a"}}
	after := RequestCounts{ByVerbResource: map[string]int{"list nodes": 1, "get nodes": 5, "patch nodes": 7}, Refused: []string{"a", "b"}}
	d := after.Minus(before)
	if d.Total() != 10 || d.ByVerbResource["get nodes"] != 3 || len(d.Refused) != 1 || d.Refused[0] != "b" {
		t.Errorf("Minus = %+v", d)
	}
	if got := d.Sorted(); !slices.Equal(got, []string{"patch nodes", "get nodes"}) {
		t.Errorf("Sorted = %v", got)
	}
}

func TestProcCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	if _, err := procCPU(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if _, err := procCPU(-1); err == nil {
		t.Error("no error for a process that does not exist")
	}
}

func slice(name, pool string, gen int64, devices ...string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceSliceSpec{
		Driver: "d.example.com", NodeName: ptr.To("n"), Pool: resourceapi.ResourcePool{Name: pool, Generation: gen, ResourceSliceCount: 1}}}
	for _, d := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: d})
	}
	return s
}

func claim(name, pool, device string) resourceapi.ResourceClaim {
	return resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "r", Driver: "d.example.com", Pool: pool, Device: device}}}}}}
}

// devicePool is the DevicePool the operator would write for a healthy
// pool of n devices, used devices of them allocated.
func devicePool(p string, gen int64, n, used int32) *v1alpha1.DevicePool {
	return &v1alpha1.DevicePool{ObjectMeta: metav1.ObjectMeta{Name: ctrlpool.Name(pool.ID{Driver: "d.example.com", Pool: p})},
		Status: v1alpha1.DevicePoolStatus{Generation: gen, Slices: v1alpha1.SliceCounts{Current: 1, Expected: 1}, Health: v1alpha1.PoolHealthy,
			Devices: v1alpha1.DeviceCounts{Total: n, Allocated: used, Free: n - used, Available: n - used,
				Unavailable: v1alpha1.UnavailableDevices{Allocated: used}}}}
}

func TestMismatches(t *testing.T) {
	slices := []*resourceapi.ResourceSlice{slice("a-1", "a", 1, "x", "y"), slice("b-1", "b", 2, "x")}
	claims := []resourceapi.ResourceClaim{claim("c1", "a", "x")}
	good := func() map[string]*v1alpha1.DevicePool {
		a, b := devicePool("a", 1, 2, 1), devicePool("b", 2, 1, 0)
		return map[string]*v1alpha1.DevicePool{a.Name: a, b.Name: b}
	}
	for _, tc := range []struct {
		name   string
		change func(map[string]*v1alpha1.DevicePool)
		want   string
	}{
		{"correct", func(map[string]*v1alpha1.DevicePool) {}, ""},
		{"stale generation", func(m map[string]*v1alpha1.DevicePool) {
			m[ctrlpool.Name(pool.ID{Driver: "d.example.com", Pool: "b"})].Status.Generation = 1
		}, "status"},
		{"allocation not counted", func(m map[string]*v1alpha1.DevicePool) {
			a := devicePool("a", 1, 2, 0)
			m[a.Name] = a
		}, "status"},
		{"missing", func(m map[string]*v1alpha1.DevicePool) {
			delete(m, ctrlpool.Name(pool.ID{Driver: "d.example.com", Pool: "a"}))
		}, "no DevicePool"},
		{"extra", func(m map[string]*v1alpha1.DevicePool) {
			c := devicePool("c", 1, 1, 0)
			m[c.Name] = c
		}, "has no pool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dps := good()
			tc.change(dps)
			s := &snapshot{slices: slices, claims: claims, pools: dps}
			got, n, wrong := s.mismatches(time.Now())
			if wrong != len(got) {
				t.Errorf("%d mismatches counted, %d described", wrong, len(got))
			}
			if n != 2 {
				t.Errorf("%d pools, want 2", n)
			}
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("mismatches %v, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Errorf("mismatches %v, want one with %q", got, tc.want)
			}
		})
	}
}

func TestDoubleAllocations(t *testing.T) {
	if got := doubleAllocations([]resourceapi.ResourceClaim{claim("c1", "a", "x"), claim("c2", "a", "y")}); len(got) != 0 {
		t.Errorf("distinct devices: %v", got)
	}
	if got := doubleAllocations([]resourceapi.ResourceClaim{claim("c1", "a", "x"), claim("c2", "a", "x")}); len(got) != 1 {
		t.Errorf("one device twice: %v", got)
	}
}

// The harness gives the operator the memory limit of the Deployment
// config/default installs, as the Deployment passes it.
func TestDeployedMemoryLimit(t *testing.T) {
	root := filepath.Join("..", "..")
	_, deploy := RepoDirs(root)
	got, err := deployedMemoryLimit(deploy)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "config", "manager", "manager.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	for _, doc := range strings.Split(string(data), "\n---") {
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil || d.Kind != "Deployment" {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name == "manager" {
				want = c.Resources.Limits.Memory().Value()
			}
		}
	}
	if want == 0 || got != want {
		t.Errorf("deployedMemoryLimit = %d, config/manager/manager.yaml says %d", got, want)
	}
}
