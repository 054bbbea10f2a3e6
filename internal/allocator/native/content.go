package native

import (
	"slices"

	"github.com/google/cel-go/common/types/ref"

	resourceapi "k8s.io/api/resource/v1"
)

// celValue is the CEL constraint view of device d, built once per session,
// and the identity of its contents: devices with equal driver, attributes
// and capacity have the same content and look the same to a constraint.
func (s *Session) celValue(d int32) (ref.Val, int32, error) {
	if s.celVals == nil {
		s.celVals = make([]ref.Val, len(s.devs))
	}
	if v := s.celVals[d]; v != nil {
		return v, s.contentID(d), nil
	}
	dev := &s.devs[d]
	v, err := s.e.constraints.deviceValue(dev.id.driver, dev.dev)
	if err != nil {
		return nil, 0, err
	}
	s.celVals[d] = v
	return v, s.contentID(d), nil
}

// contentID identifies what device d looks like (contentKey): devices with
// equal IDs are indistinguishable to selectors and constraints.
func (s *Session) contentID(d int32) int32 {
	if s.content == nil {
		s.content = make([]int32, len(s.devs))
		for i := range s.content {
			s.content[i] = -1
		}
	}
	if id := s.content[d]; id >= 0 {
		return id
	}
	s.keyBuf = contentKey(s.keyBuf[:0], &s.devs[d])
	id, ok := s.contentIDs[string(s.keyBuf)]
	if !ok {
		id = int32(len(s.contentIDs))
		s.contentIDs[string(s.keyBuf)] = id
	}
	s.content[d] = id
	return id
}

// contentKey encodes what a CEL constraint sees of a device.
func contentKey(buf []byte, dev *device) []byte {
	buf = append(buf, dev.id.driver...)
	names := make([]string, 0, len(dev.dev.Attributes))
	for name := range dev.dev.Attributes {
		names = append(names, string(name))
	}
	slices.Sort(names)
	for _, name := range names {
		buf = append(append(append(buf, 0, 'a'), name...), 0)
		buf = appendAttribute(buf, dev.dev.Attributes[resourceapi.QualifiedName(name)])
	}
	names = names[:0]
	for name := range dev.dev.Capacity {
		names = append(names, string(name))
	}
	slices.Sort(names)
	for _, name := range names {
		buf = append(append(append(buf, 0, 'c'), name...), 0)
		q := dev.dev.Capacity[resourceapi.QualifiedName(name)].Value
		buf = append(buf, q.String()...)
	}
	return buf
}

// exprID interns a CEL constraint expression for memo keys.
func (s *Session) exprID(expr string) uint32 {
	id, ok := s.exprIDs[expr]
	if !ok {
		id = uint32(len(s.exprIDs))
		s.exprIDs[expr] = id
	}
	return id
}
