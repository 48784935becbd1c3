#!/usr/bin/env python3
"""Validates rendered Kubernetes manifests offline, then checks what the deployment promises.

usage: k8s_validate.py RENDERED.yaml [--pod-owner-labels] [--self-test]

Schemas, all from PyPI packages, nothing fetched at run time:
- built-in kinds: kubernetes-validate's bundled OpenAPI schemas, strict (unknown fields are
  errors), for the oldest and the newest Kubernetes version the package knows from MIN_VERSION;
- ServiceMonitor (a CRD, in no Kubernetes schema): cloudcoil's pydantic models generated from
  the prometheus-operator CRDs (types, enums, required fields). Those models ignore unknown
  fields, so each document is also compared with its validated round trip: a key that did not
  survive is an unknown field and an error.
Any other kind fails: it has no schema here.

Without --pod-owner-labels the documents must hold no RBAC and mount no service account
token (gpudash then calls no Kubernetes API). With it (an overlay with
deploy/kubernetes/components/pod-owner-labels) they must hold exactly one ClusterRole, allowing
`get` on `pods` of the core API group and nothing else, bound by exactly one ClusterRoleBinding
to the DaemonSet's ServiceAccount alone, and the pod must mount its token; no Role, no
RoleBinding, nothing broader.

--self-test first breaks copies of the documents in ways each check must catch (a misspelt
field, a wrong type, a GPU request, a missing hostPID; a token or RBAC in the base; with
--pod-owner-labels a broader rule, another subject, another role, no token) and fails unless
every one is caught, by the check meant to catch it where one is named.
"""

import copy
import sys

import kubernetes_validate
import yaml
from cloudcoil.models.prometheus_operator import v1 as prometheus_v1
from kubernetes_validate import utils as kv_utils

MIN_VERSION = (1, 29)
SERVICE_MONITOR = ("monitoring.coreos.com/v1", "ServiceMonitor")
RBAC_KINDS = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
# All that components/pod-owner-labels may grant: GET /api/v1/namespaces/NS/pods/NAME.
POD_READER_RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]


def versions():
    known = sorted({tuple(int(p) for p in v.split(".")) for v in kv_utils.all_versions()})
    usable = [v for v in known if v[:2] >= MIN_VERSION]
    return [".".join(map(str, v)) for v in (usable[0], usable[-1])]


def unknown_keys(given, kept, path=""):
    """Keys in `given` that the validated model dropped (pydantic ignores unknown fields)."""
    if isinstance(given, dict) and isinstance(kept, dict):
        for key, value in given.items():
            where = f"{path}.{key}" if path else key
            if key not in kept:
                yield where
            else:
                yield from unknown_keys(value, kept[key], where)
    elif isinstance(given, list) and isinstance(kept, list):
        for i, (a, b) in enumerate(zip(given, kept)):
            yield from unknown_keys(a, b, f"{path}[{i}]")


def schema_errors(doc, kube_versions):
    """Schema problems of one document, as sentences; empty when it validates."""
    kind = (doc.get("apiVersion"), doc.get("kind"))
    if kind == SERVICE_MONITOR:
        try:
            model = prometheus_v1.ServiceMonitor.model_validate(doc)
        except Exception as e:  # pydantic.ValidationError, with every field it refused
            return [f"ServiceMonitor schema (prometheus-operator CRD models): {e}"]
        kept = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
        return [f"unknown field {k} (not in the ServiceMonitor CRD)" for k in unknown_keys(doc, kept)]
    errors = []
    for version in kube_versions:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            return [f"no schema for {kind[0]} {kind[1]} in Kubernetes {version} (a CRD without a schema here)"]
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.path) or "(top)"
            errors.append(f"Kubernetes {version}: {path}: {e.message}")
    return errors


def find(docs, kind, name=None):
    return [d for d in docs if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)]


