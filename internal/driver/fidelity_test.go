package driver

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// The fidelity tests hold each vendor profile to its vendor's own
// deployment at the pinned release. A vendor table (fidelity_<vendor>_test.go)
// lists, for every object the vendor's chart or manifests create with
// their default values, the fields that decide whether the driver works:
// images, commands, arguments, environment, mounts with their propagation,
// security contexts, probes, placement, RBAC rules, DeviceClass selectors
// and CustomResourceDefinition schemas. The tables are written from
// reading the vendor's files, not generated from them. Both the table and
// the render are flattened into "object: field" facts and compared; every
// fact that differs, or exists on one side only, must be listed in the
// table's differences with the reason, and a listed difference that is no
// longer one fails the test too, so the list stays true when the pin moves.

// vendorDeployment is one vendor's deployment of its driver.
type vendorDeployment struct {
	// Source names the repository, release and files the table was
	// written from.
	Source string
	// Spec is the DRAStack entry whose render is compared: the profile
	// with the options that correspond to the vendor's default values.
	Spec v1alpha1.DriverSpec
	// Objects are the objects the vendor creates, by kind and the base
	// name of the profile object that stands for each (the vendor's own
	// name in a comment); those without a counterpart are listed in
	// Differences.
	Objects []string
	// Workloads are the vendor's DaemonSets and Deployments.
	Workloads []vendorWorkload
	// Identities are the RBAC rules granted to each ServiceAccount, by the
	// base name of the profile's ServiceAccount that stands for it.
	Identities []vendorIdentity
	// Classes are the vendor's DeviceClasses.
	Classes []vendorClass
	// CRDs are the vendor's CustomResourceDefinitions.
	CRDs []vendorCRD
	// Differences are the facts that differ on purpose, by key (see
	// flatten), with the reason.
	Differences map[string]string
}

// vendorWorkload is a DaemonSet or Deployment.
type vendorWorkload struct {
	Kind, Name string
	// UpdateStrategy is "RollingUpdate maxUnavailable=<n>" for a
	// DaemonSet (Kubernetes' default is 1), Replicas for a Deployment.
	UpdateStrategy string
	Replicas       int32
	Pod            podFacts
}

// podFacts are the facts of a pod template that matter.
type podFacts struct {
	ServiceAccount    string // base name of the profile's ServiceAccount
	PriorityClass     string
	HostNetwork       bool
	SecurityContext   string // JSON, "{}" when empty
	Tolerations       []string
	NodeAffinity      []string // required terms, as describeNodeSelector writes them
	PreferredAffinity []string // "weight: term"
	PodAntiAffinity   []string // "weight: labels topologyKey"
	Volumes           map[string]string
	Init, Containers  []containerFacts
}

// containerFacts are the facts of a container that matter.
type containerFacts struct {
	Name            string
	Image           string
	PullPolicy      string
	Command, Args   []string
	Env             map[string]string // value, or "field:<path>"
	Mounts          map[string]string // by volume: "path[ ro][ prop=<mode>]"
	SecurityContext string            // JSON, "{}" when empty
	Probes          map[string]string // startup, liveness, readiness
	Ports           []string
	Resources       string // JSON, "{}" when empty
}

// vendorIdentity are the rules bound to one ServiceAccount.
type vendorIdentity struct {
	ServiceAccount string
	// Cluster rules come from ClusterRoles bound by ClusterRoleBindings,
	// Namespace rules from Roles in the driver namespace.
	Cluster, Namespace []rbacv1.PolicyRule
}

// vendorClass is a DeviceClass: its selectors' CEL expressions (the
// charts' single-quoted strings written with double quotes: the same CEL
// string literals) and its extended resource name.
type vendorClass struct {
	Name                 string
	Selectors            []string
	ExtendedResourceName string
}

// vendorCRD is a CustomResourceDefinition: its names and, per version,
// the schema as "path: facts" lines (see schemaFacts), descriptions left
// out.
type vendorCRD struct {
	Name, Group, Kind, ListKind, Plural, Singular, Scope string
	Versions                                             []vendorCRDVersion
}

type vendorCRDVersion struct {
	Name              string
	Served, Storage   bool
	StatusSubresource bool
	Schema            map[string]string
}

// facts is a flattened deployment: key "<Kind> <name>: <field>".
type facts map[string]string

