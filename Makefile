# drastack Makefile. A fresh machine needs two targets: `make demo` and
# `make test`; both build or install what they need into bin/.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

VERSION ?= 0.1.0
IMG ?= ghcr.io/drastack/drastack:v$(VERSION)
# The example driver profile's default plugin image (internal/driver.ExampleImage).
PLUGIN_IMG ?= ghcr.io/drastack/drastack-example-plugin:v$(VERSION)
BUNDLE_IMG ?= ghcr.io/drastack/drastack-bundle:v$(VERSION)
K8S_VERSION ?= v1.37.2
# The older release `make test` runs a compatibility smoke on.
K8S_COMPAT_VERSION ?= v1.36.3

LOCALBIN ?= $(CURDIR)/bin
K8S_BIN ?= $(LOCALBIN)/k8s/$(K8S_VERSION)
K8S_COMPAT_BIN ?= $(LOCALBIN)/k8s/$(K8S_COMPAT_VERSION)
# kubelet, kube-proxy and containerd of the real node (hack/build-node.sh).
NODE_BIN ?= $(LOCALBIN)/node/$(K8S_VERSION)
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
KUSTOMIZE ?= $(LOCALBIN)/kustomize
CONTROLLER_TOOLS_VERSION ?= v0.23.0
KUSTOMIZE_VERSION ?= v5.8.1
# prometheus and promtool are built from the version of
# github.com/prometheus/prometheus that go.mod requires (its PromQL parser
# checks the dashboard and the rules).
PROMETHEUS_MODULE_VERSION ?= $(shell go list -m -f '{{.Version}}' github.com/prometheus/prometheus)
PROMETHEUS_BIN ?= $(LOCALBIN)/prometheus/$(PROMETHEUS_MODULE_VERSION)

GO_TEST_FLAGS ?=
E2E_TIMEOUT ?= 45m
DEMO_ONCE ?=

export DRASTACK_K8S_BIN := $(K8S_BIN)
export DRASTACK_NODE_BIN := $(NODE_BIN)
export DRASTACK_PROMETHEUS_BIN := $(PROMETHEUS_BIN)

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate CRDs, RBAC and the webhook configuration from markers, and the admission policies (config/admission).
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd webhook paths="./api/..." paths="./internal/controller/..." paths="./internal/claimwebhook/..." paths="./internal/webhookcert/..." paths="./internal/admissionpolicy/..." paths="./internal/operator/..." output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac output:webhook:artifacts:config=config/webhook
	go run ./hack/admissionpolicies -output config/admission/policies.yaml

.PHONY: generate
generate: controller-gen ## Generate deepcopy code.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: fmt
fmt: ## Run gofmt.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: ## Check formatting and vet.
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^bin/')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	go vet -tags e2e ./test/...

.PHONY: verify-generated
verify-generated: controller-gen ## Fail when generated files (CRDs, RBAC, deepcopy, bundle) are stale.
	hack/verify-generated.sh

##@ Test

.PHONY: test
test: tools lint verify-generated test-unit test-e2e ## Everything CI runs: checks, unit, integration and e2e tests.

.PHONY: test-unit
test-unit: prometheus ## Unit tests of pure packages and integration tests against the real API server; promtool tests of the alerts.
	go test $(GO_TEST_FLAGS) ./...
	# The explain budget (one claim on 500 nodes x 8 devices in under 1 s), once.
	go test ./internal/allocator/explain/ -run '^$$' -bench 'Explain500x8' -benchtime 1x

.PHONY: test-e2e
test-e2e: k8s prometheus ## End-to-end tests on the local control plane (kube-apiserver, scheduler, controller-manager, kwok).
	go test $(GO_TEST_FLAGS) -tags e2e -timeout $(E2E_TIMEOUT) -count=1 ./test/e2e/... ./internal/cli/...

# The long spec fuzz run: random DRAStack edits and their reverts on the
# local cluster (test/e2e/spec_fuzz_test.go); make test runs 300 from a
# fixed seed, this many from a new one (logged, DRASTACK_SPEC_FUZZ_SEED
# replays it).
SPEC_FUZZ_EDITS ?= 3000
SPEC_FUZZ_SEED ?= $(shell date +%s)