def promise_errors(docs, pod_owner_labels=False):
    """What the issue asks of the deployment, beyond the schemas; `pod_owner_labels`: with
    components/pod-owner-labels (a token and get on pods), else no token and no RBAC."""
    errors = []

    def check(ok, what):
        if not ok:
            errors.append(what)

    daemonsets = find(docs, "DaemonSet", "gpudash")
    check(len(daemonsets) == 1, "one DaemonSet named gpudash")
    if not daemonsets:
        return errors
    pod = daemonsets[0]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    check(pod.get("hostPID") is True, "hostPID: true (GPU processes are host PIDs)")
    check(pod.get("runtimeClassName") == "nvidia", "runtimeClassName: nvidia (the GPUs without taking one)")
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    check(env.get("NVIDIA_VISIBLE_DEVICES") == "all", "NVIDIA_VISIBLE_DEVICES=all")
    resources = container.get("resources", {})
    for part in ("requests", "limits"):
        check("nvidia.com/gpu" not in resources.get(part, {}), f"no nvidia.com/gpu in {part}: a monitor takes no GPU slot")
    check({"cpu", "memory"} <= set(resources.get("requests", {})), "CPU and memory requests")
    check("memory" in resources.get("limits", {}), "a memory limit")
    terms = pod.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", {})
    keys = {e["key"] for t in terms.get("nodeSelectorTerms", []) for e in t.get("matchExpressions", [])}
    check("nvidia.com/gpu.present" in keys, "node affinity on nvidia.com/gpu.present")
    check(any(t.get("key") == "nvidia.com/gpu" for t in pod.get("tolerations", [])), "a toleration for nvidia.com/gpu taints")
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
    pod_resources = mounts.get("/var/lib/kubelet/pod-resources")
    check(
        pod_resources is not None
        and pod_resources.get("readOnly") is True
        and volumes[pod_resources["name"]].get("hostPath", {}).get("path") == "/var/lib/kubelet/pod-resources",
        "the kubelet's pod-resources directory mounted read-only from the host",
    )
    sockets = [m for p, m in mounts.items() if p.endswith(".sock")]
    check(all(m.get("readOnly") is True for m in sockets), "container sockets mounted read-only")
    security = container.get("securityContext", {})
    check(security.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation: false")
    check(security.get("capabilities", {}).get("drop") == ["ALL"], "every capability dropped")
    check(
        sorted(security.get("capabilities", {}).get("add", [])) == ["SETGID", "SETUID"],
        "no capability added but SETGID and SETUID (the Lab worker's switch to nobody)",
    )
    check(security.get("readOnlyRootFilesystem") is True, "a read-only root file system")
    accounts = find(docs, "ServiceAccount", pod.get("serviceAccountName"))
    check(
        len(accounts) == 1 and accounts[0].get("automountServiceAccountToken") is False,
        "its ServiceAccount mounts no token by default (a token only where the pod asks for it)",
    )
    projected = [v["name"] for v in pod.get("volumes", []) for s in v.get("projected", {}).get("sources", []) if "serviceAccountToken" in s]
    check(not projected, f"no service account token in a projected volume, found {projected}")
    rbac = [d for d in docs if d.get("kind") in RBAC_KINDS]
    if pod_owner_labels:
        errors += pod_reader_errors(daemonsets[0], rbac)
    else:
        check(pod.get("automountServiceAccountToken") is False, "no service account token in the pod")
        found = [f"{d['kind']} {d['metadata'].get('name')}" for d in rbac]
        check(not rbac, f"no RBAC (without components/pod-owner-labels gpudash calls no Kubernetes API), found {found}")
    probes = [container.get(p, {}).get("httpGet", {}).get("path") for p in ("livenessProbe", "readinessProbe")]
    check(probes == ["/healthz", "/healthz"], "liveness and readiness on /healthz")

    services = find(docs, "Service", "gpudash")
    monitors = find(docs, "ServiceMonitor", "gpudash")
    check(len(services) == 1 and len(monitors) == 1, "a Service and a ServiceMonitor named gpudash")
    if services and monitors:
        service, monitor = services[0], monitors[0]
        labels = service["metadata"].get("labels", {})
        wanted = monitor["spec"]["selector"].get("matchLabels", {})
        check(wanted and all(labels.get(k) == v for k, v in wanted.items()), "the ServiceMonitor selects the Service")
        ports = {p.get("name") for p in service["spec"]["ports"]}
        check(all(e.get("port") in ports for e in monitor["spec"]["endpoints"]), "the ServiceMonitor scrapes a port the Service names")
        pod_labels = daemonsets[0]["spec"]["template"]["metadata"].get("labels", {})
        check(all(pod_labels.get(k) == v for k, v in service["spec"].get("selector", {}).items()), "the Service selects the DaemonSet's pods")
        check(any(p.get("name") == "http" for p in container.get("ports", [])), "the container names its port http")
    return errors


def pod_reader_errors(daemonset, rbac):
    """components/pod-owner-labels: a token in the pod, and exactly `get` on pods for its
    ServiceAccount, cluster-wide; nothing broader."""
    errors = []

    def check(ok, what):
        if not ok:
            errors.append(what)

    pod = daemonset["spec"]["template"]["spec"]
    check(pod.get("automountServiceAccountToken") is True, "the service account token mounted in the pod (automountServiceAccountToken: true)")
    others = [f"{d['kind']} {d['metadata'].get('name')}" for d in rbac if d["kind"] in ("Role", "RoleBinding")]
    check(not others, f"no Role or RoleBinding beside the ClusterRole and its binding, found {others}")
    roles = [d for d in rbac if d["kind"] == "ClusterRole"]
    bindings = [d for d in rbac if d["kind"] == "ClusterRoleBinding"]
    check(len(roles) == 1, f"exactly one ClusterRole, found {[d['metadata'].get('name') for d in roles]}")
    check(len(bindings) == 1, f"exactly one ClusterRoleBinding, found {[d['metadata'].get('name') for d in bindings]}")
    for role in roles:
        check(role.get("rules") == POD_READER_RULES, f"the ClusterRole allows exactly get on pods (core API group), found {role.get('rules')}")
        check("aggregationRule" not in role, "the ClusterRole aggregates no other ClusterRoles (aggregationRule)")
    if len(roles) == 1 and len(bindings) == 1:
        role, binding = roles[0], bindings[0]
        wanted = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]}
        check(binding.get("roleRef") == wanted, f"the ClusterRoleBinding refers to that ClusterRole, found {binding.get('roleRef')}")
        account = {"kind": "ServiceAccount", "name": pod.get("serviceAccountName"), "namespace": daemonset["metadata"].get("namespace")}
        check(
            account["name"] == "gpudash" and account["namespace"] == "gpudash" and binding.get("subjects") == [account],
            f"the ClusterRoleBinding's one subject is the ServiceAccount gpudash in namespace gpudash, found {binding.get('subjects')}",
        )
    return errors


