package native

import (
	"errors"
	"fmt"

	"github.com/blang/semver/v4"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"

	resourceapi "k8s.io/api/resource/v1"
	apiservercel "k8s.io/apiserver/pkg/cel"
)

// attributeValue is the native CEL value of an attribute, as selectors see
// it: scalars as int64/bool/string/semver, lists as slices of those.
func attributeValue(a resourceapi.DeviceAttribute) (any, error) {
	switch {
	case a.IntValues != nil:
		return a.IntValues, nil
	case a.BoolValues != nil:
		return a.BoolValues, nil
	case a.StringValues != nil:
		return a.StringValues, nil
	case a.VersionValues != nil:
		out := make([]apiservercel.Semver, len(a.VersionValues))
		for i, s := range a.VersionValues {
			v, err := semver.Parse(s)
			if err != nil {
				return nil, fmt.Errorf("parse semantic version: %w", err)
			}
			out[i] = apiservercel.Semver{Version: v}
		}
		return out, nil
	case a.IntValue != nil:
		return *a.IntValue, nil
	case a.BoolValue != nil:
		return *a.BoolValue, nil
	case a.StringValue != nil:
		return *a.StringValue, nil
	case a.VersionValue != nil:
		v, err := semver.Parse(*a.VersionValue)
		if err != nil {
			return nil, fmt.Errorf("parse semantic version: %w", err)
		}
		return apiservercel.Semver{Version: v}, nil
	}
	return nil, errors.New("attribute has no value")
}

// sizeEstimator gives the cost estimator the maximum sizes of what
// `devices` holds, from the declared types (32 devices, 32 attributes per
// device, 64 characters or list entries per value).
type sizeEstimator struct {
	devices *apiservercel.DeclType
}

// EstimateSize implements checker.CostEstimator.
func (s *sizeEstimator) EstimateSize(element checker.AstNode) *checker.SizeEstimate {
	path := element.Path()
	if len(path) == 0 || path[0] != devicesVar {
		return nil
	}
	t := s.devices
	for _, name := range path[1:] {
		switch {
		case name == "@items" || name == "@values":
			t = t.ElemType
		case name == "@keys":
			t = t.KeyType
		case t.Fields != nil:
			f, ok := t.Fields[name]
			if !ok {
				return nil
			}
			t = f.Type
		default:
			// A map indexed by a constant key (a domain or attribute name).
			t = t.ElemType
		}
		if t == nil {
			return nil
		}
	}
	return &checker.SizeEstimate{Min: 0, Max: uint64(max(t.MaxElements, 0))}
}

// EstimateCallCost implements checker.CostEstimator.
func (s *sizeEstimator) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// stringMap is a CEL map with string keys whose lookups go straight to a Go
// map (a constraint evaluated on thousands of device sets spends much of its
// time in lookups). Everything else (iteration, equality, conversion) is
// the plain CEL map's. With a default, a missing key yields the default, as
// selectors' attribute maps do for unknown domains.
type stringMap struct {
	traits.Mapper
	m   map[string]ref.Val
	def ref.Val
}

func (c *constraintCompiler) stringMap(m map[string]ref.Val, def ref.Val) ref.Val {
	vals := make(map[ref.Val]ref.Val, len(m))
	for k, v := range m {
		vals[types.String(k)] = v
	}
	return &stringMap{Mapper: types.NewRefValMap(c.adapter, vals), m: m, def: def}
}

// Find implements traits.Mapper.
func (s *stringMap) Find(key ref.Val) (ref.Val, bool) {
	if k, ok := key.(types.String); ok {
		if v, ok := s.m[string(k)]; ok {
			return v, true
		}
	} else if v, ok := s.Mapper.Find(key); ok {
		return v, true
	}
	if s.def != nil {
		return s.def, true
	}
	return nil, false
}

// Get implements traits.Indexer.
func (s *stringMap) Get(key ref.Val) ref.Val {
	if v, ok := s.Find(key); ok {
		return v
	}
	return s.Mapper.Get(key)
}

// Contains implements traits.Container.
func (s *stringMap) Contains(key ref.Val) ref.Val {
	_, ok := s.Find(key)
	return types.Bool(ok)
}
