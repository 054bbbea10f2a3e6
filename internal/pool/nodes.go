package pool

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

// nodeSelection is the node selection of a slice (or of one device under
// perDeviceNodeSelection) once it has been checked. valid is false when the
// object does not set exactly one field correctly; the fields are then
// zero so that nobody schedules against a guess.
type nodeSelection struct {
	nodeName  string
	selector  *corev1.NodeSelector
	allNodes  bool
	perDevice bool
	valid     bool
}

// sliceSelection checks the slice-level node selection the shipped API
// requires: exactly one of nodeName, nodeSelector (with exactly one term),
// allNodes and perDeviceNodeSelection. This holds for slices that carry only
// sharedCounters too: the API server demands a node selection on every slice
// (validateResourceSliceSpec in k8s.io/kubernetes), so a counter slice with
// none is reported like any other.
//
// Explicitly empty or false values (nodeName: "", allNodes: false,
// perDeviceNodeSelection: false) are rejected by the API server; they count
// as "not set" and are reported.
func sliceSelection(s *resourceapi.ResourceSlice, add func(Problem)) nodeSelection {
	spec := &s.Spec
	var sel nodeSelection
	set := 0
	if spec.NodeName != nil {
		if *spec.NodeName == "" {
			add(newProblem(ReasonInvalidNodeSelection, SeverityError, s.Name, "",
				"slice %s sets nodeName to an empty string; it must be unset or name a node", s.Name))
		} else {
			set++
			sel.nodeName = *spec.NodeName
		}
	}
	if spec.NodeSelector != nil {
		set++
		sel.selector = spec.NodeSelector
		if n := len(spec.NodeSelector.NodeSelectorTerms); n != 1 {
			add(newProblem(ReasonInvalidNodeSelection, SeverityError, s.Name, "",
				"slice %s has a nodeSelector with %d terms; it must have exactly one", s.Name, n))
		}
	}
	if spec.AllNodes != nil {
		if *spec.AllNodes {
			set++
			sel.allNodes = true
		} else {
			add(newProblem(ReasonInvalidNodeSelection, SeverityError, s.Name, "",
				"slice %s sets allNodes: false; it must be unset or true", s.Name))
		}
	}
	if spec.PerDeviceNodeSelection != nil {
		if *spec.PerDeviceNodeSelection {
			set++
			sel.perDevice = true
		} else {
			add(newProblem(ReasonInvalidNodeSelection, SeverityError, s.Name, "",
				"slice %s sets perDeviceNodeSelection: false; it must be unset or true", s.Name))
		}
	}
	switch set {
	case 0:
		add(newProblem(ReasonInvalidNodeSelection, SeverityError, s.Name, "",
			"slice %s sets none of nodeName, nodeSelector, allNodes and perDeviceNodeSelection; exactly one is required", s.Name))
		return nodeSelection{}
	case 1:
		sel.valid = true
		return sel
	default:
		add(newProblem(ReasonInvalidNodeSelection, SeverityError, s.Name, "",
			"slice %s sets %s; exactly one of nodeName, nodeSelector, allNodes and perDeviceNodeSelection is allowed",
			s.Name, sliceFieldsSet(spec)))
		// Keep perDevice so that the devices are still checked against the
		// rule their slice asked for; the selection itself stays invalid.
		return nodeSelection{perDevice: sel.perDevice}
	}
}

func sliceFieldsSet(spec *resourceapi.ResourceSliceSpec) string {
	var names []string
	if spec.NodeName != nil && *spec.NodeName != "" {
		names = append(names, "nodeName")
	}
	if spec.NodeSelector != nil {
		names = append(names, "nodeSelector")
	}
	if spec.AllNodes != nil && *spec.AllNodes {
		names = append(names, "allNodes")
	}
	if spec.PerDeviceNodeSelection != nil && *spec.PerDeviceNodeSelection {
		names = append(names, "perDeviceNodeSelection")
	}
	return strings.Join(names, " and ")
}

// deviceFieldsSet names the node-selection fields a device sets.
func deviceFieldsSet(d *resourceapi.Device) string {
	var names []string
	if d.NodeName != nil {
		names = append(names, "nodeName")
	}
	if d.NodeSelector != nil {
		names = append(names, "nodeSelector")
	}
	if d.AllNodes != nil {
		names = append(names, "allNodes")
	}
	return strings.Join(names, " and ")
}

// deviceSelection resolves where one device is reachable. Without
// perDeviceNodeSelection the device inherits the slice's selection and must
// not set its own; with it, the device must set exactly one of nodeName,
// nodeSelector and allNodes (allNodes: true, nodeName non-empty).
//
// The API documentation of Device.NodeSelector says "must use exactly one
// term" but the API server does not enforce it for devices (only for
// slices), so neither do we: kube-scheduler accepts such devices.
func deviceSelection(s *resourceapi.ResourceSlice, slice nodeSelection, d *resourceapi.Device, add func(Problem)) nodeSelection {
	hasOwn := d.NodeName != nil || d.NodeSelector != nil || d.AllNodes != nil
	if !slice.perDevice {
		if hasOwn {
			add(newProblem(ReasonInvalidNodeSelection, SeverityError, s.Name, d.Name,
				"device %s sets %s but slice %s does not set perDeviceNodeSelection: true",
				d.Name, deviceFieldsSet(d), s.Name))
		}
		return slice
	}
	var sel nodeSelection
	set := 0
	if d.NodeName != nil {
		if *d.NodeName == "" {
			add(newProblem(ReasonInvalidNodeSelection, SeverityError, s.Name, d.Name,
				"device %s sets nodeName to an empty string", d.Name))
		} else {
			set++
			sel.nodeName = *d.NodeName
		}
	}
	if d.NodeSelector != nil {
		set++
		sel.selector = d.NodeSelector
	}
	if d.AllNodes != nil {
		if *d.AllNodes {
			set++
			sel.allNodes = true
		} else {
			add(newProblem(ReasonInvalidNodeSelection, SeverityError, s.Name, d.Name,
				"device %s sets allNodes: false; it must be unset or true", d.Name))
		}
	}
	switch set {
	case 0:
		add(newProblem(ReasonInvalidNodeSelection, SeverityError, s.Name, d.Name,
			"device %s sets none of nodeName, nodeSelector and allNodes, but slice %s has perDeviceNodeSelection: true so exactly one is required",
			d.Name, s.Name))
		return nodeSelection{}
	case 1:
		sel.valid = true
		return sel
	default:
		add(newProblem(ReasonInvalidNodeSelection, SeverityError, s.Name, d.Name,
			"device %s sets %s; exactly one of nodeName, nodeSelector and allNodes is allowed",
			d.Name, deviceFieldsSet(d)))
		return nodeSelection{}
	}
}
