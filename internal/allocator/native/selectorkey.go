package native

import (
	"strconv"
	"sync"

	"github.com/blang/semver/v4"
	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"

	resourceapi "k8s.io/api/resource/v1"
)

// Selector results are shared between devices that look alike to the
// selector. Most selectors read a few attributes by constant name
// (`device.attributes["gpu.example.com"].model == "a100"`), and a cluster
// has thousands of devices with the same model, driver and memory that
// differ only in attributes the selector never reads (index, UUID). For
// such a selector the result is a function of the values it reads, so the
// engine evaluates CEL once per distinct combination of those values and
// not once per device.
//
// The shape of an expression is found from its parse tree: every use of
// `device` must be one of
//
//	device.driver, device.allowMultipleAllocations,
//	device.attributes["domain"].name, device.attributes["domain"]["name"],
//	has(device.attributes["domain"].name), and the same for capacity,
//
// with constant domain and name. Anything else (iterating over a domain's
// attributes, a computed key, passing `device` to a function) leaves the
// expression unshared: it is evaluated per device as before. Sharing never
// changes a result, only how often it is computed.

// selectorShape is what one selector expression reads of a device.
type selectorShape struct {
	// shared is false when the expression reads the device in a way the
	// analysis does not cover.
	shared bool
	paths  []shapePath
}

type shapePath struct {
	capacity     bool
	domain, name string
}

var (
	parseEnvOnce sync.Once
	parseEnv     *cel.Env
)

// analyzeSelector returns the shape of expr; an expression that does not
// parse is not shared (it does not compile either and is rejected earlier).
func analyzeSelector(expr string) *selectorShape {
	parseEnvOnce.Do(func() { parseEnv, _ = cel.NewEnv() })
	sh := &selectorShape{}
	if parseEnv == nil {
		return sh
	}
	ast, iss := parseEnv.Parse(expr)
	if iss != nil && iss.Err() != nil {
		return sh
	}
	sh.shared = true
	sh.walk(ast.NativeRep().Expr())
	return sh
}

const deviceIdent = "device"

func (sh *selectorShape) walk(e celast.Expr) {
	if !sh.shared || e == nil {
		return
	}
	if sh.path(e) {
		return
	}
	switch e.Kind() {
	case celast.IdentKind:
		if e.AsIdent() == deviceIdent {
			sh.shared = false
		}
	case celast.SelectKind:
		sh.walk(e.AsSelect().Operand())
	case celast.CallKind:
		c := e.AsCall()
		if c.IsMemberFunction() {
			sh.walk(c.Target())
		}
		for _, a := range c.Args() {
			sh.walk(a)
		}
	case celast.ListKind:
		for _, el := range e.AsList().Elements() {
			sh.walk(el)
		}
	case celast.MapKind:
		for _, en := range e.AsMap().Entries() {
			me := en.AsMapEntry()
			sh.walk(me.Key())
			sh.walk(me.Value())
		}
	case celast.StructKind:
		for _, f := range e.AsStruct().Fields() {
			sh.walk(f.AsStructField().Value())
		}
	case celast.ComprehensionKind:
		c := e.AsComprehension()
		sh.walk(c.IterRange())
		sh.walk(c.AccuInit())
		sh.walk(c.LoopCondition())
		sh.walk(c.LoopStep())
		sh.walk(c.Result())
	}
}

// path records e when it is one of the allowed uses of `device`.
func (sh *selectorShape) path(e celast.Expr) bool {
	switch e.Kind() {
	case celast.SelectKind:
		s := e.AsSelect()
		if isIdent(s.Operand(), deviceIdent) {
			switch s.FieldName() {
			case "driver", "allowMultipleAllocations":
				return true // always part of the key
			}
			return false
		}
		if capacity, domain, ok := domainMap(s.Operand()); ok {
			sh.paths = append(sh.paths, shapePath{capacity: capacity, domain: domain, name: s.FieldName()})
			return true
		}
	case celast.CallKind:
		c := e.AsCall()
		if c.FunctionName() != operators.Index || len(c.Args()) != 2 {
			return false
		}
		name, ok := stringLiteral(c.Args()[1])
		if !ok {
			return false
		}
		if capacity, domain, ok := domainMap(c.Args()[0]); ok {
			sh.paths = append(sh.paths, shapePath{capacity: capacity, domain: domain, name: name})
			return true
		}
	}
	return false
}

