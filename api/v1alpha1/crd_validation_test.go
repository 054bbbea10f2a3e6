package v1alpha1_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"
)

// loadDRAStackCRD reads the generated DRAStack CRD and its internal form.
func loadDRAStackCRD(t *testing.T) *apiextensions.CustomResourceDefinition {
	t.Helper()
	raw, err := os.ReadFile("../../config/crd/bases/drastack.io_drastacks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v1crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &v1crd); err != nil {
		t.Fatal(err)
	}
	var crd apiextensions.CustomResourceDefinition
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&v1crd, &crd, nil); err != nil {
		t.Fatal(err)
	}
	return &crd
}

// specFieldSchema is the structural schema of spec.<field> of the
// DRAStack CRD, with the validator of its CEL rules.
func specFieldSchema(t *testing.T, field string) (*schema.Structural, *cel.Validator) {
	t.Helper()
	crd := loadDRAStackCRD(t)
	var props *apiextensions.JSONSchemaProps
	for _, v := range crd.Spec.Versions {
		if v.Name == "v1alpha1" && v.Schema != nil {
			props = v.Schema.OpenAPIV3Schema
		}
	}
	if props == nil {
		props = crd.Spec.Validation.OpenAPIV3Schema
	}
	fieldProps := props.Properties["spec"].Properties[field]
	structural, err := schema.NewStructural(&fieldProps)
	if err != nil {
		t.Fatal(err)
	}
	return structural, cel.NewValidator(structural, false, celconfig.PerCallLimit)
}

// TestDurationsDecode: every duration of the spec is refused at admission
// unless it parses. A DRAStack the API server stores with a duration Go
// cannot decode stops the operator's informer from listing any DRAStack
// (found by the spec fuzz test with incompleteGracePeriod: bogus).
func TestDurationsDecode(t *testing.T) {
	for _, tc := range []struct{ field, key string }{
		{"claims", "placementTimeout"}, {"claims", "allocationTimeout"}, {"claims", "gangTimeout"},
		{"pools", "resyncPeriod"}, {"pools", "incompleteGracePeriod"},
	} {
		t.Run(tc.field+"."+tc.key, func(t *testing.T) {
			structural, validator := specFieldSchema(t, tc.field)
			for _, v := range []string{"bogus", "-1s"} {
				errs, _ := validator.Validate(context.Background(), field.NewPath("spec", tc.field), structural, map[string]any{tc.key: v}, nil, celconfig.RuntimeCELCostBudget)
				if len(errs) == 0 {
					t.Errorf("spec.%s.%s: %q accepted", tc.field, tc.key, v)
				}
			}
			if errs, _ := validator.Validate(context.Background(), field.NewPath("spec", tc.field), structural, map[string]any{tc.key: "30s"}, nil, celconfig.RuntimeCELCostBudget); len(errs) != 0 {
				t.Errorf("spec.%s.%s: 30s refused: %v", tc.field, tc.key, errs.ToAggregate())
			}
		})
	}
}