// flattenVendor turns a vendor table into facts.
func flattenVendor(v vendorDeployment) facts {
	f := facts{}
	for _, o := range v.Objects {
		f["object "+o] = "present"
	}
	for _, w := range v.Workloads {
		id := w.Kind + " " + w.Name
		if w.Kind == "DaemonSet" {
			f[id+": updateStrategy"] = w.UpdateStrategy
		} else {
			f[id+": replicas"] = fmt.Sprint(w.Replicas)
		}
		w.Pod.flatten(id, f)
	}
	for _, idn := range v.Identities {
		flattenRules(f, idn.ServiceAccount, "cluster", idn.Cluster)
		flattenRules(f, idn.ServiceAccount, "namespace", idn.Namespace)
	}
	for _, c := range v.Classes {
		flattenClass(f, c)
	}
	for _, c := range v.CRDs {
		flattenCRD(f, c)
	}
	return f
}

func (p podFacts) flatten(id string, f facts) {
	f[id+": serviceAccount"] = p.ServiceAccount
	f[id+": priorityClassName"] = p.PriorityClass
	f[id+": hostNetwork"] = fmt.Sprint(p.HostNetwork)
	f[id+": securityContext"] = orEmpty(p.SecurityContext)
	f[id+": tolerations"] = strings.Join(p.Tolerations, "; ")
	f[id+": nodeAffinity"] = strings.Join(p.NodeAffinity, " or ")
	f[id+": preferredNodeAffinity"] = strings.Join(p.PreferredAffinity, "; ")
	f[id+": podAntiAffinity"] = strings.Join(p.PodAntiAffinity, "; ")
	for name, v := range p.Volumes {
		f[id+": volume["+name+"]"] = v
	}
	for kind, list := range map[string][]containerFacts{"initContainers": p.Init, "containers": p.Containers} {
		var names []string
		for _, c := range list {
			names = append(names, c.Name)
			c.flatten(fmt.Sprintf("%s: %s[%s]", id, kind, c.Name), f)
		}
		f[id+": "+kind] = strings.Join(names, ", ")
	}
}

func (c containerFacts) flatten(id string, f facts) {
	f[id+".image"] = c.Image
	f[id+".imagePullPolicy"] = c.PullPolicy
	f[id+".command"] = strings.Join(c.Command, " ")
	f[id+".args"] = strings.Join(c.Args, " ")
	f[id+".securityContext"] = orEmpty(c.SecurityContext)
	f[id+".resources"] = orEmpty(c.Resources)
	f[id+".ports"] = strings.Join(c.Ports, ", ")
	for k, v := range c.Env {
		f[id+".env["+k+"]"] = v
	}
	for k, v := range c.Mounts {
		f[id+".mount["+k+"]"] = v
	}
	for k, v := range c.Probes {
		f[id+".probe["+k+"]"] = v
	}
}

// flattenRules writes one fact per (group, resource, verb, name) a rule
// grants, so that rules split or merged differently still compare equal.
func flattenRules(f facts, sa, scope string, rules []rbacv1.PolicyRule) {
	for _, r := range rules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{"*"}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, verb := range r.Verbs {
					for _, n := range names {
						if g == "" {
							g = "core"
						}
						f[fmt.Sprintf("rbac %s: %s %s/%s %s %s", sa, scope, g, res, verb, n)] = "granted"
					}
				}
			}
		}
	}
}

func flattenClass(f facts, c vendorClass) {
	id := "DeviceClass " + c.Name
	f["object "+id] = "present"
	for _, s := range c.Selectors {
		f[id+": selector["+s+"]"] = "present"
	}
	f[id+": extendedResourceName"] = c.ExtendedResourceName
}

func flattenCRD(f facts, c vendorCRD) {
	id := "CustomResourceDefinition " + c.Name
	f["object "+id] = "present"
	f[id+": names"] = strings.Join([]string{c.Group, c.Kind, c.ListKind, c.Plural, c.Singular, c.Scope}, " ")
	for _, v := range c.Versions {
		vid := id + " " + v.Name
		f[vid+": served/storage/status"] = fmt.Sprintf("%t/%t/%t", v.Served, v.Storage, v.StatusSubresource)
		for p, s := range v.Schema {
			f[vid+": schema "+p] = s
		}
	}
}

func orEmpty(s string) string {
	if s == "" {
		return "{}"
	}
	return s
}

