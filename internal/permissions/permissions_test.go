package permissions

import (
	"bufio"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drastack/drastack/internal/operator"
)

const source = `package x

// The claim loop reads pods (cache) and lifts their gate (patch).
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// Held only to grant it to the nvidia-gpu controller (profiles/nvidia-gpu).
// +kubebuilder:rbac:groups=apps,resources=daemonsets,verbs=update
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=create
func f() {}

// the lease, by name.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;update,resourceNames=drastack.drastack.io,namespace=system
// Status writes.
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims/status,verbs=patch
`

func TestParseMarkers(t *testing.T) {
	ms, err := parseLines(bufio.NewScanner(strings.NewReader(source)), "x.go")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 5 {
		t.Fatalf("%d markers, want 5: %+v", len(ms), ms)
	}
	for i, c := range []struct {
		line      int
		doc       string
		held      bool
		resources []string
		verbs     []string
		names     []string
		ns        string
	}{
		{4, "The claim loop reads pods (cache) and lifts their gate (patch).", false, []string{"pods"}, []string{"get", "list", "watch", "patch"}, nil, ""},
		{6, "Held only to grant it to the nvidia-gpu controller (profiles/nvidia-gpu).", true, []string{"daemonsets"}, []string{"update"}, nil, ""},
		{7, "Held only to grant it to the nvidia-gpu controller (profiles/nvidia-gpu).", true, []string{"configmaps"}, []string{"create"}, nil, ""},
		{11, "the lease, by name.", false, []string{"leases"}, []string{"get", "update"}, []string{"drastack.drastack.io"}, "system"},
		{13, "Status writes.", false, []string{"resourceclaims/status"}, []string{"patch"}, nil, ""},
	} {
		m := ms[i]
		if m.Line != c.line || m.Doc != c.doc || m.Held() != c.held || !slices.Equal(m.Resources, c.resources) ||
			!slices.Equal(m.Verbs, c.verbs) || !slices.Equal(m.ResourceNames, c.names) || m.Namespace != c.ns {
			t.Errorf("marker %d = %+v (held %v), want %+v", i, m, m.Held(), c)
		}
	}
	if ms[0].Groups[0] != "" {
		t.Errorf(`groups="" parsed as %q`, ms[0].Groups)
	}
}

func TestParseMarkersRefusesNonsense(t *testing.T) {
	for _, bad := range []string{
		"// +kubebuilder:rbac:groups=apps,resources=daemonsets",
		"// +kubebuilder:rbac:groups=apps,resources=daemonsets,verbs=get,colour=blue",
		"// +kubebuilder:rbac:groups=apps,verbs",
	} {
		if _, err := parseLines(bufio.NewScanner(strings.NewReader(bad)), "bad.go"); err == nil || !strings.Contains(err.Error(), "bad.go:1") {
			t.Errorf("%q: err = %v, want one naming bad.go:1", bad, err)
		}
	}
}

func TestHeld(t *testing.T) {
	for doc, want := range map[string]bool{
		"Held only to grant it to the kubelet plugin.":                   true,
		"observe.go reads nodes. Held for the nvidia-gpu plugin too.":    true,
		"observe.go reads nodes; Held for leader election.":              true,
		"observe.go reads nodes. Also held to grant it to the plugin.":   false,
		"Holder of the lease.":                                           false,
		"The webhook reads them. Heldout is not a word that counts here": false,
	} {
		if got := (Marker{Doc: doc}).Held(); got != want {
			t.Errorf("Held(%q) = %v, want %v", doc, got, want)
		}
	}
}

// auditLine builds one audit event.
func auditLine(id, stage, user, verb, group, resource, sub, ns, name string, code int, extra string) string {
	ref := `"objectRef":{"resource":"` + resource + `","namespace":"` + ns + `","name":"` + name + `","apiGroup":"` + group + `","subresource":"` + sub + `"}`
	return `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"` + id + `","stage":"` + stage +
		`","requestURI":"/x` + extra + `","verb":"` + verb + `","user":{"username":"` + user + `"},` + ref +
		`,"responseStatus":{"metadata":{},"code":` + itoa(code) + `},"requestReceivedTimestamp":"2026-01-01T10:00:0` + id + `.000000Z","stageTimestamp":"2026-01-01T10:00:0` + id + `.500000Z","annotations":{"authorization.k8s.io/decision":"allow"}}`
}