// TestClaimsSpecValidation evaluates the CEL rules of spec.claims on
// examples, as the API server would on create.
func TestClaimsSpecValidation(t *testing.T) {
	structural, validator := specFieldSchema(t, "claims")
	tests := []struct {
		name    string
		claims  string
		wantErr string // "" means valid
	}{
		{name: "empty", claims: `{}`},
		{name: "the API sketch's example", claims: `
central:
- driver: gpu.example.com
  pools: [node-7, node-8]
  classes: [gpu-topology]
- driver: gpu.example.com
  nodeSelector: {matchLabels: {example.com/topology-jobs: "true"}}
  classes: [gpu-topology]
- driver: tpu.example.com
  classes: [tpu.example.com]
placementTimeout: 60s
allocationTimeout: 10s`},
		{name: "pools and nodeSelector together", claims: `
central:
- driver: gpu.example.com
  pools: [node-7]
  nodeSelector: {matchLabels: {a: b}}`, wantErr: "pools and nodeSelector are mutually exclusive"},
		{name: "placementTimeout too short", claims: `placementTimeout: 1s`, wantErr: "placementTimeout must be at least 5s"},
		{name: "placementTimeout of minutes", claims: `placementTimeout: 5m`},
		{name: "allocationTimeout too short", claims: `allocationTimeout: 10ms`, wantErr: "allocationTimeout must be between 100ms and 5m"},
		{name: "allocationTimeout too long", claims: `allocationTimeout: 1h`, wantErr: "allocationTimeout must be between 100ms and 5m"},
		{name: "gangTimeout too short", claims: `gangTimeout: 500ms`, wantErr: "gangTimeout must be at least 1s"},
		{name: "gangTimeout of seconds", claims: `gangTimeout: 30s`},
		{name: "placementPolicy FirstFit", claims: `placementPolicy: FirstFit`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(tc.claims), &obj); err != nil {
				t.Fatal(err)
			}
			errs, _ := validator.Validate(context.Background(), field.NewPath("spec", "claims"), structural, obj, nil, celconfig.RuntimeCELCostBudget)
			got := errs.ToAggregate()
			switch {
			case tc.wantErr == "" && got != nil:
				t.Errorf("unexpected error: %v", got)
			case tc.wantErr != "" && (got == nil || !strings.Contains(got.Error(), tc.wantErr)):
				t.Errorf("error = %v, want %q", got, tc.wantErr)
			}
		})
	}
}

// TestDriverSpecValidation evaluates the CEL rules of a spec.drivers entry
// on examples: the nvidia options belong to the nvidia-gpu profile only.
func TestDriverSpecValidation(t *testing.T) {
	crd := loadDRAStackCRD(t)
	var props *apiextensions.JSONSchemaProps
	for _, v := range crd.Spec.Versions {
		if v.Name == "v1alpha1" && v.Schema != nil {
			props = v.Schema.OpenAPIV3Schema
		}
	}
	if props == nil {
		props = crd.Spec.Validation.OpenAPIV3Schema
	}
	driverProps := *props.Properties["spec"].Properties["drivers"].Items.Schema
	structural, err := schema.NewStructural(&driverProps)
	if err != nil {
		t.Fatal(err)
	}
	validator := cel.NewValidator(structural, false, celconfig.PerCallLimit)
	for _, tc := range []struct {
		name, driver, wantErr string
	}{
		{name: "nvidia-gpu with options", driver: `{name: gpu.nvidia.com, profile: nvidia-gpu, nvidia: {driverRoot: /run/nvidia/driver, plugins: [ComputeDomains]}}`},
		{name: "nvidia options on amd-gpu", driver: `{name: gpu.amd.com, profile: amd-gpu, nvidia: {driverRoot: /run/nvidia/driver}}`, wantErr: "nvidia configures the nvidia-gpu profile only"},
		{name: "amd-gpu without options", driver: `{name: gpu.amd.com, profile: amd-gpu}`},
		{name: "custom without image", driver: `{name: fpga.acme.io, profile: custom}`, wantErr: "image is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(tc.driver), &obj); err != nil {
				t.Fatal(err)
			}
			errs, _ := validator.Validate(context.Background(), field.NewPath("spec", "drivers").Index(0), structural, obj, nil, celconfig.RuntimeCELCostBudget)
			got := errs.ToAggregate()
			switch {
			case tc.wantErr == "" && got != nil:
				t.Errorf("unexpected error: %v", got)
			case tc.wantErr != "" && (got == nil || !strings.Contains(got.Error(), tc.wantErr)):
				t.Errorf("error = %v, want %q", got, tc.wantErr)
			}
		})
	}
}

