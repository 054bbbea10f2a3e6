package bundle

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/mail"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8svalidation "k8s.io/apimachinery/pkg/util/validation"
)

// This file is our own check of the rules operator-framework's validators
// apply to a bundle, as operator-framework/api (pkg/validation) and
// operator-sdk document them: the default suite (`operator-sdk bundle
// validate`: the CSV, CRD and bundle validators) and the optional
// operatorframework suite (`--select-optional suite=operatorframework`:
// operatorhub, standard categories and capabilities, good practices,
// deprecated APIs), plus what OLM itself refuses at install time. Neither
// module can be fetched here, so the rules are written down again, each
// with where it comes from. Warnings of those validators are errors here:
// the bundle should pass without any.

// Values of the operatorhub validator.
var (
	standardCategories = map[string]bool{
		"AI/Machine Learning": true, "Application Runtime": true, "Big Data": true,
		"Cloud Provider": true, "Developer Tools": true, "Database": true,
		"Integration & Delivery": true, "Logging & Tracing": true, "Monitoring": true,
		"Networking": true, "OpenShift Optional": true, "Security": true,
		"Storage": true, "Streaming & Messaging": true,
	}
	standardCapabilities = map[string]bool{
		"Basic Install": true, "Seamless Upgrades": true, "Full Lifecycle": true,
		"Deep Insights": true, "Auto Pilot": true,
	}
	iconMediaTypes = map[string]bool{"image/gif": true, "image/jpeg": true, "image/png": true, "image/svg+xml": true}
	// channelPrefixes is OLM's channel naming convention (good practices).
	channelPrefixes = []string{"candidate", "fast", "stable"}
	// removedAPIs are group/versions Kubernetes no longer serves at
	// minKubeVersion 1.34 (the deprecated-APIs checks).
	removedAPIs = map[string]bool{
		"apiextensions.k8s.io/v1beta1": true, "admissionregistration.k8s.io/v1beta1": true,
		"rbac.authorization.k8s.io/v1beta1": true, "policy/v1beta1": true, "batch/v1beta1": true,
		"autoscaling/v2beta1": true, "autoscaling/v2beta2": true, "networking.k8s.io/v1beta1": true,
		"extensions/v1beta1": true, "discovery.k8s.io/v1beta1": true, "storage.k8s.io/v1beta1": true,
		"flowcontrol.apiserver.k8s.io/v1beta1": true, "flowcontrol.apiserver.k8s.io/v1beta2": true,
		"flowcontrol.apiserver.k8s.io/v1beta3": true, "scheduling.k8s.io/v1beta1": true,
		"coordination.k8s.io/v1beta1": true, "node.k8s.io/v1beta1": true,
	}
)

// internalObjectsAnnotation lists CRDs the console hides, which need no
// example.
const internalObjectsAnnotation = "operators.operatorframework.io/internal-objects"

// csvDoc is the part of a ClusterServiceVersion the rules read, in the
// shape of operator-framework/api's v1alpha1 types.
type csvDoc struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		DisplayName    string `json:"displayName"`
		Description    string `json:"description"`
		Version        string `json:"version"`
		Replaces       string `json:"replaces"`
		MinKubeVersion string `json:"minKubeVersion"`
		Maturity       string `json:"maturity"`
		Provider       struct {
			Name string `json:"name"`
		} `json:"provider"`
		Maintainers []struct{ Name, Email string } `json:"maintainers"`
		Links       []struct {
			Name string `json:"name"`
			URL  string `json:"url"`
		} `json:"links"`
		Icon []struct {
			Data      string `json:"base64data"`
			MediaType string `json:"mediatype"`
		} `json:"icon"`
		InstallModes []struct {
			Type      string `json:"type"`
			Supported bool   `json:"supported"`
		} `json:"installModes"`
		CustomResourceDefinitions struct {
			Owned    []crdDescription `json:"owned"`
			Required []crdDescription `json:"required"`
		} `json:"customresourcedefinitions"`
		Install struct {
			Strategy string `json:"strategy"`
			Spec     struct {
				Deployments []struct {
					Name string                `json:"name"`
					Spec appsv1.DeploymentSpec `json:"spec"`
				} `json:"deployments"`
			} `json:"spec"`
		} `json:"install"`
		WebhookDefinitions []struct {
			GenerateName            string                                       `json:"generateName"`
			Type                    string                                       `json:"type"`
			DeploymentName          string                                       `json:"deploymentName"`
			ContainerPort           int32                                        `json:"containerPort"`
			Rules                   []admissionregistrationv1.RuleWithOperations `json:"rules"`
			SideEffects             *string                                      `json:"sideEffects"`
			AdmissionReviewVersions []string                                     `json:"admissionReviewVersions"`
			WebhookPath             string                                       `json:"webhookPath"`
		} `json:"webhookdefinitions"`
	} `json:"spec"`
}

