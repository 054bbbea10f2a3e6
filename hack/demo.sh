#!/usr/bin/env bash
# make demo: the operator doing its main job on the embedded local control
# plane. Starts kube-apiserver, kube-scheduler, kube-controller-manager and
# kwok nodes, installs the CRDs, runs the operator and the simulated DRA
# driver, applies config/samples, waits until things settle and prints what
# a person would look at. Where this machine can run one, a real node
# (kubelet, containerd, runc) joins the kwok nodes: the example driver's
# plugin, built from this tree, runs on it, and a pod there prints the
# device it was given; where it cannot, the demo says why and goes on with
# kwok. Runs until interrupted; DEMO_ONCE=1 exits after printing;
# DEMO_REAL_NODE=0 leaves the real node out.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/bin
KUBECTL=$BIN/k8s/${K8S_VERSION:-v1.37.2}/kubectl
WEBHOOK_PORT=${DEMO_WEBHOOK_PORT:-9443}
NODES=${DEMO_NODES:-4}
REAL_NODE=${DEMO_REAL_NODE:-1}
PLUGIN_ARCHIVE=$BIN/images/drastack-example-plugin.tar
REAL_DRIVER=gpu.real.example.com
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

# apply FILE: server-side apply, again for a while when the API server
# refuses part of it because a namespace is new (its default
# ServiceAccount, which pods need where a real node runs, comes a moment
# later).
apply() {
  local deadline=$(( $(date +%s) + 60 ))
  until "$KUBECTL" apply --server-side -f "$1" > "$LOGS/apply.out" 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || { cat "$LOGS/apply.out" >&2; fail "kubectl apply -f $1 failed"; }
    sleep 1
  done
  cat "$LOGS/apply.out"
}

real_args=()
real_why=""
if [ "$REAL_NODE" = 0 ]; then
  real_why="DEMO_REAL_NODE=0"
elif [ ! -f "$PLUGIN_ARCHIVE" ]; then
  real_why="no plugin image $PLUGIN_ARCHIVE (make image)"
else
  real_args=(-real-nodes 1 -real-nodes-optional -node-images "$PLUGIN_ARCHIVE")
fi

echo "== starting the local control plane with $NODES kwok nodes (logs: $LOGS)"
# The operator runs as deployed: the local cluster installs the Namespace,
# ServiceAccount and RBAC of config/default (and its pod webhook, called by
# URL since the operator runs on this machine, not behind a Service) and
# writes a kubeconfig with a token of that ServiceAccount.
"$BIN/localcluster" -version "${K8S_VERSION:-v1.37.2}" -nodes "$NODES" -kubeconfig "$KUBECONFIG" -crds "$ROOT/config/crd/bases" -log-dir "$LOGS" \
  -operator-deploy "$ROOT/config/default" -operator-kubeconfig "$WORK/operator.kubeconfig" \
  -operator-webhook-url "https://127.0.0.1:$WEBHOOK_PORT" "${real_args[@]}" \
  > "$LOGS/localcluster.log" 2>&1 &
pids+=($!)
wait_for "the control plane" 180 grep -q "cluster ready" "$LOGS/localcluster.log"
real_node=$(sed -n 's/^real node: \([^ ]*\) .*/\1/p' "$LOGS/localcluster.log" | head -1)
if [ -z "$real_node" ] && [ -z "$real_why" ]; then
  real_why=$(sed -n 's/^real nodes: none (\(.*\))$/\1/p' "$LOGS/localcluster.log" | head -1)
fi
if [ -n "$real_node" ]; then
  echo "== real node $real_node: kubelet, containerd and runc, with the example plugin's image imported"
else
  echo "== no real node (${real_why:-unknown reason}); going on with the kwok nodes"
fi

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
  apply "$f"
done
shopt -s nullglob
for f in "$ROOT"/config/samples/demo-*.yaml; do
  apply "$f"
done
if [ -n "$real_node" ]; then
  echo "== adding the example driver $REAL_DRIVER on the real node (its plugin really runs there)"
  "$KUBECTL" patch drastack default --type=json -p "[{\"op\":\"add\",\"path\":\"/spec/drivers/-\",\"value\":{\"name\":\"$REAL_DRIVER\",\"profile\":\"example\",\"nodeSelector\":{\"type\":\"real\"}}}]"
fi

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
  # with a 3g.20gb MIG partition of the central GPUs (their class
  # gpu-central.sim.drastack.io, as the central-classes policy requires of
  # a claim that asks for the operator). The operator places
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
          deviceClassName: gpu-central.sim.drastack.io
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
if [ -n "$real_node" ]; then
  # A pod on the real node with a claim for one MIG-like slice of the
  # example plugin's GPUs: kube-scheduler allocates it, the kubelet asks the
  # plugin to prepare it, and the container prints the device CDI gave it.
  cat > "$WORK/real-gpu.yaml" <<YAML
apiVersion: v1
kind: Namespace
metadata:
  name: demo-real
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: one-mig
  namespace: demo-real
spec:
  spec:
    devices:
      requests:
      - name: mig
        exactly:
          deviceClassName: $REAL_DRIVER
          selectors:
          - cel:
              expression: device.attributes["$REAL_DRIVER"].?profile.orValue("") == "1g.5gb"
---
apiVersion: v1
kind: Pod
metadata:
  name: real-gpu
  namespace: demo-real
spec:
  restartPolicy: Never
  nodeSelector: {type: real}
  resourceClaims:
  - name: mig
    resourceClaimTemplateName: one-mig
  containers:
  - name: main
    image: drastack.local/busybox:v1
    imagePullPolicy: Never
    command: ["sh", "-c", "echo I got:; env | grep ^DRASTACK_DEVICE_; cat /var/run/drastack/*/*.json; sleep 3600"]
    resources:
      claims:
      - name: mig
YAML
  apply "$WORK/real-gpu.yaml" >/dev/null
  wait_for "the pod on the real node to run" 120 bash -c \
    "[ \"\$('$KUBECTL' get pod -n demo-real real-gpu -o jsonpath='{.status.phase}')\" = Running ]"
  sleep 1
  echo "\$ kubectl get pod -n demo-real -o wide   # a pod that really runs, on $real_node"
  "$KUBECTL" get pod -n demo-real -o wide
  echo
  echo "\$ kubectl get resourceclaims -n demo-real   # what kube-scheduler allocated"
  "$KUBECTL" get resourceclaims -n demo-real -o custom-columns='NAME:.metadata.name,DRIVER:.status.allocation.devices.results[0].driver,POOL:.status.allocation.devices.results[0].pool,DEVICE:.status.allocation.devices.results[0].device'
  echo
  echo "\$ kubectl logs -n demo-real real-gpu   # what the container sees: the device the plugin prepared through CDI"
  "$KUBECTL" logs -n demo-real real-gpu
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