// TestPlacementPolicyEnum checks the schema of spec.claims.placementPolicy:
// Pack by default, Pack and FirstFit accepted, anything else refused with
// the allowed values named.
func TestPlacementPolicyEnum(t *testing.T) {
	crd := loadDRAStackCRD(t)
	var props *apiextensions.JSONSchemaProps
	for _, v := range crd.Spec.Versions {
		if v.Name == "v1alpha1" && v.Schema != nil {
			props = v.Schema.OpenAPIV3Schema
		}
	}
	if props == nil {
		props = crd.Spec.Validation.OpenAPIV3Schema
	}
	policy := props.Properties["spec"].Properties["claims"].Properties["placementPolicy"]
	if policy.Default == nil || *policy.Default != "Pack" {
		t.Errorf("placementPolicy default = %v, want Pack", policy.Default)
	}
	validator, _, err := validation.NewSchemaValidator(&policy)
	if err != nil {
		t.Fatal(err)
	}
	for value, ok := range map[string]bool{"Pack": true, "FirstFit": true, "BestFit": false, "pack": false} {
		errs := validation.ValidateCustomResource(field.NewPath("spec", "claims", "placementPolicy"), value, validator)
		if ok != (len(errs) == 0) {
			t.Errorf("placementPolicy %q: errors %v, want valid=%v", value, errs, ok)
		}
		if !ok && (len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), "FirstFit")) {
			t.Errorf("placementPolicy %q: the error should name the allowed values: %v", value, errs)
		}
	}
}

// TestSpecValidation evaluates the cross-entry CEL rules of the whole spec
// (issue 22): multi-host entries that would publish the same hosts twice,
// a driver named like a multi-host driver, a namespace of Kubernetes.
func TestSpecValidation(t *testing.T) {
	crd := loadDRAStackCRD(t)
	var props *apiextensions.JSONSchemaProps
	for _, v := range crd.Spec.Versions {
		if v.Name == "v1alpha1" && v.Schema != nil {
			props = v.Schema.OpenAPIV3Schema
		}
	}
	if props == nil {
		props = crd.Spec.Validation.OpenAPIV3Schema
	}
	specProps := props.Properties["spec"]
	structural, err := schema.NewStructural(&specProps)
	if err != nil {
		t.Fatal(err)
	}
	validator := cel.NewValidator(structural, false, celconfig.PerCallLimit)
	tpu := func(name, driver, extra string) string {
		return `{name: ` + name + `, driver: ` + driver + `, domainLabel: d, coordinatesLabel: c, hostGrid: [2, 2], chipsPerHost: [2, 2], partitions: ["2x2"]` + extra + `}`
	}
	sel := func(v string) string { return `, nodeSelector: {matchLabels: {tpu: "` + v + `"}}` }
	for _, tc := range []struct {
		name, spec, wantErr string
	}{
		{name: "the sample", spec: `{namespace: drastack-drivers, drivers: [{name: gpu.example.com, profile: example}], multiHost: [` + tpu("tpu", "tpu.example.com", sel("true")) + `]}`},
		{name: "two entries over the same hosts", spec: `{multiHost: [` + tpu("tpu", "tpu.example.com", sel("true")) + `, ` + tpu("tpu2", "tpu.example.com", sel("true")) + `]}`,
			wantErr: "would publish every chip of their hosts twice"},
		{name: "two entries without nodeSelector", spec: `{multiHost: [` + tpu("tpu", "tpu.example.com", "") + `, ` + tpu("tpu2", "tpu.example.com", "") + `]}`,
			wantErr: "would publish every chip of their hosts twice"},
		{name: "one with and one without nodeSelector: the nodes decide", spec: `{multiHost: [` + tpu("tpu", "tpu.example.com", sel("true")) + `, ` + tpu("tpu2", "tpu.example.com", "") + `]}`},
		{name: "different selectors", spec: `{multiHost: [` + tpu("tpu", "tpu.example.com", sel("a")) + `, ` + tpu("tpu2", "tpu.example.com", sel("b")) + `]}`},
		{name: "the same hosts under two drivers", spec: `{multiHost: [` + tpu("tpu", "tpu.example.com", sel("true")) + `, ` + tpu("nvl", "nvl.example.com", sel("true")) + `]}`},
		{name: "a driver named like a multi-host driver", spec: `{drivers: [{name: tpu.example.com, profile: example}], multiHost: [` + tpu("tpu", "tpu.example.com", "") + `]}`,
			wantErr: "must not be named like the driver of a spec.multiHost entry"},
		{name: "kube-system", spec: `{namespace: kube-system}`, wantErr: "not in one of Kubernetes' own"},
		{name: "default", spec: `{namespace: default}`, wantErr: "not in one of Kubernetes' own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(tc.spec), &obj); err != nil {
				t.Fatal(err)
			}
			errs, _ := validator.Validate(context.Background(), field.NewPath("spec"), structural, obj, nil, celconfig.RuntimeCELCostBudget)
			got := errs.ToAggregate()
			switch {
			case tc.wantErr == "" && got != nil:
				t.Errorf("unexpected error: %v", got)
			case tc.wantErr != "" && (got == nil || !strings.Contains(got.Error(), tc.wantErr)):
				t.Errorf("error = %v, want %q", got, tc.wantErr)
			}
		})
	}
}