.PHONY: test-spec-fuzz
test-spec-fuzz: k8s-default ## Random DRAStack edits (generated from the CRD's schema, mutations of the sample) on the local cluster: held specs change nothing, reverts restore everything, nothing is allocated twice ($(SPEC_FUZZ_EDITS) edits).
	DRASTACK_SPEC_FUZZ_EDITS=$(SPEC_FUZZ_EDITS) DRASTACK_SPEC_FUZZ_SEED=$(SPEC_FUZZ_SEED) \
		go test -tags e2e -count=1 -timeout 600m -run '^TestSpecFuzz$$' -v ./test/e2e/

# Gate sets of the long differential run: Kubernetes 1.37's defaults, every
# gate on, every alpha gate off (beta and GA on), and consumable capacity off.
DIFFTEST_CASES ?= 10000
DIFFTEST_GATES ?= k8s-1.37-defaults:DRAListTypeAttributes=false \
	all-on:all=true \
	alpha-off:all=true,DRAListTypeAttributes=false,DRADerivedAttributes=false,DRADeviceCompatibilityGroups=false,DRAOptionalNodeOperations=false \
	consumable-off:DRAListTypeAttributes=false,DRAConsumableCapacity=false

.PHONY: difftest
difftest: ## Native vs upstream on $(DIFFTEST_CASES) generated cases under each gate set of DIFFTEST_GATES; 0 disagreements required.
	@for set in $(DIFFTEST_GATES); do \
		echo "difftest: $${set%%:*} ($(DIFFTEST_CASES) seeds)"; \
		go test ./internal/allocator/difftest/ -run '^TestDifferential$$' -count=1 -timeout 120m -v \
			-difftest.cases $(DIFFTEST_CASES) -difftest.features "$${set#*:}" || exit 1; \
	done

.PHONY: upstream-table
upstream-table: ## Upstream's allocator test table (k8s.io/dynamic-resource-allocation allocatortesting, 283 cases) on the native engine, from the module cache.
	hack/upstream-table.sh

# Seeds of the long simulation run (`make test` runs 1,000).
SIMTEST_SEEDS ?= 100000

.PHONY: simtest
simtest: ## The allocation protocol's deterministic simulation on $(SIMTEST_SEEDS) seeds; a failing seed replays with -sim.seed.
	go test ./internal/controller/claims/ -run '^TestSimulation$$' -count=1 -timeout 600m -v -sim.seeds $(SIMTEST_SEEDS)

.PHONY: bench
bench: bench-engines bench-pools bench-explain bench-fragmentation ## Benchmarks: engines side by side, pool validation at scale, explain, fragmentation.

.PHONY: bench-engines
bench-engines: ## The engine harness: native and upstream on the same inputs, with ratios (BENCH_FLAGS=-quick for 20 s budgets).
	go run ./test/bench $(BENCH_FLAGS)

.PHONY: bench-fragmentation
bench-fragmentation: ## Arrivals and departures (10,000 per sequence: MIG, multi-host slices, gangs) replayed by kube-scheduler's first fit and the native engine's FirstFit and Pack; `make test` runs a short version (test/bench/frag TestQuick). FRAG_FLAGS='-load 1.2 -arrivals 20000' to change them.
	go run ./test/bench -fragmentation $(FRAG_FLAGS)

.PHONY: bench-explain
bench-explain: ## kubectl dra explain for one claim on 500 nodes x 8 devices beside its plain allocation (budget 1 s).
	go test ./internal/allocator/explain/ -run '^$$' -bench 'Explain500x8' -benchtime 5x

.PHONY: bench-pools
bench-pools: ## Pool validation at 5,000 nodes x 2 drivers: full validation, one incremental update, memory.
	go test ./internal/controller/pool/ -run '^$$' -bench 'FullValidation|IncrementalUpdate' -benchtime 5x

.PHONY: bench-scale
bench-scale: tools ## The operator on 1,000 kwok nodes: pools correct after publication, a 1,000-claim burst, a 10% republish; CPU, RSS, API requests (SCALE_FLAGS='-nodes 300 -domains 2' for a smaller run).
	go run ./test/scale/cmd/scalebench $(SCALE_FLAGS)