// domainMap matches device.attributes["domain"] and device.capacity["domain"].
func domainMap(e celast.Expr) (capacity bool, domain string, ok bool) {
	if e.Kind() != celast.CallKind {
		return false, "", false
	}
	c := e.AsCall()
	if c.FunctionName() != operators.Index || len(c.Args()) != 2 {
		return false, "", false
	}
	domain, ok = stringLiteral(c.Args()[1])
	if !ok {
		return false, "", false
	}
	m := c.Args()[0]
	if m.Kind() != celast.SelectKind || !isIdent(m.AsSelect().Operand(), deviceIdent) {
		return false, "", false
	}
	switch m.AsSelect().FieldName() {
	case "attributes":
		return false, domain, true
	case "capacity":
		return true, domain, true
	}
	return false, "", false
}

func isIdent(e celast.Expr, name string) bool {
	return e.Kind() == celast.IdentKind && e.AsIdent() == name
}

func stringLiteral(e celast.Expr) (string, bool) {
	if e.Kind() != celast.LiteralKind {
		return "", false
	}
	s, ok := e.AsLiteral().(types.String)
	return string(s), ok
}

// key appends to buf what the selector can see of device dev: its driver,
// allowMultipleAllocations and each path's value (or absence). Devices with
// equal keys get the same result.
func (sh *selectorShape) key(buf []byte, dev *device) []byte {
	buf = append(buf, dev.id.driver...)
	buf = append(buf, 0)
	switch {
	case dev.dev.AllowMultipleAllocations == nil:
		buf = append(buf, 'n')
	case *dev.dev.AllowMultipleAllocations:
		buf = append(buf, 't')
	default:
		buf = append(buf, 'f')
	}
	for _, p := range sh.paths {
		// An attribute of the driver's domain may be published without
		// the domain; both spellings are part of the key.
		buf = appendLookup(buf, dev, p, resourceapi.QualifiedName(p.domain+"/"+p.name))
		if p.domain == dev.id.driver {
			buf = appendLookup(buf, dev, p, resourceapi.QualifiedName(p.name))
		}
	}
	return buf
}

func appendLookup(buf []byte, dev *device, p shapePath, name resourceapi.QualifiedName) []byte {
	if p.capacity {
		c, ok := dev.dev.Capacity[name]
		if !ok {
			return append(buf, 0, '-')
		}
		buf = append(buf, 0, 'q')
		return append(buf, c.Value.String()...)
	}
	a, ok := dev.dev.Attributes[name]
	if !ok {
		return append(buf, 0, '-')
	}
	return appendAttribute(append(buf, 0), a)
}

// appendAttribute encodes the value a selector sees for an attribute: the
// first field set in the order the selector environment reads them, with
// its type.
func appendAttribute(buf []byte, a resourceapi.DeviceAttribute) []byte {
	str := func(v string) {
		buf = strconv.AppendInt(buf, int64(len(v)), 10)
		buf = append(buf, ':')
		buf = append(buf, v...)
	}
	switch {
	case a.IntValues != nil:
		buf = strconv.AppendInt(append(buf, 'I'), int64(len(a.IntValues)), 10)
		for _, v := range a.IntValues {
			buf = strconv.AppendInt(append(buf, ','), v, 10)
		}
	case a.BoolValues != nil:
		buf = strconv.AppendInt(append(buf, 'B'), int64(len(a.BoolValues)), 10)
		for _, v := range a.BoolValues {
			buf = strconv.AppendBool(append(buf, ','), v)
		}
	case a.StringValues != nil:
		buf = strconv.AppendInt(append(buf, 'S'), int64(len(a.StringValues)), 10)
		for _, v := range a.StringValues {
			str(v)
		}
	case a.VersionValues != nil:
		buf = strconv.AppendInt(append(buf, 'V'), int64(len(a.VersionValues)), 10)
		for _, v := range a.VersionValues {
			str(v)
		}
	case a.IntValue != nil:
		buf = strconv.AppendInt(append(buf, 'i'), *a.IntValue, 10)
	case a.BoolValue != nil:
		buf = strconv.AppendBool(append(buf, 'b'), *a.BoolValue)
	case a.StringValue != nil:
		buf = append(buf, 's')
		str(*a.StringValue)
	case a.VersionValue != nil:
		buf = append(buf, 'v')
		str(*a.VersionValue)
	default:
		buf = append(buf, '?')
	}
	return buf
}

// convertible reports whether every attribute of d converts to a CEL value
// (a value is set; versions parse). A selector on a device that does not
// convert fails whatever it reads, so such devices are never shared.
func convertible(d *resourceapi.Device) bool {
	for _, a := range d.Attributes {
		switch {
		case a.IntValues != nil, a.BoolValues != nil, a.StringValues != nil, a.IntValue != nil, a.BoolValue != nil, a.StringValue != nil:
		case a.VersionValues != nil:
			for _, v := range a.VersionValues {
				if _, err := semver.Parse(v); err != nil {
					return false
				}
			}
		case a.VersionValue != nil:
			if _, err := semver.Parse(*a.VersionValue); err != nil {
				return false
			}
		default:
			return false
		}
	}
	return true
}
