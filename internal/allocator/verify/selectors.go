package verify

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/drastack/drastack/internal/pool"
)

// selectorCache holds compiled selectors for all checkers: compiling is the
// expensive part and the same expressions come back for every claim. The
// features are those of the target cluster (list attributes, consumable
// capacity), so selectors mean what they mean to kube-scheduler there.
var selectorCache = dracel.NewCache(1024, dracel.Features{
	EnableConsumableCapacity: true,
	EnableListTypeAttributes: true,
})

// checkSelectors checks the class selectors and the request's selectors.
func (k *check) checkSelectors(res result) {
	class := k.classes[res.req.class]
	if class == nil {
		k.fail(RuleRequest, res.id.String(), "device class %q of request %q does not exist", res.req.class, res.req.name)
		return
	}
	if ok, msg := selectorsMatch(class.Spec.Selectors, res.Driver, res.dev); !ok {
		k.fail(RuleSelector, res.id.String(), "class %s: %s", class.Name, msg)
	}
	if ok, msg := selectorsMatch(res.req.selectors, res.Driver, res.dev); !ok {
		k.fail(RuleSelector, res.id.String(), "request %q: %s", res.req.name, msg)
	}
}

// selectorsMatch evaluates selectors against a device; on a mismatch or an
// error it says which selector and why.
func selectorsMatch(selectors []resourceapi.DeviceSelector, driver string, d *pool.Device) (bool, string) {
	for i, s := range selectors {
		if s.CEL == nil {
			return false, fmt.Sprintf("selector #%d has no CEL expression", i)
		}
		expr := selectorCache.GetOrCompile(s.CEL.Expression)
		if expr.Error != nil {
			return false, fmt.Sprintf("selector #%d does not compile: %v", i, expr.Error)
		}
		ok, _, err := expr.DeviceMatches(context.Background(), dracel.Device{
			Driver:                   driver,
			AllowMultipleAllocations: d.Device.AllowMultipleAllocations,
			Attributes:               d.Device.Attributes,
			Capacity:                 d.Device.Capacity,
		})
		if err != nil {
			return false, fmt.Sprintf("selector #%d fails: %v", i, err)
		}
		if !ok {
			return false, fmt.Sprintf("selector #%d (%s) is false", i, s.CEL.Expression)
		}
	}
	return true, ""
}

// firstError is the message of a pool's first error problem.
func firstError(p *pool.Pool) string {
	for _, pr := range p.Problems {
		if pr.Severity == pool.SeverityError {
			return fmt.Sprintf("%s: %s", pr.Reason, pr.Message)
		}
	}
	return "unknown problem"
}
