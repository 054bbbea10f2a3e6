package pool

import (
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

func duplicateCounterSet(s *resourceapi.ResourceSlice, name, firstSlice string) Problem {
	if firstSlice == s.Name {
		return newProblem(ReasonDuplicateCounterSet, SeverityError, s.Name, "",
			"counter set %s is defined twice in slice %s", name, s.Name)
	}
	return newProblem(ReasonDuplicateCounterSet, SeverityError, s.Name, "",
		"counter set %s is defined in slice %s and again in slice %s", name, firstSlice, s.Name)
}

func duplicateDevice(s *resourceapi.ResourceSlice, name, firstSlice string) Problem {
	if firstSlice == s.Name {
		return newProblem(ReasonDuplicateDeviceName, SeverityError, s.Name, name,
			"device %s is published twice in slice %s", name, s.Name)
	}
	return newProblem(ReasonDuplicateDeviceName, SeverityError, s.Name, name,
		"device %s is published in slice %s and again in slice %s", name, firstSlice, s.Name)
}

// checkConsumption checks that every counter a device consumes exists in a
// counter set of the pool. It runs after all slices are added because a
// device and its counter set normally live in different slices.
//
// While the pool is incomplete the missing set may simply be in a slice
// that has not arrived yet (a driver writes its slices one by one), so
// MissingCounterSet is then a warning; it becomes an error once the pool is
// complete. A missing counter in a set that is present cannot be explained
// by a missing slice and is always an error.
func checkConsumption(p *Pool, complete bool, add func(Problem)) {
	missingSetSeverity := SeverityError
	if !complete {
		missingSetSeverity = SeverityWarning
	}
	for i := range p.Devices {
		d := p.Devices[i].Device
		for j := range d.ConsumesCounters {
			c := &d.ConsumesCounters[j]
			cs := p.CounterSets[c.CounterSet]
			if cs == nil {
				msg := "device %s consumes counters from counter set %s that the pool does not define"
				if !complete {
					msg += " (the pool is incomplete; the set may be in a slice that has not been published yet)"
				}
				add(newProblem(ReasonMissingCounterSet, missingSetSeverity, p.Devices[i].Slice.Name, d.Name,
					msg, d.Name, c.CounterSet))
				continue
			}
			for name := range c.Counters {
				if _, ok := cs.Counters[name]; !ok {
					add(newProblem(ReasonMissingCounter, SeverityError, p.Devices[i].Slice.Name, d.Name,
						"device %s consumes counter %s that counter set %s does not define",
						d.Name, name, cs.Name))
				}
			}
		}
	}
}

// staleProblem reports slices of older generations. They are normal for a
// moment while a driver replaces a pool, so this is a warning.
func staleProblem(p *Pool) Problem {
	const show = 3
	names := make([]string, 0, show)
	for i, s := range p.StaleSlices {
		if i == show {
			break
		}
		names = append(names, s.Name)
	}
	list := strings.Join(names, ", ")
	if more := len(p.StaleSlices) - show; more > 0 {
		list += ", ..."
	}
	return newProblem(ReasonStaleSlices, SeverityWarning, "", "",
		"pool has %d slices of older generations (%s); only generation %d counts",
		len(p.StaleSlices), list, p.Generation)
}