##@ Build

.PHONY: build
build: ## Build the manager, kubectl-dra, the simulated driver and the local cluster runner.
	go build -o $(LOCALBIN)/ ./cmd/... ./test/cluster/cmd/localcluster

.PHONY: image
image: ## Build the operator (IMG) and example plugin (PLUGIN_IMG) images as OCI archives in bin/images, without a container engine (docker/podman load -i, skopeo copy oci-archive:...).
	go run ./hack/imagegen -out $(LOCALBIN)/images -operator $(IMG) -plugin $(PLUGIN_IMG)

.PHONY: bundle-image
bundle-image: bundle ## Build the OLM bundle image (BUNDLE_IMG) as an OCI archive in bin/images.
	go run ./hack/imagegen -out $(LOCALBIN)/images -bundle $(BUNDLE_IMG) -bundle-dir bundle

.PHONY: docker-build
docker-build: ## Build the operator and example plugin images with Docker (the Dockerfile), for those who have it.
	docker build --target manager -t $(IMG) .
	docker build --target example-plugin -t $(PLUGIN_IMG) .

.PHONY: run
run: manifests generate ## Run the manager against the current kubeconfig (your own credentials: without the admission policies, which fence only its ServiceAccount).
	go run ./cmd/manager --admission-policies=off

##@ Local control plane and demo

.PHONY: k8s
k8s: k8s-default node ## Build etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kubectl and kwok of both releases, and the real node (cached per machine).
	K8S_VERSION=$(K8S_COMPAT_VERSION) hack/build-k8s.sh $(K8S_COMPAT_BIN)

.PHONY: k8s-default
k8s-default: ## Build the control plane of K8S_VERSION only (what make demo needs).
	K8S_VERSION=$(K8S_VERSION) hack/build-k8s.sh $(K8S_BIN)

.PHONY: node
node: ## Build kubelet, kube-proxy and containerd for the real node (cached per machine) and apt-get install runc, the CNI plugins, nftables and busybox-static where missing.
	K8S_VERSION=$(K8S_VERSION) hack/build-node.sh $(NODE_BIN)

.PHONY: demo
demo: tools build image ## Run the operator on the embedded local control plane (and a real node where this machine can run one); DEMO_ONCE=1 exits after printing.
	DEMO_ONCE=$(DEMO_ONCE) K8S_VERSION=$(K8S_VERSION) hack/demo.sh

##@ Deployment

.PHONY: install
install: manifests kustomize ## Install the CRDs into the current cluster.
	$(KUSTOMIZE) build config/crd | kubectl apply --server-side -f -

.PHONY: uninstall
uninstall: kustomize ## Remove the CRDs from the current cluster.
	$(KUSTOMIZE) build config/crd | kubectl delete --ignore-not-found -f -

.PHONY: deploy
deploy: manifests kustomize ## Deploy the operator with kustomize to the current cluster.
	cd config/manager && $(KUSTOMIZE) edit set image controller=$(IMG)
	$(KUSTOMIZE) build config/default | kubectl apply --server-side -f -

.PHONY: undeploy
undeploy: kustomize ## Remove the operator from the current cluster.
	$(KUSTOMIZE) build config/default | kubectl delete --ignore-not-found -f -

.PHONY: bundle
bundle: manifests ## Generate the OLM bundle (bundle/, bundle.Dockerfile) for VERSION.
	go run ./hack/bundlegen -version $(VERSION) -image $(IMG) -output .

.PHONY: prometheus
prometheus: ## Build prometheus and promtool (github.com/prometheus/prometheus, go.mod's version; cached per machine) for the alert tests and the observability e2e suite.
	PROMETHEUS_MODULE_VERSION=$(PROMETHEUS_MODULE_VERSION) hack/build-prometheus.sh $(PROMETHEUS_BIN)

##@ Tools

.PHONY: tools
tools: controller-gen kustomize k8s-default node ## Install every tool the Makefile needs into bin/.

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN)
$(CONTROLLER_GEN):
	GOBIN=$(LOCALBIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

.PHONY: kustomize
kustomize: $(KUSTOMIZE)
$(KUSTOMIZE):
	GOBIN=$(LOCALBIN) go install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)