// flattenRender turns a render into the same facts, with names stripped
// of the driver's prefix.
func flattenRender(r *Rendered, spec v1alpha1.DriverSpec) (facts, error) {
	f := facts{}
	base := func(name string) string { return strings.TrimPrefix(name, NamePrefix(spec.Name)+"-") }
	roles := map[string][]rbacv1.PolicyRule{}
	type binding struct {
		scope, role string
		subjects    []string
	}
	var bindings []binding
	for _, u := range r.Objects {
		kind, name := u.GetKind(), base(u.GetName())
		id := kind + " " + name
		if kind == "Namespace" {
			continue
		}
		f["object "+id] = "present"
		var obj runtime.Object
		switch kind {
		case "DaemonSet":
			obj = &appsv1.DaemonSet{}
		case "Deployment":
			obj = &appsv1.Deployment{}
		case "ClusterRole", "Role":
			obj = &rbacv1.ClusterRole{}
		case "ClusterRoleBinding", "RoleBinding":
			obj = &rbacv1.RoleBinding{}
		case "DeviceClass":
			obj = &resourcev1.DeviceClass{}
		case "CustomResourceDefinition":
			obj = &apiextensionsv1.CustomResourceDefinition{}
		default:
			continue
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
			return nil, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
		}
		switch kind {
		case "DaemonSet":
			ds := obj.(*appsv1.DaemonSet)
			s := ds.Spec.UpdateStrategy
			f[id+": updateStrategy"] = string(s.Type)
			if s.RollingUpdate != nil && s.RollingUpdate.MaxUnavailable != nil {
				f[id+": updateStrategy"] += " maxUnavailable=" + s.RollingUpdate.MaxUnavailable.String()
			}
			podOf(ds.Spec.Template.Spec, base).flatten(id, f)
		case "Deployment":
			d := obj.(*appsv1.Deployment)
			replicas := int32(1)
			if d.Spec.Replicas != nil {
				replicas = *d.Spec.Replicas
			}
			f[id+": replicas"] = fmt.Sprint(replicas)
			podOf(d.Spec.Template.Spec, base).flatten(id, f)
		case "ClusterRole", "Role":
			roles[kind+" "+u.GetName()] = obj.(*rbacv1.ClusterRole).Rules
		case "ClusterRoleBinding", "RoleBinding":
			b := obj.(*rbacv1.RoleBinding)
			scope := "cluster"
			if kind == "RoleBinding" {
				scope = "namespace"
			}
			var subjects []string
			for _, s := range b.Subjects {
				subjects = append(subjects, base(s.Name))
			}
			bindings = append(bindings, binding{scope: scope, role: b.RoleRef.Kind + " " + b.RoleRef.Name, subjects: subjects})
		case "DeviceClass":
			dc := obj.(*resourcev1.DeviceClass)
			c := vendorClass{Name: dc.Name}
			for _, s := range dc.Spec.Selectors {
				c.Selectors = append(c.Selectors, s.CEL.Expression)
			}
			if dc.Spec.ExtendedResourceName != nil {
				c.ExtendedResourceName = *dc.Spec.ExtendedResourceName
			}
			flattenClass(f, c)
		case "CustomResourceDefinition":
			flattenCRD(f, crdFacts(obj.(*apiextensionsv1.CustomResourceDefinition)))
		}
	}
	for _, b := range bindings {
		for _, s := range b.subjects {
			flattenRules(f, s, b.scope, roles[b.role])
		}
	}
	return f, nil
}

// podOf extracts the facts of a rendered pod template.
func podOf(p corev1.PodSpec, base func(string) string) podFacts {
	out := podFacts{
		ServiceAccount:  base(p.ServiceAccountName),
		PriorityClass:   p.PriorityClassName,
		HostNetwork:     p.HostNetwork,
		SecurityContext: compactJSON(p.SecurityContext),
		Volumes:         map[string]string{},
	}
	for _, t := range p.Tolerations {
		out.Tolerations = append(out.Tolerations, tolerationFact(t))
	}
	if a := p.Affinity; a != nil {
		if na := a.NodeAffinity; na != nil {
			if na.RequiredDuringSchedulingIgnoredDuringExecution != nil {
				for _, term := range na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
					out.NodeAffinity = append(out.NodeAffinity, describeNodeSelector(&corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term}}))
				}
			}
			for _, pref := range na.PreferredDuringSchedulingIgnoredDuringExecution {
				out.PreferredAffinity = append(out.PreferredAffinity, fmt.Sprintf("%d: %s", pref.Weight, describeNodeSelector(&corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{pref.Preference}})))
			}
		}
		if pa := a.PodAntiAffinity; pa != nil {
			for _, w := range pa.PreferredDuringSchedulingIgnoredDuringExecution {
				out.PodAntiAffinity = append(out.PodAntiAffinity, fmt.Sprintf("%d: %s %s", w.Weight, compactJSON(w.PodAffinityTerm.LabelSelector), w.PodAffinityTerm.TopologyKey))
			}
		}
	}
	for _, v := range p.Volumes {
		out.Volumes[v.Name] = volumeFact(v)
	}
	for _, c := range p.InitContainers {
		out.Init = append(out.Init, containerOf(c))
	}
	for _, c := range p.Containers {
		out.Containers = append(out.Containers, containerOf(c))
	}
	return out
}

