package bundle

import (
	"reflect"
	"strings"
	"testing"
)

// fxMutatingWebhook is what controller-gen writes for a
// +kubebuilder:webhook marker.
const fxMutatingWebhook = `
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service:
      name: webhook-service
      namespace: system
      path: /mutate-pods
  failurePolicy: Ignore
  matchPolicy: Equivalent
  name: gate.example.io
  reinvocationPolicy: Never
  objectSelector:
    matchLabels:
      gate: "on"
  rules:
  - apiGroups: [""]
    apiVersions: [v1]
    operations: [CREATE]
    resources: [pods]
  sideEffects: None
  timeoutSeconds: 5
`

const fxValidatingWebhook = `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service:
      name: webhook-service
      namespace: system
      path: /validate-widget
  failurePolicy: Fail
  name: vwidget.example.io
  rules:
  - apiGroups: [example.io]
    apiVersions: [v1]
    operations: [CREATE, UPDATE]
    resources: [widgets]
  sideEffects: None
`

// fxWebhookService fronts the manager's webhook server.
const fxWebhookService = `
apiVersion: v1
kind: Service
metadata:
  name: webhook-service
  namespace: widget-system
spec:
  selector:
    control-plane: manager
  ports:
  - port: 8443
    targetPort: webhook-server
`

const fxOtherDeployment = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: widget-helper
  namespace: widget-system
spec:
  selector:
    matchLabels:
      app: helper
  template:
    metadata:
      labels:
        app: helper
    spec:
      containers:
      - name: helper
        image: example.io/helper:v1
`

func TestWebhookDefinitions(t *testing.T) {
	mutating := map[string]interface{}{
		"generateName":            "gate.example.io",
		"type":                    "MutatingAdmissionWebhook",
		"deploymentName":          "widget-manager",
		"containerPort":           int64(443),
		"targetPort":              int64(9443),
		"webhookPath":             "/mutate-pods",
		"admissionReviewVersions": []interface{}{"v1"},
		"failurePolicy":           "Ignore",
		"matchPolicy":             "Equivalent",
		"reinvocationPolicy":      "Never",
		"objectSelector":          map[string]interface{}{"matchLabels": map[string]interface{}{"gate": "on"}},
		"rules": []interface{}{map[string]interface{}{
			"apiGroups": []interface{}{""}, "apiVersions": []interface{}{"v1"},
			"operations": []interface{}{"CREATE"}, "resources": []interface{}{"pods"},
		}},
		"sideEffects":    "None",
		"timeoutSeconds": int64(5),
	}
	withService := func(m map[string]interface{}) map[string]interface{} {
		out := runtimeCopy(m)
		out["containerPort"] = int64(8443)
		out["targetPort"] = "webhook-server"
		return out
	}
	validating := map[string]interface{}{
		"generateName":            "vwidget.example.io",
		"type":                    "ValidatingAdmissionWebhook",
		"deploymentName":          "widget-manager",
		"containerPort":           int64(443),
		"targetPort":              int64(9443),
		"webhookPath":             "/validate-widget",
		"admissionReviewVersions": []interface{}{"v1"},
		"failurePolicy":           "Fail",
		"rules": []interface{}{map[string]interface{}{
			"apiGroups": []interface{}{"example.io"}, "apiVersions": []interface{}{"v1"},
			"operations": []interface{}{"CREATE", "UPDATE"}, "resources": []interface{}{"widgets"},
		}},
		"sideEffects": "None",
	}
	for _, tc := range []struct {
		name        string
		docs        []string
		want        []interface{}
		serviceFile bool // the webhook Service stays a bundle file
	}{
		{"no webhook configuration: no definitions", fxAll, nil, false},
		{"without its Service: the only Deployment, OLM's default ports", with(fxMutatingWebhook),
			[]interface{}{mutating}, false},
		{"with its Service: the selected Deployment and the Service's ports; the Service is OLM's to make",
			with(fxMutatingWebhook, fxWebhookService), []interface{}{withService(mutating)}, false},
		{"validating and mutating, sorted by configuration name", with(fxValidatingWebhook, fxMutatingWebhook),
			[]interface{}{mutating, validating}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Generate(decodeAll(t, stream(tc.docs...)), fxOptions())
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			got, _ := nested(t, b.CSV, "spec", "webhookdefinitions").([]interface{})
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("webhookdefinitions =\n%#v\nwant\n%#v", got, tc.want)
			}
			for _, o := range b.Others {
				if o.GetKind() == "MutatingWebhookConfiguration" || o.GetKind() == "ValidatingWebhookConfiguration" {
					t.Errorf("%s %s written as a bundle file", o.GetKind(), o.GetName())
				}
				if o.GetName() == "webhook-service" && !tc.serviceFile {
					t.Errorf("the webhook Service is written as a bundle file; OLM creates its own")
				}
			}
			if len(find(b.Others, "Service", "widget-metrics")) != 1 {
				t.Errorf("the metrics Service must stay a bundle file")
			}
		})
	}
}

func TestWebhookDefinitionsReject(t *testing.T) {
	for _, tc := range []struct {
		name    string
		docs    []string
		wantErr string
	}{
		{"URL client config", with(strings.Replace(fxMutatingWebhook,
			"    service:\n      name: webhook-service\n      namespace: system\n      path: /mutate-pods\n",
			"    url: https://127.0.0.1:9443/mutate-pods\n", 1)), "URL clientConfig cannot be carried"},
		{"no path", with(strings.Replace(fxMutatingWebhook, "      path: /mutate-pods\n", "", 1)), "clientConfig.service.path is missing"},
		{"two Deployments and no Service to tell them apart", with(fxMutatingWebhook, fxOtherDeployment), "add the Service"},
		{"Service selecting no Deployment", with(fxMutatingWebhook, strings.Replace(fxWebhookService, "control-plane: manager", "control-plane: nobody", 1)),
			"selects 0 Deployments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Generate(decodeAll(t, stream(tc.docs...)), fxOptions())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}
