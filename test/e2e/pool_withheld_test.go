//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	poolctrl "github.com/drastack/drastack/internal/controller/pool"
	poolpkg "github.com/drastack/drastack/internal/pool"
	"github.com/drastack/drastack/test/cluster"
)

// The withheld-pool suite: a multi-host pool of two hosts that the central
// publisher withholds when one host is cordoned, while a claim is still
// allocated on one of its devices. Its DevicePool must say why (the
// publisher's reason), name the claim by namespace/name, outlive the grace
// period while the claim exists, and go once the claim is deleted.
const (
	whNamespace   = "withheld-e2e"
	whDriver      = "wh.e2e.drastack.io"
	whSelectLabel = "e2e.drastack.io/wh"
	whDomainLabel = "e2e.drastack.io/wh-domain"
	whCoordsLabel = "e2e.drastack.io/wh-coords"
	whEntry       = "wh"
	whPool        = "wh-d"
	whClaim       = "held"
	whGrace       = 3 * time.Second
	whTimeout     = 60 * time.Second
)

var whNodes = []string{"wh-0", "wh-1"}

// whDevicePool waits until the DevicePool of the suite's pool satisfies ok
// (nil: it does not exist) and returns it.
func whDevicePool(ctx context.Context, t *testing.T, crc client.Client, what string, ok func(*v1alpha1.DevicePool) bool) *v1alpha1.DevicePool {
	t.Helper()
	var last *v1alpha1.DevicePool
	err := wait.PollUntilContextTimeout(ctx, pollInterval, whTimeout, true, func(ctx context.Context) (bool, error) {
		var list v1alpha1.DevicePoolList
		if err := crc.List(ctx, &list); err != nil {
			return false, nil //nolint:nilerr // retried
		}
		last = nil
		for i := range list.Items {
			if list.Items[i].Status.Driver == whDriver && list.Items[i].Status.Pool == whPool {
				last = &list.Items[i]
			}
		}
		return ok(last), nil
	})
	if err != nil {
		t.Fatalf("DevicePool of pool %s never showed %s: %v; last: %s", whPool, what, err, whDescribe(last))
	}
	return last
}

func whDescribe(dp *v1alpha1.DevicePool) string {
	if dp == nil {
		return "none"
	}
	s := fmt.Sprintf("%s health %s reason %q", dp.Name, dp.Status.Health, dp.Status.Reason)
	for _, p := range dp.Status.Problems {
		s += fmt.Sprintf("\n  %s %s: %s", p.Severity, p.Reason, p.Message)
	}
	return s
}

// TestWithheldPool runs the operator under its own RBAC.
func TestWithheldPool(t *testing.T) {
	var (
		crc  client.Client
		stop func()
	)
	feature := features.New("withheld multi-host pools keep reporting the claims on them").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			var specs []cluster.NodeSpec
			for i, n := range whNodes {
				specs = append(specs, cluster.NodeSpec{Name: n, Labels: map[string]string{whSelectLabel: "true", whDomainLabel: "d", whCoordsLabel: fmt.Sprint(i)}})
			}
			crc = prepareFeature(ctx, t, c, whNamespace, specs...)
			stop = runOperator(ctx, t, c, whNamespace)
			writeStackSpec(ctx, t, crc, whTimeout, func(s *v1alpha1.DRAStackSpec) {
				s.Pools.IncompleteGracePeriod = &metav1.Duration{Duration: whGrace}
				s.MultiHost = []v1alpha1.MultiHostSpec{{
					Name: whEntry, Driver: whDriver,
					NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{whSelectLabel: "true"}},
					DomainLabel:  whDomainLabel, CoordinatesLabel: whCoordsLabel,
					HostGrid: []int32{2}, ChipsPerHost: []int32{1}, Partitions: []string{"1", "2"},
				}}
			})
			return ctx
		}).
		Assess("the withheld pool's DevicePool names the publisher's reason and the claim, and stays while the claim does", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			whDevicePool(ctx, t, crc, "Healthy", func(dp *v1alpha1.DevicePool) bool { return dp != nil && dp.Status.Health == v1alpha1.PoolHealthy })
			pools := currentPoolsOf(ctx, t, c, whDriver)
			p := pools[whPool]
			if p == nil || len(p.Devices) == 0 {
				t.Fatalf("pool %s not published: %v", whPool, pools)
			}
			device := p.Devices[0].Device.Name

			// A claim allocated on one of its devices.
			cl := createAllocatedClaim(ctx, t, c, whNamespace, whClaim, whDriver, whPool, device)

			setUnschedulable(ctx, t, c, whNodes[1], true)
			claimName := whNamespace + "/" + whClaim
			withheld := func(dp *v1alpha1.DevicePool) bool {
				if dp == nil || dp.Status.Reason != string(poolctrl.ReasonPoolWithheld) {
					return false
				}
				var why, missing bool
				for _, p := range dp.Status.Problems {
					why = why || (p.Reason == string(poolctrl.ReasonPoolWithheld) && strings.Contains(p.Message, "withheld") && strings.Contains(p.Message, "1 of 2 hosts are missing"))
					missing = missing || (p.Reason == string(poolpkg.ReasonAllocatedDeviceMissing) && strings.Contains(p.Message, "claim "+claimName))
				}
				return why && missing
			}
			dp := whDevicePool(ctx, t, crc, "REASON PoolWithheld with the publisher's words and the claim "+claimName, withheld)
			t.Logf("withheld: %s", whDescribe(dp))
			if strings.Contains(whDescribe(dp), string(cl.UID)) {
				t.Errorf("the claim is named by its UID: %s", whDescribe(dp))
			}

			// Well past the grace period it is still there, still saying so.
			time.Sleep(3 * whGrace)
			dp = whDevicePool(ctx, t, crc, "still reported past the grace period", withheld)

			if err := c.Client.ResourceV1().ResourceClaims(whNamespace).Delete(ctx, whClaim, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			begin := time.Now()
			whDevicePool(ctx, t, crc, "deleted once the claim is gone", func(dp *v1alpha1.DevicePool) bool { return dp == nil })
			t.Logf("timing: claim deleted -> DevicePool %s deleted in %s", dp.Name, since(begin))
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			if crc != nil {
				_ = crc.Delete(ctx, &v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DRAStackName}})
				_ = wait.PollUntilContextTimeout(ctx, pollInterval, whTimeout, true, func(ctx context.Context) (bool, error) {
					err := crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &v1alpha1.DRAStack{})
					return apierrors.IsNotFound(err), nil
				})
			}
			if stop != nil {
				stop()
			}
			_ = c.Client.CoreV1().Namespaces().Delete(ctx, whNamespace, metav1.DeleteOptions{})
			for _, n := range whNodes {
				if err := c.DeleteNode(ctx, n); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("%v", err)
				}
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, feature)
}

// currentPoolsOf groups a driver's slices into pools by name.
func currentPoolsOf(ctx context.Context, t *testing.T, c *cluster.Cluster, driverName string) map[string]*poolpkg.Pool {
	t.Helper()
	list, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + driverName})
	if err != nil {
		t.Fatalf("list slices: %v", err)
	}
	in := make([]*resourceapi.ResourceSlice, len(list.Items))
	for i := range list.Items {
		in[i] = &list.Items[i]
	}
	out := map[string]*poolpkg.Pool{}
	for _, p := range poolpkg.Group(in) {
		out[p.Pool] = p
	}
	return out
}