func containerOf(c corev1.Container) containerFacts {
	out := containerFacts{
		Name: c.Name, Image: c.Image, PullPolicy: string(c.ImagePullPolicy), Command: c.Command, Args: c.Args,
		Env: map[string]string{}, Mounts: map[string]string{}, Probes: map[string]string{},
		SecurityContext: compactJSON(c.SecurityContext), Resources: compactJSON(c.Resources),
	}
	for _, e := range c.Env {
		out.Env[e.Name] = envFact(e)
	}
	for _, m := range c.VolumeMounts {
		out.Mounts[m.Name] = mountFact(m)
	}
	for kind, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p != nil {
			out.Probes[kind] = probeFact(p)
		}
	}
	for _, p := range c.Ports {
		out.Ports = append(out.Ports, fmt.Sprintf("%s %d/%s", p.Name, p.ContainerPort, orTCP(p.Protocol)))
	}
	return out
}

func orTCP(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

func envFact(e corev1.EnvVar) string {
	if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
		return "field:" + e.ValueFrom.FieldRef.FieldPath
	}
	return e.Value
}

func mountFact(m corev1.VolumeMount) string {
	s := m.MountPath
	if m.ReadOnly {
		s += " ro"
	}
	if m.MountPropagation != nil {
		s += " prop=" + string(*m.MountPropagation)
	}
	return s
}

func volumeFact(v corev1.Volume) string {
	if v.HostPath == nil {
		return compactJSON(v.VolumeSource)
	}
	s := "hostPath " + v.HostPath.Path
	if v.HostPath.Type != nil && *v.HostPath.Type != "" {
		s += " " + string(*v.HostPath.Type)
	}
	return s
}

// tolerationFact is "key operator value effect", empty parts left out.
func tolerationFact(t corev1.Toleration) string {
	return strings.Join(strings.Fields(fmt.Sprintf("%s %s %s %s", t.Key, orExists(t.Operator), t.Value, t.Effect)), " ")
}

func orExists(op corev1.TolerationOperator) corev1.TolerationOperator {
	if op == "" {
		return corev1.TolerationOpEqual
	}
	return op
}

// probeFact writes a probe as "grpc 51515 liveness period=1 timeout=10
// failure=600" (fields the manifest leaves unset are left out: the API
// server fills the same defaults on both sides).
func probeFact(p *corev1.Probe) string {
	var s string
	switch {
	case p.GRPC != nil:
		s = fmt.Sprintf("grpc %d %s", p.GRPC.Port, ptrString(p.GRPC.Service))
	case p.HTTPGet != nil:
		s = fmt.Sprintf("http %s %s", p.HTTPGet.Port.String(), p.HTTPGet.Path)
	case p.Exec != nil:
		s = "exec " + strings.Join(p.Exec.Command, " ")
	}
	for _, kv := range []struct {
		k string
		v int32
	}{{"delay", p.InitialDelaySeconds}, {"period", p.PeriodSeconds}, {"timeout", p.TimeoutSeconds}, {"failure", p.FailureThreshold}, {"success", p.SuccessThreshold}} {
		if kv.v != 0 {
			s += fmt.Sprintf(" %s=%d", kv.k, kv.v)
		}
	}
	return s
}

func ptrString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// compactJSON is a value's JSON with empty objects as "{}", so that an
// unset security context and an empty one compare equal.
func compactJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil || string(data) == "null" {
		return "{}"
	}
	return string(data)
}

// crdFacts reads a rendered CustomResourceDefinition into a vendorCRD.
func crdFacts(crd *apiextensionsv1.CustomResourceDefinition) vendorCRD {
	n := crd.Spec.Names
	out := vendorCRD{Name: crd.Name, Group: crd.Spec.Group, Kind: n.Kind, ListKind: n.ListKind, Plural: n.Plural, Singular: n.Singular, Scope: string(crd.Spec.Scope)}
	for _, v := range crd.Spec.Versions {
		cv := vendorCRDVersion{Name: v.Name, Served: v.Served, Storage: v.Storage, Schema: map[string]string{}}
		cv.StatusSubresource = v.Subresources != nil && v.Subresources.Status != nil
		if v.Schema != nil {
			schemaFacts(v.Schema.OpenAPIV3Schema, "", cv.Schema)
		}
		out.Versions = append(out.Versions, cv)
	}
	return out
}

