package upstream

import (
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// classLister serves the session's DeviceClasses to the upstream allocator,
// which wants the informer lister interface kube-scheduler has.
type classLister struct {
	list   []*resourceapi.DeviceClass
	byName map[string]*resourceapi.DeviceClass
}

func newClassLister(classes []*resourceapi.DeviceClass) *classLister {
	l := &classLister{list: classes, byName: make(map[string]*resourceapi.DeviceClass, len(classes))}
	for _, c := range classes {
		if c == nil {
			continue
		}
		if _, dup := l.byName[c.Name]; !dup {
			l.byName[c.Name] = c
		}
	}
	return l
}

// List implements structured.DeviceClassLister.
func (l *classLister) List() ([]*resourceapi.DeviceClass, error) { return l.list, nil }

// Get implements structured.DeviceClassLister; a missing class is a NotFound
// error, as from an informer.
func (l *classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l.byName[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: resourceapi.GroupName, Resource: "deviceclasses"}, name)
}