def all_errors(docs, kube_versions, pod_owner_labels=False):
    errors = []
    for doc in docs:
        errors += [f"{doc.get('kind')} {doc.get('metadata', {}).get('name')}: {e}" for e in schema_errors(doc, kube_versions)]
    return errors + promise_errors(docs, pod_owner_labels)


def faults(docs, pod_owner_labels=False):
    """Broken copies that the checks must refuse: (what was broken, documents, a piece of the
    error the check meant for it reports, or None where any error will do)."""

    def broken(kind, change):
        out = copy.deepcopy(docs)
        change(find(out, kind)[0])
        return out

    def edited(change):
        out = copy.deepcopy(docs)
        change(out)
        return out

    def pod(d):
        return d["spec"]["template"]["spec"]

    def rule(d):
        return d["rules"][0]

    def rbac(kind, name, **fields):
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": {"name": name}, **fields}

    def bind(kind, role_kind, role, subjects):
        return rbac(kind, f"{role}-binding", roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role}, subjects=subjects)

    gpudash = {"kind": "ServiceAccount", "name": "gpudash", "namespace": "gpudash"}
    token_volume = {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}

    if not pod_owner_labels:
        yield "a misspelt DaemonSet field (hostPid)", broken("DaemonSet", lambda d: pod(d).update(hostPid=True)), None
        yield "a port that is a word", broken("DaemonSet", lambda d: pod(d)["containers"][0]["ports"][0].update(containerPort="http")), None
        yield "a misspelt ServiceMonitor field (intervall)", broken("ServiceMonitor", lambda d: d["spec"]["endpoints"][0].update(intervall="15s")), None
        yield "a ServiceMonitor relabeling action that does not exist", broken(
            "ServiceMonitor", lambda d: d["spec"]["endpoints"][0]["relabelings"][0].update(action="rename")
        ), None
        yield "a GPU request", broken(
            "DaemonSet", lambda d: pod(d)["containers"][0]["resources"]["limits"].update({"nvidia.com/gpu": 1})
        ), None
        yield "no hostPID", broken("DaemonSet", lambda d: pod(d).pop("hostPID")), None
        yield "a writable pod-resources mount", broken(
            "DaemonSet",
            lambda d: [m.update(readOnly=False) for m in pod(d)["containers"][0]["volumeMounts"] if "pod-resources" in m["mountPath"]],
        ), None
        # The base: no token, no RBAC.
        yield "a token mounted in the base's pod", broken(
            "DaemonSet", lambda d: pod(d).update(automountServiceAccountToken=True)
        ), "no service account token in the pod"
        yield "the pod-reader ClusterRole in the base", edited(
            lambda out: out.append(rbac("ClusterRole", "gpudash-pod-reader", rules=copy.deepcopy(POD_READER_RULES)))
        ), "no RBAC"
        yield "a RoleBinding in the base", edited(
            lambda out: out.append(bind("RoleBinding", "ClusterRole", "view", [gpudash]))
        ), "no RBAC"
    else:
        # components/pod-owner-labels: the token, and get on pods, and nothing broader.
        yield "no token in the pod", broken(
            "DaemonSet", lambda d: pod(d).update(automountServiceAccountToken=False)
        ), "token mounted in the pod"
        yield "verb list beside get", broken("ClusterRole", lambda d: rule(d)["verbs"].append("list")), "exactly get on pods"
        yield "verb watch instead of get", broken("ClusterRole", lambda d: rule(d).update(verbs=["watch"])), "exactly get on pods"
        yield "every verb (*)", broken("ClusterRole", lambda d: rule(d).update(verbs=["*"])), "exactly get on pods"
        yield "secrets beside pods", broken("ClusterRole", lambda d: rule(d)["resources"].append("secrets")), "exactly get on pods"
        yield "every resource (*)", broken("ClusterRole", lambda d: rule(d).update(resources=["*"])), "exactly get on pods"
        yield "pods' subresources (pods/log)", broken("ClusterRole", lambda d: rule(d)["resources"].append("pods/log")), "exactly get on pods"
        yield "every API group (*)", broken("ClusterRole", lambda d: rule(d).update(apiGroups=["*"])), "exactly get on pods"
        yield "a second rule, get on secrets", broken(
            "ClusterRole", lambda d: d["rules"].append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]})
        ), "exactly get on pods"
        yield "a non-resource URL rule", broken(
            "ClusterRole", lambda d: d["rules"].append({"nonResourceURLs": ["*"], "verbs": ["get"]})
        ), "exactly get on pods"
        yield "an aggregationRule", broken(
            "ClusterRole", lambda d: d.update(aggregationRule={"clusterRoleSelectors": [{"matchLabels": {"rbac.example.com/aggregate-to-gpudash": "true"}}]})
        ), "aggregates no other"
        yield "the binding to cluster-admin", broken("ClusterRoleBinding", lambda d: d["roleRef"].update(name="cluster-admin")), "refers to that ClusterRole"
        yield "the binding to the namespace's default ServiceAccount", broken(
            "ClusterRoleBinding", lambda d: d["subjects"][0].update(name="default")
        ), "one subject is the ServiceAccount gpudash"
        yield "the binding to gpudash in another namespace", broken(
            "ClusterRoleBinding", lambda d: d["subjects"][0].update(namespace="kube-system")
        ), "one subject is the ServiceAccount gpudash"
        yield "a second subject (every authenticated user)", broken(
            "ClusterRoleBinding",
            lambda d: d["subjects"].append({"kind": "Group", "name": "system:authenticated", "apiGroup": "rbac.authorization.k8s.io"}),
        ), "one subject is the ServiceAccount gpudash"
        yield "no ClusterRoleBinding", edited(
            lambda out: out.remove(find(out, "ClusterRoleBinding")[0])
        ), "exactly one ClusterRoleBinding"
        yield "a second ClusterRoleBinding, to cluster-admin", edited(
            lambda out: out.append(bind("ClusterRoleBinding", "ClusterRole", "cluster-admin", [gpudash]))
        ), "exactly one ClusterRoleBinding"
        yield "a second ClusterRole", edited(
            lambda out: out.append(rbac("ClusterRole", "gpudash-secrets", rules=[{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]))
        ), "exactly one ClusterRole"
        yield "a RoleBinding beside the ClusterRoleBinding", edited(
            lambda out: out.append(bind("RoleBinding", "ClusterRole", "edit", [gpudash]))
        ), "no Role or RoleBinding"
    # Either way: the ServiceAccount mounts no token by default, and no token comes another way.
    yield "a ServiceAccount that mounts its token", broken(
        "ServiceAccount", lambda d: d.update(automountServiceAccountToken=True)
    ), "its ServiceAccount mounts no token"
    yield "a projected service account token", broken(
        "DaemonSet", lambda d: pod(d)["volumes"].append(copy.deepcopy(token_volume))
    ), "token in a projected volume"


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    if len(args) != 1 or not set(flags) <= {"--self-test", "--pod-owner-labels"}:
        raise SystemExit(__doc__)
    with open(args[0]) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    kube_versions = versions()
    pod_owner_labels = "--pod-owner-labels" in sys.argv
    if "--self-test" in sys.argv:
        for what, broken, expected in faults(docs, pod_owner_labels):
            caught = all_errors(broken, kube_versions, pod_owner_labels)
            if expected is not None:
                caught = [e for e in caught if expected in e]
            if not caught:
                meant = f" by the check that reports \"{expected}\"" if expected else ""
                raise SystemExit(f"self-test: {what} was NOT caught{meant}")
            print(f"self-test: {what}: caught ({caught[0][:150]})".replace("\n", " "))
    errors = all_errors(docs, kube_versions, pod_owner_labels)
    for doc in docs:
        kind = (doc.get("apiVersion"), doc.get("kind"))
        schema = "prometheus-operator CRD models (cloudcoil)" if kind == SERVICE_MONITOR else f"Kubernetes {' and '.join(kube_versions)}, strict"
        print(f"{doc['kind']} {doc['metadata'].get('namespace', '-')}/{doc['metadata']['name']}: schema {schema}")
    for e in errors:
        print(f"FAIL {e}")
    if errors:
        raise SystemExit(f"{len(errors)} problem(s) in {args[0]}")
    print(f"{len(docs)} documents valid; deployment checks passed")


if __name__ == "__main__":
    main()