func itoa(n int) string {
	return strings.TrimSpace(strings.ReplaceAll(time.Duration(n).String(), "ns", ""))
}

const op = "system:serviceaccount:drastack-system:drastack-controller-manager"

func TestParseAuditAndCompare(t *testing.T) {
	log := strings.Join([]string{
		auditLine("1", "ResponseComplete", op, "patch", "", "pods", "", "team-a", "p", 200, ""),
		auditLine("2", "ResponseStarted", op, "watch", "", "pods", "", "", "", 200, ""),
		auditLine("3", "ResponseComplete", "kubernetes-admin", "update", "apps", "daemonsets", "", "x", "d", 200, ""),
		auditLine("4", "ResponseComplete", op, "get", "coordination.k8s.io", "leases", "", "drastack-system", "drastack.drastack.io", 200, ""),
		auditLine("5", "ResponseComplete", op, "get", "coordination.k8s.io", "leases", "", "other", "drastack.drastack.io", 200, ""),
		auditLine("6", "ResponseComplete", op, "create", "authentication.k8s.io", "selfsubjectreviews", "", "", "", 201, ""),
		auditLine("2", "ResponseComplete", op, "watch", "", "pods", "", "", "", 200, ""),
	}, "\n")
	reqs, err := ParseAudit(strings.NewReader(log), op)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 5 {
		t.Fatalf("%d requests of the operator, want 5 (the watch once): %+v", len(reqs), reqs)
	}
	ms, err := parseLines(bufio.NewScanner(strings.NewReader(source)), "x.go")
	if err != nil {
		t.Fatal(err)
	}
	for i := range ms {
		ms[i].File = "x.go"
	}
	rep := Compare(ms, reqs, map[string]string{"system": "drastack-system"})
	used := map[string]int{}
	for _, u := range rep.Uses {
		used[u.Key()] += u.Count
	}
	for key, want := range map[string]int{
		"patch /pods": 1, "watch /pods": 1, "get /pods": 0, "list /pods": 0,
		"get coordination.k8s.io/leases": 1, // the one in "other" is not the Role's namespace
		"update apps/daemonsets":         0, // the administrator's request is not the operator's
	} {
		if used[key] != want {
			t.Errorf("%s used %d times, want %d", key, used[key], want)
		}
	}
	var unused []string
	for _, u := range rep.Unused {
		unused = append(unused, u.Key())
	}
	// Held markers may go unused; the others may not.
	want := []string{"get /pods", "list /pods", "update coordination.k8s.io/leases", "patch resource.k8s.io/resourceclaims/status"}
	if !slices.Equal(unused, want) {
		t.Errorf("unused = %v, want %v", unused, want)
	}
	if len(rep.Ungranted) != 2 {
		t.Errorf("ungranted = %+v, want the lease of another namespace and the SelfSubjectReview", rep.Ungranted)
	}
	if f := rep.Findings(); !strings.Contains(f, "x.go:4: get /pods is granted but the e2e runs never used it") {
		t.Errorf("findings do not name the marker and the verb:\n%s", f)
	}
	if tbl := rep.Table(); !strings.Contains(tbl, "| patch | core/pods |  | 1 | team-a | x.go:4 |  |") || !strings.Contains(tbl, "| update | apps/daemonsets |  | 0 |  | x.go:6 | held |") {
		t.Errorf("table:\n%s", tbl)
	}
}

func TestParseAuditNamesTheBadLine(t *testing.T) {
	_, err := ParseAudit(strings.NewReader(auditLine("1", "ResponseComplete", op, "get", "", "pods", "", "a", "b", 200, "")+"\n{not json\n"), op)
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("err = %v, want one naming line 2", err)
	}
}