type crdDescription struct {
	Name, Version, Kind, DisplayName, Description string
}

// bundleUnderTest is a bundle as the validators see it: the CSV, the other
// manifests, and the channels of the metadata.
type bundleUnderTest struct {
	csv            csvDoc
	objects        []*unstructured.Unstructured
	channels       []string
	defaultChannel string
}

// operatorFrameworkProblems returns every rule the bundle breaks.
func operatorFrameworkProblems(b bundleUnderTest) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	csv := b.csv
	annotations := csv.Metadata.Annotations

	// CSV validator: required fields (struct fields without omitempty),
	// the name, install modes.
	if csv.APIVersion != "operators.coreos.com/v1alpha1" || csv.Kind != "ClusterServiceVersion" {
		bad("CSV apiVersion/kind = %s/%s", csv.APIVersion, csv.Kind)
	}
	if csv.Spec.DisplayName == "" {
		bad("spec.displayName is required")
	}
	if csv.Spec.Install.Strategy != "deployment" || len(csv.Spec.Install.Spec.Deployments) == 0 {
		bad("spec.install needs strategy deployment and at least one deployment")
	}
	for _, field := range []struct{ what, name string }{{"metadata.name", csv.Metadata.Name}, {"spec.replaces", csv.Spec.Replaces}} {
		if field.name == "" && field.what == "spec.replaces" {
			continue
		}
		if errs := k8svalidation.IsDNS1123Subdomain(field.name); len(errs) > 0 {
			bad("%s %q: %v", field.what, field.name, errs)
		}
		// operatorhub: <operator-name>.v<semver>.
		name, version, ok := strings.Cut(field.name, ".v")
		if _, err := semver.Parse(version); !ok || name == "" || err != nil {
			bad("%s %q is not <operator-name>.v<semver>", field.what, field.name)
		}
	}
	modes, supported := map[string]bool{}, false
	for _, m := range csv.Spec.InstallModes {
		if modes[m.Type] {
			bad("install mode %s listed twice", m.Type)
		}
		modes[m.Type] = true
		supported = supported || m.Supported
	}
	if !supported {
		bad("no install mode is supported")
	}

	// CSV validator: alm-examples are owned APIs, and every owned API has
	// one (a warning upstream, "provided API should have an example
	// annotation", which operator-framework/api raises for internal
	// objects too).
	owned := map[schema.GroupVersionKind]string{} // -> CRD name
	for _, o := range csv.Spec.CustomResourceDefinitions.Owned {
		plural, group, ok := strings.Cut(o.Name, ".")
		if !ok || plural == "" {
			bad("owned CRD name %q is not plural.group", o.Name)
		}
		owned[schema.GroupVersionKind{Group: group, Version: o.Version, Kind: o.Kind}] = o.Name
	}
	var examples []unstructured.Unstructured
	if err := json.Unmarshal([]byte(annotations["alm-examples"]), &examples); err != nil {
		bad("alm-examples: %v", err)
	}
	exampled := map[schema.GroupVersionKind]bool{}
	for _, ex := range examples {
		gvk := ex.GroupVersionKind()
		exampled[gvk] = true
		if _, ok := owned[gvk]; !ok {
			bad("example %s must be of a provided API", gvk)
		}
	}
	internal := map[string]bool{}
	if raw, ok := annotations[internalObjectsAnnotation]; ok {
		var names []string
		if err := json.Unmarshal([]byte(raw), &names); err != nil {
			bad("%s is not a JSON list of CRD names: %v", internalObjectsAnnotation, err)
		}
		for _, n := range names {
			internal[n] = true
		}
	}
	ownedNames := map[string]bool{}
	for gvk, name := range owned {
		ownedNames[name] = true
		if !exampled[gvk] {
			bad("provided API %s has no alm-example (operator-framework warns even for the internal objects of %s)", gvk, internalObjectsAnnotation)
		}
	}
	for n := range internal {
		if !ownedNames[n] {
			bad("%s names %s, which the CSV does not own", internalObjectsAnnotation, n)
		}
	}

	// Bundle validator: owned CRDs and bundled CRDs are the same set, no
	// duplicates, no ServiceAccount file for a deployment's account.
	bundled := map[schema.GroupVersionKind]bool{}
	accounts := map[string]bool{}
	for _, d := range csv.Spec.Install.Spec.Deployments {
		accounts[d.Spec.Template.Spec.ServiceAccountName] = true
	}
	for _, obj := range b.objects {
		if removedAPIs[obj.GetAPIVersion()] {
			bad("%s %s uses %s, which Kubernetes no longer serves", obj.GetKind(), obj.GetName(), obj.GetAPIVersion())
		}
		switch obj.GetKind() {
		case "ServiceAccount":
			if accounts[obj.GetName()] {
				bad("ServiceAccount %s in the bundle has the name of a deployment's account in the CSV", obj.GetName())
			}
		case "CustomResourceDefinition":
			info, err := readCRD(obj)
			if err != nil {
				bad("%v", err)
				continue
			}
			storage := 0
			versions, _, _ := unstructured.NestedSlice(obj.Object, "spec", "versions")
			for _, v := range versions {
				if s, _, _ := unstructured.NestedBool(v.(map[string]interface{}), "storage"); s {
					storage++
				}
			}
			if storage != 1 {
				bad("CRD %s has %d storage versions, want 1", info.name, storage)
			}
			for _, v := range info.versions {
				gvk := schema.GroupVersionKind{Group: info.group, Version: v, Kind: info.kind}
				if bundled[gvk] {
					bad("CRD %s in the bundle twice", gvk)
				}
				bundled[gvk] = true
				if _, ok := owned[gvk]; !ok {
					bad("CRD %s is in the bundle but not defined in the CSV", gvk)
				}
			}
		}
	}
	for gvk := range owned {
		if !bundled[gvk] {
			bad("owned CRD %s is not in the bundle", gvk)
		}
	}

	// operatorhub (and the standard categories and capabilities)
	// validators.
	if csv.Spec.Provider.Name == "" {
		bad("spec.provider.name is required")
	}
	for _, m := range csv.Spec.Maintainers {
		if m.Name == "" || m.Email == "" {
			bad("maintainers need a name and an email")
		}
		if _, err := mail.ParseAddress(m.Email); err != nil {
			bad("maintainer email %q: %v", m.Email, err)
		}
	}
	for _, l := range csv.Spec.Links {
		if l.Name == "" || l.URL == "" {
			bad("links need a name and a url")
		}
		if _, err := url.ParseRequestURI(l.URL); err != nil {
			bad("link %q: %v", l.URL, err)
		}
	}
	if c, ok := annotations["capabilities"]; !ok || !standardCapabilities[c] {
		bad("capabilities %q is not a standard capability level", c)
	}
	if c, ok := annotations["categories"]; ok {
		for _, cat := range strings.Split(c, ",") {
			if !standardCategories[strings.TrimSpace(cat)] {
				bad("category %q is not a standard category", cat)
			}
		}
	} else {
		bad("no categories")
	}
	if v, err := semver.Parse(csv.Spec.Version); err != nil || v.Equals(semver.Version{}) {
		bad("spec.version %q must be set", csv.Spec.Version)
	}
	if len(csv.Spec.Icon) != 1 {
		bad("spec.icon has %d elements, want 1", len(csv.Spec.Icon))
	}
	for _, icon := range csv.Spec.Icon {
		if !iconMediaTypes[icon.MediaType] {
			bad("icon mediatype %q", icon.MediaType)
		}
		if _, err := base64.StdEncoding.DecodeString(icon.Data); err != nil || icon.Data == "" {
			bad("icon base64data: %v", err)
		}
	}
	if _, err := semver.ParseTolerant(csv.Spec.MinKubeVersion); err != nil {
		bad("spec.minKubeVersion %q: %v", csv.Spec.MinKubeVersion, err)
	}
	if annotations["description"] == "" || csv.Spec.Description == "" {
		bad("the description annotation and spec.description are expected")
	}

	// good practices: resource requests, channel names, CRD descriptions.
	for _, d := range csv.Spec.Install.Spec.Deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
				bad("container %s of %s has no CPU or memory request", c.Name, d.Name)
			}
		}
	}
	for _, ch := range append([]string{b.defaultChannel}, b.channels...) {
		ok := false
		for _, p := range channelPrefixes {
			ok = ok || strings.HasPrefix(ch, p)
		}
		if !ok {
			bad("channel %q does not follow the naming convention (%v)", ch, channelPrefixes)
		}
	}
	for _, list := range [][]crdDescription{csv.Spec.CustomResourceDefinitions.Owned, csv.Spec.CustomResourceDefinitions.Required} {
		for _, d := range list {
			if d.Description == "" {
				bad("CRD %s has no description", d.Name)
			}
		}
	}

	// OLM at install time: webhook definitions that it refuses.
	deployments := map[string]bool{}
	for _, d := range csv.Spec.Install.Spec.Deployments {
		deployments[d.Name] = true
	}
	for _, w := range csv.Spec.WebhookDefinitions {
		if w.Type != "MutatingAdmissionWebhook" && w.Type != "ValidatingAdmissionWebhook" {
			bad("webhook %s: type %q", w.GenerateName, w.Type)
		}
		if !deployments[w.DeploymentName] {
			bad("webhook %s: deploymentName %q is not a deployment of the CSV", w.GenerateName, w.DeploymentName)
		}
		if w.SideEffects == nil || len(w.AdmissionReviewVersions) == 0 || w.ContainerPort < 1 || w.ContainerPort > 65535 {
			bad("webhook %s: sideEffects, admissionReviewVersions and a containerPort are required", w.GenerateName)
		}
		for _, r := range w.Rules {
			for _, g := range r.APIGroups {
				if g == "*" || g == "operators.coreos.com" || g == "admissionregistration.k8s.io" {
					bad("webhook %s: OLM refuses rules on API group %q", w.GenerateName, g)
				}
			}
		}
	}
	return problems
}

