package central

import (
	"slices"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drastack/drastack/internal/driver"
)

// Class returns the operator-owned DeviceClass of a central class name
// (spec.claims.central[].classes): its one selector, ClassSelector, is met
// only in the operator's own view of the central devices of the entries
// that list it, so kube-scheduler can never allocate a claim of it.
func Class(name string) resourcev1.DeviceClass {
	return resourcev1.DeviceClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourcev1.SchemeGroupVersion.String(), Kind: "DeviceClass"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: RuleLabels()},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: ClassSelector(name)},
		}}},
	}
}

// OwnedClass says whether the operator owns a DeviceClass as a central
// class (the same labels as its central rules).
func OwnedClass(c *resourcev1.DeviceClass) bool {
	if c == nil {
		return false
	}
	l := c.Labels
	return l[driver.LabelComponent] == ComponentCentral && l[driver.LabelManagedBy] == driver.ManagedByValue
}

// ClassDiff is what to write so the central classes become wanted.
type ClassDiff struct {
	// Create and Update are classes to write (Update: the existing object
	// with the wanted selectors).
	Create, Update []resourcev1.DeviceClass
	// Delete are owned classes no entry lists any more.
	Delete []resourcev1.DeviceClass
	// NotOwned are wanted names taken by classes the operator did not
	// create: used as they are, never changed.
	NotOwned []string
}

// DiffClasses compares the wanted central class names with the existing
// DeviceClasses. Inputs are not modified.
func DiffClasses(wanted []string, existing []resourcev1.DeviceClass) ClassDiff {
	var d ClassDiff
	byName := map[string]*resourcev1.DeviceClass{}
	for i := range existing {
		byName[existing[i].Name] = &existing[i]
	}
	for _, name := range wanted {
		want := Class(name)
		e, ok := byName[name]
		switch {
		case !ok:
			d.Create = append(d.Create, want)
		case !OwnedClass(e):
			d.NotOwned = append(d.NotOwned, name)
		case !equality.Semantic.DeepEqual(e.Spec.Selectors, want.Spec.Selectors) || len(e.Spec.Config) > 0:
			u := e.DeepCopy()
			u.Spec = want.Spec
			d.Update = append(d.Update, *u)
		}
	}
	for i := range existing {
		if e := &existing[i]; OwnedClass(e) && !slices.Contains(wanted, e.Name) {
			d.Delete = append(d.Delete, *e.DeepCopy())
		}
	}
	return d
}
