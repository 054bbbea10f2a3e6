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
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
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

// TestClaimsSpecValidation evaluates the CEL rules of spec.claims on
// examples, as the API server would on create.
func TestClaimsSpecValidation(t *testing.T) {
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
	claimsProps := props.Properties["spec"].Properties["claims"]
	structural, err := schema.NewStructural(&claimsProps)
	if err != nil {
		t.Fatal(err)
	}
	validator := cel.NewValidator(structural, false, celconfig.PerCallLimit)
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
