#!/usr/bin/env bash
# make demo: the operator doing its main job on the embedded local control
# plane. Starts kube-apiserver, kube-scheduler, kube-controller-manager and
# kwok nodes, installs the CRDs, runs the operator and the simulated DRA
# driver, applies config/samples, waits until things settle and prints what
# a person would look at. Runs until interrupted; DEMO_ONCE=1 exits after
# printing.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/bin
KUBECTL=$BIN/k8s/${K8S_VERSION:-v1.37.2}/kubectl
WEBHOOK_PORT=${DEMO_WEBHOOK_PORT:-9443}
NODES=${DEMO_NODES:-4}
WORK=${DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/drastack-demo.XXXXXX")}
LOGS=$WORK/logs
export KUBECONFIG=$WORK/kubeconfig
mkdir -p "$LOGS"
start=$(date +%s)
pids=()

cleanup() {
  local status=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  exit $status
}
trap cleanup EXIT INT TERM

fail() {
  echo "demo: $*" >&2
  for f in "$LOGS"/*.log; do
    [ -f "$f" ] || continue
    echo "--- last lines of $f" >&2
    tail -n 25 "$f" >&2
  done
  exit 1
}

# wait_for DESCRIPTION TIMEOUT_SECONDS COMMAND...: polls until COMMAND succeeds.
wait_for() {
  local what=$1 timeout=$2; shift 2
  local deadline=$(( $(date +%s) + timeout ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "timed out after ${timeout}s waiting for $what"
    sleep 1
  done
}

echo "== starting the local control plane with $NODES kwok nodes (logs: $LOGS)"
# The operator runs as deployed: the local cluster installs the Namespace,
# ServiceAccount and RBAC of config/default (and its pod webhook, called by
# URL since the operator runs on this machine, not behind a Service) and
# writes a kubeconfig with a token of that ServiceAccount.
"$BIN/localcluster" -version "${K8S_VERSION:-v1.37.2}" -nodes "$NODES" -kubeconfig "$KUBECONFIG" -crds "$ROOT/config/crd/bases" -log-dir "$LOGS" \
  -operator-deploy "$ROOT/config/default" -operator-kubeconfig "$WORK/operator.kubeconfig" \
  -operator-webhook-url "https://127.0.0.1:$WEBHOOK_PORT" \
  > "$LOGS/localcluster.log" 2>&1 &
pids+=($!)
wait_for "the control plane" 180 grep -q "cluster ready" "$LOGS/localcluster.log"

echo "== starting the operator as ServiceAccount drastack-system/drastack-controller-manager"
# The pod webhook of the claim controller listens on 127.0.0.1 with a
# certificate the operator makes at startup; it sets the caBundle of its
# webhook configuration itself, as under `make deploy`.
"$BIN/manager" --kubeconfig "$WORK/operator.kubeconfig" --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0 \
  --namespace drastack-system --webhook-port "$WEBHOOK_PORT" --webhook-host 127.0.0.1 \
  > "$LOGS/manager.log" 2>&1 &
pids+=($!)
# Pods created before the webhook is trusted would not be gated.
wait_for "the pod webhook's caBundle" 60 bash -c \
  "[ -n \"\$('$KUBECTL' get mutatingwebhookconfiguration drastack-mutating-webhook-configuration -o jsonpath='{.webhooks[0].clientConfig.caBundle}')\" ]"

echo "== applying config/samples"
for f in "$ROOT"/config/samples/drastack_*.yaml; do
  "$KUBECTL" apply --server-side -f "$f"
done
shopt -s nullglob
for f in "$ROOT"/config/samples/demo-*.yaml; do
  "$KUBECTL" apply --server-side -f "$f"
done

echo "== starting the simulated DRA driver"
"$BIN/dra-sim" -kubeconfig "$KUBECONFIG" -inventory "$ROOT/config/samples/sim-inventory.yaml" \
  > "$LOGS/dra-sim.log" 2>&1 &
pids+=($!)

wait_for "DRAStack default to be Ready" 180 \
  "$KUBECTL" wait --for=condition=Ready drastack/default --timeout=5s
wait_for "ResourceSlices to be published" 120 \
  bash -c "[ \"\$('$KUBECTL' get resourceslices -o name | wc -l)\" -gt 0 ]"
wait_for "DevicePools to be reported" 120 bash -c "[ \"\$('$KUBECTL' get pool -o name | wc -l)\" -gt 0 ]"
if [ -f "$ROOT/config/samples/demo-claims.yaml" ]; then
  wait_for "the operator to allocate the demo claims, and kube-scheduler the ordinary pod's" 120 bash -c \
    "[ -n \"\$('$KUBECTL' get resourceclaim -n demo-claims tpu-2x4 -o jsonpath='{.status.allocation}')\" ] && [ \"\$('$KUBECTL' get pod -n demo-claims mig-pair -o jsonpath='{.status.phase}')\" = Running ] && [ \"\$('$KUBECTL' get pod -n demo-claims plain-gpu -o jsonpath='{.status.phase}')\" = Running ]"
fi
sleep 2

echo
echo "\$ kubectl get drastack"
"$KUBECTL" get drastack -o wide
echo
echo "\$ kubectl get resourceslices"
"$KUBECTL" get resourceslices
echo
echo "\$ kubectl get pool"
"$KUBECTL" get pool
echo
echo "\$ kubectl dra pools broken-gpu.sim.drastack.io/kwok-node-0-faulty   # the problems behind a pool"
"$BIN/kubectl-dra" pools --kubeconfig "$KUBECONFIG" broken-gpu.sim.drastack.io/kwok-node-0-faulty || true
echo
if [ -f "$ROOT/config/samples/demo-claims.yaml" ]; then
  echo "\$ kubectl get devicetaintrules   # central devices: kube-scheduler keeps off them, only the operator allocates them"
  "$KUBECTL" get devicetaintrules -o custom-columns='NAME:.metadata.name,DRIVER:.spec.deviceSelector.driver,POOL:.spec.deviceSelector.pool,TAINT:.spec.taint.key,EFFECT:.spec.taint.effect'
  echo
  echo "\$ kubectl get resourceclaims -n demo-claims   # the operator's (a CEL-constrained claim, an immediate multi-host claim) on central devices, kube-scheduler's beside them"
  "$KUBECTL" get resourceclaims -n demo-claims -o custom-columns='NAME:.metadata.name,POOL:.status.allocation.devices.results[0].pool,DEVICES:.status.allocation.devices.results[*].device,RESERVED-FOR:.status.reservedFor[*].name'
  echo
  echo "\$ kubectl get events -n demo-claims --field-selector reason=Allocated"
  "$KUBECTL" get events -n demo-claims --field-selector reason=Allocated -o custom-columns='CLAIM:.involvedObject.name,NOTE:.message' || true
  echo
  echo "\$ kubectl get pod -n demo-claims -o wide"
  "$KUBECTL" get pod -n demo-claims -o wide
  echo
  # A claim that cannot be allocated: the whole 4x4 TPU slice, while
  # tpu-2x4 holds half of its chips. The operator's Unsatisfiable Event
  # and kubectl dra explain name the obstacle.
  "$KUBECTL" apply --server-side -f - >/dev/null <<'YAML'
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: tpu-4x4
  namespace: demo-claims
  labels:
    resource.drastack.io/allocation: Immediate
spec:
  devices:
    requests:
    - name: slice
      exactly:
        deviceClassName: tpu.sim.drastack.io
        selectors:
        - cel:
            expression: device.attributes["tpu.sim.drastack.io"].shape == "4x4"
YAML
  wait_for "the operator's Unsatisfiable Event on claim tpu-4x4" 30 bash -c \
    "'$KUBECTL' get events -n demo-claims --field-selector reason=Unsatisfiable,involvedObject.name=tpu-4x4 -o name | grep -q ."
  echo "\$ kubectl apply -f tpu-4x4.yaml   # an immediate claim for the whole 4x4 TPU slice, while tpu-2x4 holds half of it"
  echo "\$ kubectl dra explain claim/tpu-4x4 -n demo-claims   # why it is pending, from the engine itself"
  "$BIN/kubectl-dra" explain claim/tpu-4x4 -n demo-claims --kubeconfig "$KUBECONFIG" || true
  echo
  echo "\$ kubectl get events -n demo-claims --field-selector reason=Unsatisfiable,involvedObject.name=tpu-4x4   # the operator's Event carries the same verdict"
  "$KUBECTL" get events -n demo-claims --field-selector reason=Unsatisfiable,involvedObject.name=tpu-4x4 -o custom-columns='CLAIM:.involvedObject.name,NOTE:.message' || true
  echo
  # A gang (issue 27): two pods that start together or not at all, each
  # with a 3g.20gb MIG partition of the central GPUs. The operator places
  # both in one search and lifts both gates together.
  "$KUBECTL" apply --server-side -f - >/dev/null <<'YAML'
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: gang-3g
  namespace: demo-claims
spec:
  metadata:
    annotations:
      resource.drastack.io/cel-constraints: '[{"expression": "size(devices) == 1"}]'
  spec:
    devices:
      requests:
      - name: mig
        exactly:
          deviceClassName: gpu.sim.drastack.io
          selectors:
          - cel:
              expression: device.attributes["gpu.sim.drastack.io"].type == "mig" && device.attributes["gpu.sim.drastack.io"].profile == "3g.20gb"
YAML
  for i in 0 1; do
    "$KUBECTL" apply --server-side -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: trainer-$i
  namespace: demo-claims
  labels:
    resource.drastack.io/gang: trainer
  annotations:
    resource.drastack.io/gang-min-count: "2"
spec:
  containers:
  - name: main
    image: registry.k8s.io/pause:3.10
    resources:
      claims:
      - name: mig
  resourceClaims:
  - name: mig
    resourceClaimTemplateName: gang-3g
YAML
  done
  wait_for "the gang's two pods to run" 60 bash -c \
    "[ \"\$('$KUBECTL' get pod -n demo-claims -l resource.drastack.io/gang=trainer -o jsonpath='{.items[*].status.phase}')\" = 'Running Running' ]"
  echo "\$ kubectl apply -f trainer.yaml   # a gang: pods trainer-0 and trainer-1, label resource.drastack.io/gang=trainer, gang-min-count 2"
  echo "\$ kubectl get events -n demo-claims --field-selector reason=AllocationGateRemoved   # both gates lifted once the whole gang was placed"
  "$KUBECTL" get events -n demo-claims --field-selector reason=AllocationGateRemoved -o custom-columns='POD:.involvedObject.name,NOTE:.message' | grep -E 'POD|trainer' || true
  echo
  echo "\$ kubectl get pod -n demo-claims -l resource.drastack.io/gang=trainer -o wide"
  "$KUBECTL" get pod -n demo-claims -l resource.drastack.io/gang=trainer -o wide
  echo
fi
echo "\$ kubectl get drastack default -o jsonpath='{.status.cluster}'"
"$KUBECTL" get drastack default -o jsonpath='{.status.cluster}'; echo
echo
echo "demo ready in $(( $(date +%s) - start ))s"
echo "kubeconfig: $KUBECONFIG"
echo "try: export KUBECONFIG=$KUBECONFIG; $KUBECTL get pool"
if [ -n "${DEMO_ONCE:-}" ]; then
  exit 0
fi
echo "running until interrupted (Ctrl-C)"
wait "${pids[0]}"