// schemaFacts writes one line per schema node, descriptions left out:
// "type=object required=a,b list=map keys=name rules=<rule>: <message>".
func schemaFacts(s *apiextensionsv1.JSONSchemaProps, p string, out map[string]string) {
	if s == nil {
		return
	}
	if p == "" {
		p = "."
	}
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	add("type", s.Type)
	if s.Default != nil {
		add("default", string(s.Default.Raw))
	}
	var enum []string
	for _, e := range s.Enum {
		enum = append(enum, string(e.Raw))
	}
	add("enum", strings.Join(enum, ","))
	if s.Minimum != nil {
		add("minimum", fmt.Sprint(*s.Minimum))
	}
	add("required", strings.Join(s.Required, ","))
	if s.XListType != nil {
		add("list", *s.XListType)
	}
	add("keys", strings.Join(s.XListMapKeys, ","))
	for _, r := range s.XValidations {
		add("rule", r.Rule+": "+r.Message)
	}
	out[p] = strings.Join(parts, " ")
	for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
		child := s.Properties[name]
		schemaFacts(&child, strings.TrimSuffix(p, ".")+"."+name, out)
	}
	if s.Items != nil && s.Items.Schema != nil {
		schemaFacts(s.Items.Schema, strings.TrimSuffix(p, ".")+"[]", out)
	}
}

// checkFidelity compares a vendor table with the render of its spec.
func checkFidelity(t *testing.T, v vendorDeployment) {
	t.Helper()
	t.Logf("vendor deployment: %s", v.Source)
	problems, err := fidelityProblems(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// fidelityProblems lists every fact that differs without being listed,
// and every listed difference that is none.
func fidelityProblems(v vendorDeployment) ([]string, error) {
	r, err := Render(Input{Stack: "default", Namespace: "drastack-drivers", Driver: v.Spec})
	if err != nil {
		return nil, err
	}
	got, err := flattenRender(r, v.Spec)
	if err != nil {
		return nil, err
	}
	want := flattenVendor(v)
	keys := map[string]bool{}
	for k := range want {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	var problems []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		w, inVendor := want[k]
		g, inRender := got[k]
		same := inVendor == inRender && w == g
		why, listed := v.Differences[k]
		switch {
		case same && listed:
			problems = append(problems, fmt.Sprintf("listed difference is none (remove it from the table): %s = %q (%s)", k, g, why))
		case !same && !listed:
			problems = append(problems, fmt.Sprintf("%s:\n\tvendor %s\n\trender %s", k, describeFact(w, inVendor), describeFact(g, inRender)))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(v.Differences)) {
		if !keys[k] {
			problems = append(problems, "listed difference names no fact of either side: "+k)
		}
		if strings.TrimSpace(v.Differences[k]) == "" {
			problems = append(problems, "difference has no reason: "+k)
		}
	}
	return problems, nil
}

func describeFact(v string, ok bool) string {
	if !ok {
		return "(absent)"
	}
	return fmt.Sprintf("%q", v)
}

// TestFidelityCatchesDrift: the comparison fails on a changed fact, a fact
// the render lacks, a rule it does not grant and a stale difference, so a
// passing fidelity test means the render matches its table.
func TestFidelityCatchesDrift(t *testing.T) {
	for name, mutate := range map[string]func(*vendorDeployment){
		"a changed env value": func(v *vendorDeployment) { v.Workloads[0].Pod.Containers[0].Env["CDI_ROOT"] = "/etc/cdi" },
		"a mount the render lacks": func(v *vendorDeployment) {
			v.Workloads[0].Pod.Containers[0].Mounts["extra"] = "/extra"
		},
		"a rule the render lacks": func(v *vendorDeployment) {
			v.Identities[0].Cluster = append(v.Identities[0].Cluster, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}})
		},
		"a stale difference": func(v *vendorDeployment) {
			v.Differences["DaemonSet kubelet-plugin: priorityClassName"] = "no longer true"
		},
	} {
		t.Run(name, func(t *testing.T) {
			v := amdDeployment()
			if problems, err := fidelityProblems(v); err != nil || len(problems) > 0 {
				t.Fatalf("the unchanged table does not pass: %v %v", err, problems)
			}
			mutate(&v)
			problems, err := fidelityProblems(v)
			if err != nil {
				t.Fatal(err)
			}
			if len(problems) == 0 {
				t.Errorf("the fidelity check passes on %s", name)
			}
			t.Log(problems)
		})
	}
}
