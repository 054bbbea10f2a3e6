package admissionpolicy

import (
	"maps"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/admission"
)

// operator is the user name of DefaultIdentity.
var operator = DefaultIdentity.Username()

// admin is anyone else.
const admin = "kubernetes-admin"

// pair finds a policy of the set by name.
func pair(t *testing.T, name string) Pair {
	t.Helper()
	for _, p := range append(Set(DefaultIdentity), ProbePair(DefaultIdentity, "0123456789ab")) {
		if p.Policy.Name == name {
			return p
		}
	}
	t.Fatalf("no policy %s in the set", name)
	return Pair{}
}

// outcome is what a table case expects.
type outcome int

const (
	// notMatched: the policy does not look at the request.
	notMatched outcome = iota
	// allowed: it looks and lets it through.
	allowed
	// denied: it refuses it, with a message containing want.
	denied
)

func (o outcome) String() string { return [...]string{"not matched", "allowed", "denied"}[o] }

// tcase is one request and what the policy must do with it.
type tcase struct {
	name string
	r    req
	want outcome
	// msg must be part of the refusal message.
	msg string
}

// run checks every case against the named policy.
func run(t *testing.T, policy string, cases []tcase) {
	t.Helper()
	p := pair(t, policy)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := decide(t, p, c.r)
			got := notMatched
			switch {
			case v.denied:
				got = denied
			case v.matched:
				got = allowed
			}
			if got != c.want {
				t.Fatalf("%s: got %s (%q), want %s", policy, got, v.message, c.want)
			}
			if c.msg != "" && !strings.Contains(v.message, c.msg) {
				t.Errorf("%s: message %q does not contain %q", policy, v.message, c.msg)
			}
		})
	}
}

// obj builds an object: metadata from name, namespace and labels, then the
// given top-level fields.
func obj(name, namespace string, labels map[string]string, fields map[string]any) map[string]any {
	meta := map[string]any{"name": name}
	if namespace != "" {
		meta["namespace"] = namespace
	}
	if labels != nil {
		l := map[string]any{}
		for k, v := range labels {
			l[k] = v
		}
		meta["labels"] = l
	}
	out := map[string]any{"metadata": meta}
	maps.Copy(out, fields)
	return out
}

// deepCopy copies a JSON-like value.
func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}

// edit returns a changed deep copy of o.
func edit(o map[string]any, change func(map[string]any)) map[string]any {
	c := deepCopy(o).(map[string]any)
	change(c)
	return c
}

// m and l are shorthands for JSON objects and lists.
type m = map[string]any
type l = []any

// stackLabels are the labels of a driver lifecycle object.
var stackLabels = map[string]string{labelStack: "default", labelComponent: "kubelet-plugin", labelManagedBy: managedByValue}

// Request builders for the common shapes.
func create(user, group, resource, ns string, o map[string]any) req {
	return req{op: admission.Create, user: user, group: group, resource: resource, namespace: ns, name: name(o), obj: o}
}

func update(user, group, resource, ns string, old, cur map[string]any) req {
	return req{op: admission.Update, user: user, group: group, resource: resource, namespace: ns, name: name(cur), obj: cur, old: old}
}

func del(user, group, resource, ns string, old map[string]any) req {
	return req{op: admission.Delete, user: user, group: group, resource: resource, namespace: ns, name: name(old), old: old}
}

func name(o map[string]any) string {
	n, _ := o["metadata"].(map[string]any)["name"].(string)
	return n
}

// inNamespace sets the labels of the request's namespace.
func inNamespace(r req, labels map[string]string) req {
	r.nsLabels = labels
	return r
}

// withParams sets the DRAStack.
func withParams(r req, stack map[string]any) req {
	r.params = stack
	return r
}

func dryRun(r req) req {
	r.dryRun = true
	return r
}
