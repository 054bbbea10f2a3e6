package stack

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// Bounds on spec values that admission cannot check (durations are strings
// to OpenAPI) or that depend on several fields at once.
const (
	// MinResyncPeriod keeps a misconfigured resync from hammering the API server.
	MinResyncPeriod = 10 * time.Second
	// MaxIncompleteGracePeriod bounds how long a broken pool may stay silent.
	MaxIncompleteGracePeriod = 24 * time.Hour
	// MaxHostsPerDomain bounds one multi-host grid: the publisher turns hosts
	// into counters, and a pool's counters must fit in one counter slice.
	MaxHostsPerDomain = 8 * 32
)

// Validate checks a DRAStack spec and returns every problem with its field
// path. Admission already enforces types, enums, patterns and list keys;
// this covers what it cannot, so an object written around a missing or old
// CRD still gets a clear condition instead of a crash.
func Validate(spec *v1alpha1.DRAStackSpec) field.ErrorList {
	var errs field.ErrorList
	root := field.NewPath("spec")
	errs = append(errs, validatePools(&spec.Pools, root.Child("pools"))...)
	errs = append(errs, validateClaims(&spec.Claims, root.Child("claims"))...)
	errs = append(errs, validateDrivers(spec.Drivers, root.Child("drivers"))...)
	for i := range spec.MultiHost {
		errs = append(errs, validateMultiHost(&spec.MultiHost[i], root.Child("multiHost").Index(i))...)
	}
	errs = append(errs, uniqueNames(len(spec.MultiHost), func(i int) string { return spec.MultiHost[i].Name }, root.Child("multiHost"))...)
	return errs
}

func validatePools(p *v1alpha1.PoolsSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if p.ResyncPeriod != nil && p.ResyncPeriod.Duration < MinResyncPeriod {
		errs = append(errs, field.Invalid(path.Child("resyncPeriod"), p.ResyncPeriod.Duration.String(),
			fmt.Sprintf("must be at least %s", MinResyncPeriod)))
	}
	if p.IncompleteGracePeriod != nil {
		d := p.IncompleteGracePeriod.Duration
		if d < 0 || d > MaxIncompleteGracePeriod {
			errs = append(errs, field.Invalid(path.Child("incompleteGracePeriod"), d.String(),
				fmt.Sprintf("must be between 0s and %s", MaxIncompleteGracePeriod)))
		}
	}
	if p.MaxProblems < 0 {
		errs = append(errs, field.Invalid(path.Child("maxProblems"), p.MaxProblems, "must not be negative"))
	}
	return errs
}

func validateClaims(c *v1alpha1.ClaimsSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch c.Engine {
	case "", v1alpha1.EngineNative, v1alpha1.EngineUpstream:
	default:
		errs = append(errs, field.NotSupported(path.Child("engine"), c.Engine,
			[]string{string(v1alpha1.EngineNative), string(v1alpha1.EngineUpstream)}))
	}
	errs = append(errs, uniqueNames(len(c.ImmediateClasses), func(i int) string { return c.ImmediateClasses[i] }, path.Child("immediateClasses"))...)
	return errs
}

func validateDrivers(drivers []v1alpha1.DriverSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, uniqueNames(len(drivers), func(i int) string { return drivers[i].Name }, path)...)
	classOwner := map[string]string{}
	for i := range drivers {
		d := &drivers[i]
		p := path.Index(i)
		if d.Profile == v1alpha1.DriverProfileCustom && d.Image == "" {
			errs = append(errs, field.Required(p.Child("image"), "required when profile is custom"))
		}
		if d.Image != "" {
			if _, err := ParseImage(d.Image); err != nil {
				errs = append(errs, field.Invalid(p.Child("image"), d.Image, err.Error()))
			}
		}
		for j, dc := range d.DeviceClasses {
			if other, ok := classOwner[dc.Name]; ok && other != d.Name {
				errs = append(errs, field.Duplicate(p.Child("deviceClasses").Index(j).Child("name"),
					fmt.Sprintf("%s (also declared by driver %s)", dc.Name, other)))
			}
			classOwner[dc.Name] = d.Name
		}
	}
	return errs
}

