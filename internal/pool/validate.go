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