// TestBundlePassesOperatorFrameworkRules checks the generated and the
// committed bundle against every rule above.
func TestBundlePassesOperatorFrameworkRules(t *testing.T) {
	toCSV := func(t *testing.T, u *unstructured.Unstructured) csvDoc {
		var csv csvDoc
		typed(t, u.Object, &csv)
		return csv
	}
	t.Run("generated from config/manifests", func(t *testing.T) {
		opts, err := ReadOptions(repoRoot)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := Build(filepath.Join(repoRoot, "config", "manifests"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := Generate(objs, opts)
		if err != nil {
			t.Fatal(err)
		}
		under := bundleUnderTest{csv: toCSV(t, b.CSV), objects: append(append([]*unstructured.Unstructured{}, b.CRDs...), b.Others...),
			channels: opts.Channels, defaultChannel: opts.defaultChannel()}
		for _, p := range operatorFrameworkProblems(under) {
			t.Error(p)
		}
	})
	t.Run("committed under bundle/", func(t *testing.T) {
		c := loadCommitted(t)
		var objs []*unstructured.Unstructured
		entries, err := os.ReadDir(filepath.Join(repoRoot, "bundle", "manifests"))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			for _, o := range readObjects(t, filepath.Join(repoRoot, "bundle", "manifests", e.Name())) {
				if o.GetKind() != "ClusterServiceVersion" {
					objs = append(objs, o)
				}
			}
		}
		under := bundleUnderTest{csv: toCSV(t, c.csv), objects: objs,
			channels: strings.Split(c.annotations[keyChannels], ","), defaultChannel: c.annotations[keyDefaultChannel]}
		for _, p := range operatorFrameworkProblems(under) {
			t.Error(p)
		}
	})
	t.Run("the icon is config/manifests/bases/drastack.svg", func(t *testing.T) {
		svg, err := os.ReadFile(filepath.Join(repoRoot, "config", "manifests", "bases", "drastack.svg"))
		if err != nil {
			t.Fatal(err)
		}
		csv := toCSV(t, loadCommitted(t).csv)
		if len(csv.Spec.Icon) != 1 {
			t.Fatalf("%d icons", len(csv.Spec.Icon))
		}
		got, _ := base64.StdEncoding.DecodeString(csv.Spec.Icon[0].Data)
		if !bytes.Equal(got, svg) {
			t.Errorf("spec.icon is not drastack.svg: run base64 -w0 config/manifests/bases/drastack.svg into the base CSV")
		}
	})
}

// TestOperatorFrameworkRulesCatchBreakage: each rule fires on a bundle
// that breaks it, so a passing bundle means something.
func TestOperatorFrameworkRulesCatchBreakage(t *testing.T) {
	opts, err := ReadOptions(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Build(filepath.Join(repoRoot, "config", "manifests"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Generate(objs, opts)
	if err != nil {
		t.Fatal(err)
	}
	base := func(t *testing.T) bundleUnderTest {
		var csv csvDoc
		typed(t, b.CSV.DeepCopy().Object, &csv)
		return bundleUnderTest{csv: csv, objects: append(append([]*unstructured.Unstructured{}, b.CRDs...), b.Others...),
			channels: opts.Channels, defaultChannel: opts.defaultChannel()}
	}
	for _, tc := range []struct {
		name   string
		breaks func(*bundleUnderTest)
		want   string
	}{
		{"a category outside the standard list", func(b *bundleUnderTest) {
			b.csv.Metadata.Annotations["categories"] = "AI/Machine Learning, Drivers and plugins"
		}, "not a standard category"},
		{"no icon", func(b *bundleUnderTest) { b.csv.Spec.Icon = nil }, "spec.icon has 0"},
		{"an owned kind without example, even an internal one", func(b *bundleUnderTest) {
			var kept []any
			if err := json.Unmarshal([]byte(b.csv.Metadata.Annotations["alm-examples"]), &kept); err != nil {
				panic(err)
			}
			b.csv.Metadata.Annotations["alm-examples"] = mustJSON(kept[:1])
		}, "has no alm-example"},
		{"an unknown capability level", func(b *bundleUnderTest) { b.csv.Metadata.Annotations["capabilities"] = "Basic" }, "standard capability"},
		{"a channel off the convention", func(b *bundleUnderTest) { b.channels = []string{"alpha"} }, "naming convention"},
		{"a maintainer without email", func(b *bundleUnderTest) { b.csv.Spec.Maintainers[0].Email = "" }, "name and an email"},
		{"no minKubeVersion", func(b *bundleUnderTest) { b.csv.Spec.MinKubeVersion = "" }, "minKubeVersion"},
		{"a container without requests", func(b *bundleUnderTest) {
			b.csv.Spec.Install.Spec.Deployments[0].Spec.Template.Spec.Containers[0].Resources.Requests = nil
		}, "no CPU or memory request"},
		{"a CRD the CSV does not own", func(b *bundleUnderTest) {
			b.csv.Spec.CustomResourceDefinitions.Owned = b.csv.Spec.CustomResourceDefinitions.Owned[:1]
		}, "not defined in the CSV"},
		{"a webhook on OLM's own API group", func(b *bundleUnderTest) {
			b.csv.Spec.WebhookDefinitions[0].Rules[0].APIGroups = []string{"operators.coreos.com"}
		}, "OLM refuses rules"},
		{"a CSV name without .v<semver>", func(b *bundleUnderTest) { b.csv.Metadata.Name = "drastack-0.1.0" }, "not <operator-name>.v<semver>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			under := base(t)
			tc.breaks(&under)
			problems := operatorFrameworkProblems(under)
			if !regexp.MustCompile(regexp.QuoteMeta(tc.want)).MatchString(strings.Join(problems, "\n")) {
				t.Errorf("problems %q do not mention %q", problems, tc.want)
			}
		})
	}
}

// mustJSON encodes a value the test built itself.
func mustJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(data)
}