func TestFenceFirst(t *testing.T) {
	at := func(s int) time.Time { return time.Date(2026, 1, 1, 10, 0, s, 0, time.UTC) }
	req := func(s int, verb, group, resource, name string, dry bool, msg string) Request {
		return Request{Verb: verb, Group: group, Resource: resource, Name: name, Allowed: true, DryRun: dry, Message: msg, Received: at(s), Done: at(s).Add(100 * time.Millisecond)}
	}
	crd := func(s int) Request {
		return req(s, "get", "apiextensions.k8s.io", "customresourcedefinitions", "drastacks.drastack.io", false, "")
	}
	policy := func(s int) Request {
		return req(s, "patch", "admissionregistration.k8s.io", "validatingadmissionpolicies", "drastack-operator-pod-gates", false, "")
	}
	probeOK := func(s int) Request {
		return req(s, "create", "events.k8s.io", "events", "drastack-admission-probe-abc", true, "denied request: drastack admission probe abc: the admission policies are in force")
	}
	probeEarly := func(s int) Request {
		return req(s, "create", "events.k8s.io", "events", "drastack-admission-probe-abc", true, "")
	}
	write := func(s int) Request { return req(s, "patch", "", "pods", "p", false, "") }
	as := func(agent string, r Request) Request { r.UserAgent = agent; return r }
	for _, c := range []struct {
		name string
		reqs []Request
		bad  int
	}{
		{"install, probe, then write", []Request{crd(1), policy(2), probeEarly(3), probeOK(4), write(5)}, 0},
		{"a write while the probe still goes through", []Request{crd(1), policy(2), probeEarly(3), write(4), probeOK(5)}, 1},
		{"a second run must wait for its own probe", []Request{crd(1), probeOK(2), write(3), crd(10), write(11), probeOK(12), write(13)}, 1},
		{"dry runs, reviews and reads do not count", []Request{req(0, "create", "authentication.k8s.io", "selfsubjectreviews", "", false, ""), crd(1),
			req(2, "create", "resource.k8s.io", "resourceclaims", "drastack-probe-x", true, ""), req(3, "list", "", "pods", "", false, ""), probeOK(4)}, 0},
		{"a driver policy is a write like any other", []Request{crd(1), req(2, "patch", "admissionregistration.k8s.io", "validatingadmissionpolicies", "gpu-example-com-resourceslices-own-node", false, ""), probeOK(3)}, 1},
		// Two replicas at once (leader election): the leader's writes
		// while a standby starts are the leader's, after its own probe.
		{"a standby starting does not make the leader's writes early", []Request{
			as("leader", crd(1)), as("leader", probeOK(2)), as("standby", crd(3)), as("leader", write(4)), as("standby", probeOK(5)), as("standby", write(6))}, 0},
		{"the leader election Lease comes before the installer", []Request{
			as("standby", req(1, "create", "coordination.k8s.io", "leases", "drastack.drastack.io", false, "")), as("standby", crd(2)), as("standby", probeOK(3))}, 0},
		{"the allocation fence's Lease does not", []Request{
			as("standby", req(1, "create", "coordination.k8s.io", "leases", "drastack-allocation-fence", false, "")), as("standby", crd(2)), as("standby", probeOK(3))}, 1},
		{"but the standby's own write before its probe is", []Request{
			as("leader", crd(1)), as("leader", probeOK(2)), as("standby", crd(3)), as("standby", write(4)), as("standby", probeOK(5))}, 1},
	} {
		if got := FenceFirst(c.reqs); len(got) != c.bad {
			t.Errorf("%s: %d early writes %v, want %d", c.name, len(got), got, c.bad)
		}
	}
}

// The Lease FenceFirst lets through is the manager's leader election's.
func TestLeaderElectionLease(t *testing.T) {
	if leaderElection != operator.LeaderElectionID {
		t.Errorf("FenceFirst lets Lease %q through; the operator's leader election takes %q", leaderElection, operator.LeaderElectionID)
	}
}
