package bundle

import "strings"

// Fixture documents for the table tests: a small operator "widget" laid
// out the way kustomize renders config/manifests.
const (
	fxCSV = `
apiVersion: operators.coreos.com/v1alpha1
kind: ClusterServiceVersion
metadata:
  name: widget.v0.0.0
  namespace: placeholder
  annotations:
    alm-examples: '[]'
    createdAt: "2020-01-01T00:00:00Z"
    containerImage: example.io/widget:v0.0.0
    operators.operatorframework.io/builder: test-builder
    operators.operatorframework.io/project_layout: go.kubebuilder.io/v4
spec:
  displayName: Widget
  customresourcedefinitions:
    owned:
    - name: widgets.example.io
      kind: Widget
      version: v1
      displayName: Hand Written Widget
      description: Hand-written description.
  install:
    strategy: deployment
    spec:
      deployments: []
`
	fxCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.io
spec:
  group: example.io
  names:
    kind: Widget
    plural: widgets
  scope: Cluster
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        description: |-
          Widget is a thing
          spread over two lines.

          Second paragraph is dropped.
        type: object
  - name: v2
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
`
	fxGadgetCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.io
spec:
  group: example.io
  names:
    kind: HTTPGadget
    plural: gadgets
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
`
	fxNamespace = `
apiVersion: v1
kind: Namespace
metadata:
  name: widget-system
`
	fxDeployment = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: widget-manager
  namespace: widget-system
  labels:
    control-plane: manager
spec:
  replicas: 1
  selector:
    matchLabels:
      control-plane: manager
  template:
    metadata:
      labels:
        control-plane: manager
    spec:
      serviceAccountName: widget-sa
      containers:
      - name: proxy
        image: example.io/proxy:v1
      - name: manager
        image: example.io/widget:kustomized
`
	fxServiceAccount = `
apiVersion: v1
kind: ServiceAccount
metadata:
  name: widget-sa
  namespace: widget-system
`
	fxClusterRole = `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: widget-manager-role
rules:
- apiGroups: ["example.io"]
  resources: ["widgets"]
  verbs: ["get", "list", "watch"]
`
	fxClusterRoleBinding = `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: widget-manager-rolebinding
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: widget-manager-role
subjects:
- kind: ServiceAccount
  name: widget-sa
  namespace: widget-system
`
	fxRole = `
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: widget-leader-election
  namespace: widget-system
rules:
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "update"]
`
	fxRoleBinding = `
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: widget-leader-election
  namespace: widget-system
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: widget-leader-election
subjects:
- kind: ServiceAccount
  name: widget-sa
`
	fxMetricsReader = `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: widget-metrics-reader
rules:
- nonResourceURLs: ["/metrics"]
  verbs: ["get"]
`
	fxService = `
apiVersion: v1
kind: Service
metadata:
  name: widget-metrics
  namespace: widget-system
spec:
  ports:
  - port: 8443
`
	fxSample = `
apiVersion: example.io/v1
kind: Widget
metadata:
  name: sample
spec:
  size: 3
`
)

// fxAll is a complete, valid input.
var fxAll = []string{
	fxCSV, fxCRD, fxNamespace, fxDeployment, fxServiceAccount, fxClusterRole,
	fxClusterRoleBinding, fxRole, fxRoleBinding, fxMetricsReader, fxService, fxSample,
}

// fxOptions are valid options for the fixture.
func fxOptions() Options {
	return Options{Package: "widget", Version: "1.2.3", Image: "example.io/widget:v1.2.3", Channels: []string{"alpha", "stable"}, DefaultChannel: "stable"}
}

// stream joins documents into one YAML stream.
func stream(docs ...string) string {
	return strings.Join(docs, "\n---\n")
}

// without returns fxAll without the given documents.
func without(drop ...string) []string {
	var out []string
	for _, d := range fxAll {
		keep := true
		for _, x := range drop {
			if d == x {
				keep = false
			}
		}
		if keep {
			out = append(out, d)
		}
	}
	return out
}

// with returns fxAll plus the given documents.
func with(extra ...string) []string {
	return append(append([]string(nil), fxAll...), extra...)
}

// replaced returns fxAll with document old replaced by new.
func replaced(old, new string) []string {
	out := append([]string(nil), fxAll...)
	for i, d := range out {
		if d == old {
			out[i] = new
		}
	}
	return out
}