func validateMultiHost(m *v1alpha1.MultiHostSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	dims := len(m.HostGrid)
	if dims < 1 || dims > 3 {
		errs = append(errs, field.Invalid(path.Child("hostGrid"), m.HostGrid, "must have 1 to 3 dimensions"))
		return errs
	}
	if len(m.ChipsPerHost) != dims {
		errs = append(errs, field.Invalid(path.Child("chipsPerHost"), m.ChipsPerHost,
			fmt.Sprintf("must have %d entries, one per hostGrid dimension", dims)))
		return errs
	}
	hosts := 1
	chips := make([]int, dims)
	for i := 0; i < dims; i++ {
		if m.HostGrid[i] < 1 {
			errs = append(errs, field.Invalid(path.Child("hostGrid").Index(i), m.HostGrid[i], "must be at least 1"))
		}
		if m.ChipsPerHost[i] < 1 {
			errs = append(errs, field.Invalid(path.Child("chipsPerHost").Index(i), m.ChipsPerHost[i], "must be at least 1"))
		}
		hosts *= int(m.HostGrid[i])
		chips[i] = int(m.HostGrid[i]) * int(m.ChipsPerHost[i])
	}
	if len(errs) > 0 {
		return errs
	}
	if hosts > MaxHostsPerDomain {
		errs = append(errs, field.Invalid(path.Child("hostGrid"), m.HostGrid,
			fmt.Sprintf("%d hosts per domain exceed the %d counters one counter slice can hold", hosts, MaxHostsPerDomain)))
	}
	if len(m.Partitions) == 0 {
		errs = append(errs, field.Required(path.Child("partitions"), "at least one partition shape"))
	}
	for i, shape := range m.Partitions {
		sizes, err := ParseShape(shape)
		p := path.Child("partitions").Index(i)
		if err != nil {
			errs = append(errs, field.Invalid(p, shape, err.Error()))
			continue
		}
		if len(sizes) != dims {
			errs = append(errs, field.Invalid(p, shape, fmt.Sprintf("has %d dimensions, hostGrid has %d", len(sizes), dims)))
			continue
		}
		for d, s := range sizes {
			if s > chips[d] {
				errs = append(errs, field.Invalid(p, shape,
					fmt.Sprintf("dimension %d is %d chips but the grid has %d", d, s, chips[d])))
				break
			}
		}
	}
	return errs
}

// ParseShape parses a partition shape such as "2x4" into chip counts per
// dimension.
func ParseShape(shape string) ([]int, error) {
	if shape == "" {
		return nil, fmt.Errorf("empty shape")
	}
	parts := strings.Split(shape, "x")
	if len(parts) > 3 {
		return nil, fmt.Errorf("shape %q has more than 3 dimensions", shape)
	}
	sizes := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || p[0] == '+' {
			return nil, fmt.Errorf("shape %q: %q is not a positive integer", shape, p)
		}
		sizes[i] = n
	}
	return sizes, nil
}

func uniqueNames(n int, name func(int) string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := make(map[string]bool, n)
	for i := 0; i < n; i++ {
		v := name(i)
		if seen[v] {
			errs = append(errs, field.Duplicate(path.Index(i), v))
		}
		seen[v] = true
	}
	return errs
}

// DriverSpecProblems are the spec errors the driver lifecycle controller
// found while rendering or applying (status.drivers entries with reason
// InvalidSpec, whose message starts with the field path), for SpecValid.
// Entries written for an older generation are ignored: they may describe
// a spec that is gone. known are errors already reported (by Validate),
// left out so that each is said once.
func DriverSpecProblems(st *v1alpha1.DRAStack, known []string) []string {
	ready := meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionDriversReady)
	if ready == nil || ready.ObservedGeneration != st.Generation {
		return nil
	}
	declared := map[string]bool{}
	for _, d := range st.Spec.Drivers {
		declared[d.Name] = true
	}
	var out []string
	for _, d := range st.Status.Drivers {
		if !declared[d.Name] || d.Reason != ReasonInvalidSpec || d.Message == "" {
			continue
		}
		if msg := d.Message; strings.HasPrefix(msg, "spec.") && !slices.Contains(known, msg) && !slices.Contains(out, msg) {
			out = append(out, msg)
		}
	}
	return out
}