// staticEstimatedCostLimit is the API server's per-rule limit on the
// estimated cost of a CRD's CEL rule (apiextensions validation): a rule
// above it makes the CRD itself be refused.
const staticEstimatedCostLimit = 10_000_000

// TestCELCostWithinLimits compiles every CEL rule of the DRAStack schema
// as the API server does and checks its estimated cost, times how often it
// can run (the maxItems and maxProperties above it), against the limit:
// a cross-entry rule over lists is quadratic, and only the bounds keep it
// acceptable.
func TestCELCostWithinLimits(t *testing.T) {
	crd := loadDRAStackCRD(t)
	var props *apiextensions.JSONSchemaProps
	for _, v := range crd.Spec.Versions {
		if v.Name == "v1alpha1" && v.Schema != nil {
			props = v.Schema.OpenAPIV3Schema
		}
	}
	if props == nil {
		props = crd.Spec.Validation.OpenAPIV3Schema
	}
	root, err := schema.NewStructural(props)
	if err != nil {
		t.Fatal(err)
	}
	rules := 0
	var walk func(s *schema.Structural, decl *apiservercel.DeclType, path string, card uint64)
	walk = func(s *schema.Structural, decl *apiservercel.DeclType, path string, card uint64) {
		if s == nil || decl == nil {
			return
		}
		if len(s.XValidations) > 0 {
			results, err := cel.Compile(s, decl, celconfig.PerCallLimit,
				environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()), cel.NewExpressionsEnvLoader())
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			for i, r := range results {
				rules++
				if r.Error != nil {
					t.Errorf("%s rule %d: %v", path, i, r.Error)
					continue
				}
				if cost := r.MaxCost * card; card != 0 && (cost/card != r.MaxCost || cost > staticEstimatedCostLimit) {
					t.Errorf("%s rule %q: estimated cost %d x %d runs exceeds %d", path, s.XValidations[i].Rule, r.MaxCost, card, staticEstimatedCostLimit)
				}
			}
		}
		for name, p := range s.Properties {
			if f, ok := decl.Fields[name]; ok {
				walk(&p, f.Type, path+"."+name, card)
			}
		}
		if s.Items != nil {
			n := uint64(1 << 20)
			if s.ValueValidation != nil && s.ValueValidation.MaxItems != nil {
				n = uint64(*s.ValueValidation.MaxItems)
			}
			walk(s.Items, decl.ElemType, path+"[]", card*n)
		}
		if s.AdditionalProperties != nil && s.AdditionalProperties.Structural != nil {
			n := uint64(1 << 20)
			if s.ValueValidation != nil && s.ValueValidation.MaxProperties != nil {
				n = uint64(*s.ValueValidation.MaxProperties)
			}
			walk(s.AdditionalProperties.Structural, decl.ElemType, path+"{}", card*n)
		}
	}
	walk(root, model.SchemaDeclType(root, true), "", 1)
	if rules < 10 {
		t.Fatalf("only %d rules found; the walk is broken", rules)
	}
}
