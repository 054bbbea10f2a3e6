package difftest

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

// gatedFields adds, after the cluster is built, the fields behind feature
// gates that the pools themselves do not draw: compatibility groups on
// partitions (KEP-5963), slices that skip node operations (KEP-5945) and
// nodes that declare it, devices with binding conditions, and
// DeviceTaintRules. They are generated whatever the case's gates, so that a
// gate that is off is exercised too (the slice is ignored, the device not
// allocated, the rule not applied).
func (g *gen) gatedFields() {
	groups := []string{"g1", "g2", "g3"}
	grouped := map[string]bool{}
	for _, s := range g.c.Inputs.Slices {
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			for j := range d.ConsumesCounters {
				key := s.Spec.Driver + "/" + s.Spec.Pool.Name
				if _, decided := grouped[key]; !decided {
					grouped[key] = g.chance(0.3)
				}
				if !grouped[key] || g.chance(0.2) {
					continue
				}
				a := g.r.IntN(len(groups))
				cg := []string{groups[a]}
				if g.chance(0.4) {
					cg = append(cg, groups[(a+1)%len(groups)])
				}
				d.ConsumesCounters[j].CompatibilityGroups = cg
			}
			if g.chance(0.04) {
				d.BindingConditions = []string{"example.com/attached"}
				d.BindingFailureConditions = []string{"example.com/failed"}
			}
		}
		if ptr.Deref(s.Spec.NodeName, "") != "" && len(s.Spec.Devices) > 0 && g.chance(0.1) {
			s.Spec.SkipNodeOperations = []resourceapi.SkipNodeOperation{"*"}
		}
	}
	for _, n := range g.c.Inputs.Nodes {
		if g.chance(0.5) {
			n.Status.DeclaredFeatures = []string{"DRAOptionalNodeOperations"}
		}
	}
	for i := range g.r.IntN(3) {
		if !g.chance(0.5) || len(g.devices) == 0 {
			continue
		}
		d := g.devices[g.r.IntN(len(g.devices))]
		sel := &resourceapi.DeviceTaintSelector{}
		switch g.r.IntN(3) {
		case 0:
			sel.Driver, sel.Pool, sel.Device = ptr.To(d.driver), ptr.To(d.pool), ptr.To(d.dev.Name)
		case 1:
			sel.Driver, sel.Pool = ptr.To(d.driver), ptr.To(d.pool)
		default:
			sel.Device = ptr.To(d.dev.Name)
		}
		effects := []resourceapi.DeviceTaintEffect{resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute, resourceapi.DeviceTaintEffectNone}
		g.c.Inputs.TaintRules = append(g.c.Inputs.TaintRules, resourceapi.DeviceTaintRule{
			ObjectMeta: g.meta(fmt.Sprintf("rule-%d", i)),
			Spec: resourceapi.DeviceTaintRuleSpec{
				DeviceSelector: sel,
				Taint:          resourceapi.DeviceTaint{Key: []string{"k1", "k3"}[g.r.IntN(2)], Value: "v1", Effect: effects[g.r.IntN(3)]},
			},
		})
	}
}
