"""The install bundle deploy/ (``kubectl apply -k deploy/``) and its single-namespace overlay, rendered offline.

How each object is checked (``test_every_object_is_valid``; an object of any other kind fails the test):

- built-in kinds: ``kubernetes-validate``, strict (unknown fields rejected), Kubernetes 1.32 (the sandbox's);
- our CRD kinds and kopf's peering kinds: the openAPIV3Schema of the CRD the bundle itself installs;
- cert-manager's Certificate and Issuer: the CRD schemas the sandbox serves
  (sandbox/opsmanager_sandbox/apiserver/certmanager-crds.yaml, the subset of cert-manager's fields the project uses), a
  field they do not declare rejected (as the API server's strict field validation would with cert-manager's own);
- PrometheusRule (no schema here): apiVersion, kind, and every rule's required fields; promtool checks the rules
  themselves (tests/deploy/test_alert_rules.py).

The other tests encode the issue's requirements: two operator replicas (one active: kopf peering), two webhook
replicas with a PDB, the webhook Service and the webhook configurations pointing at it with the CA injected from
the serving Certificate, one `images:` entry for every container, every ServiceAccount of a Deployment exists and
is bound, no wildcard in any rule, the webhook reads no Secret, and what the overlay changes.
"""

from __future__ import annotations

import copy
import re
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from opsmanager.webhook import config as webhook_config
from tests.deploy import bundle

KUBERNETES_VERSION = "1.32.0"  # the sandbox's API level
CERT_MANAGER_CRDS = bundle.ROOT / "sandbox" / "opsmanager_sandbox" / "apiserver" / "certmanager-crds.yaml"
IMAGE = "opsmanager:0.1.0"
# Resources that exist only cluster-wide; everything else the operator touches is namespaced.
CLUSTER_SCOPED = {"customresourcedefinitions", "namespaces", "clusterkopfpeerings", "clusterissuers", "nodes",
                  "nodes/proxy"}
RENDERS = {"base": bundle.DEPLOY, "single-namespace": bundle.SINGLE_NAMESPACE}

Obj = dict[str, Any]


@pytest.fixture(params=sorted(RENDERS), scope="module")
def docs(request: pytest.FixtureRequest) -> list[Obj]:
    return bundle.objects(RENDERS[request.param])


# --- schemas ---------------------------------------------------------------------------------------------------


def _crd_schemas(crds: list[Obj]) -> dict[tuple[str, str], Obj]:
    """``{(apiVersion, kind): openAPIV3Schema}`` of every served version of the given CRDs."""
    out = {}
    for crd in crds:
        spec = crd["spec"]
        for version in spec["versions"]:
            if version.get("served"):
                out[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = version["schema"]["openAPIV3Schema"]
    return out


def _unknown_fields(node: Any, schema: Obj, path: str, *, declared_only: bool) -> list[str]:
    """Fields the schema does not declare (what the API server's strict field validation refuses). With
    ``declared_only``, a schema that keeps unknown fields still refuses those beside the ones it declares."""
    if schema.get("x-kubernetes-preserve-unknown-fields") and not (declared_only and "properties" in schema):
        return []
    problems = []
    if isinstance(node, dict) and "properties" in schema:
        for key, value in node.items():
            if key not in schema["properties"]:
                if path == "" and key in ("apiVersion", "kind", "metadata"):
                    continue
                problems.append(f"{path}.{key}: unknown field")
            else:
                problems += _unknown_fields(value, schema["properties"][key], f"{path}.{key}",
                                            declared_only=declared_only)
    elif isinstance(node, dict) and isinstance(schema.get("additionalProperties"), dict):
        for key, value in node.items():
            problems += _unknown_fields(value, schema["additionalProperties"], f"{path}.{key}",
                                        declared_only=declared_only)
    elif isinstance(node, list) and "items" in schema:
        for i, value in enumerate(node):
            problems += _unknown_fields(value, schema["items"], f"{path}[{i}]", declared_only=declared_only)
    return problems


def crd_problems(obj: Obj, schema: Obj) -> list[str]:
    body = {k: v for k, v in obj.items() if k != "metadata"}
    problems = [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
                for e in jsonschema.Draft4Validator(schema).iter_errors(body)]
    # The sandbox's cert-manager schemas keep unknown fields under spec but declare every field cert-manager
    # has that the project uses: a field beside them is a typo (or one to add to certmanager-crds.yaml).
    declared_only = obj["apiVersion"].startswith("cert-manager.io/")
    return problems + _unknown_fields(obj, schema, "", declared_only=declared_only)


def prometheus_rule_problems(obj: Obj) -> list[str]:
    problems = [] if obj["apiVersion"] == "monitoring.coreos.com/v1" else [f"apiVersion {obj['apiVersion']}"]
    groups = (obj.get("spec") or {}).get("groups") or []
    if not groups:
        problems.append("spec.groups is empty")
    for group in groups:
        if not group.get("name") or not group.get("rules"):
            problems.append(f"group {group.get('name')!r}: name and rules are required")
        for rule in group.get("rules") or []:
            if not rule.get("expr") or ("alert" in rule) == ("record" in rule):
                problems.append(f"rule {rule}: expr and exactly one of alert/record are required")
    return problems


def check(obj: Obj, crd_schemas: dict[tuple[str, str], Obj]) -> tuple[str, list[str]]:
    """(how the object was checked, its problems)."""
    key = (obj["apiVersion"], obj["kind"])
    if key in crd_schemas:
        return "CRD schema", crd_problems(obj, crd_schemas[key])
    if key == ("monitoring.coreos.com/v1", "PrometheusRule"):
        return "required fields", prometheus_rule_problems(obj)
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return "unchecked", [f"no schema for {key}: add its CRD or a check to this test"]
    except kubernetes_validate.ValidationError as exc:
        return "kubernetes-validate", [f"{'.'.join(map(str, exc.path))}: {exc.message}"]
    return "kubernetes-validate", []


def schemas_for(docs: list[Obj]) -> dict[tuple[str, str], Obj]:
    cert_manager = [d for d in yaml.safe_load_all(CERT_MANAGER_CRDS.read_text()) if d]
    return _crd_schemas(cert_manager) | _crd_schemas([d for d in docs if d["kind"] == "CustomResourceDefinition"])


def test_every_object_is_valid(docs: list[Obj]) -> None:
    schemas = schemas_for(docs)
    how: dict[str, set[str]] = {}
    problems = []
    for obj in docs:
        method, found = check(obj, schemas)
        how.setdefault(method, set()).add(obj["kind"])
        problems += [f"{obj['kind']} {obj['metadata']['name']}: {p}" for p in found]
    assert not problems, "\n".join(problems)
    assert how["CRD schema"] == {"Certificate", "Issuer"}
    assert how["required fields"] == {"PrometheusRule"}
    assert {"Deployment", "Service", "PodDisruptionBudget", "CustomResourceDefinition", "ServiceAccount",
            "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"} <= how["kubernetes-validate"]


def test_the_validation_bites() -> None:
    docs = bundle.objects()
    schemas = schemas_for(docs)
    deployment = copy.deepcopy(bundle.one(docs, "Deployment", "opsmanager-operator"))
    deployment["spec"]["replica"] = 2
    assert check(deployment, schemas)[1], "a misspelled Deployment field passed"
    deployment = copy.deepcopy(bundle.one(docs, "Deployment", "opsmanager-operator"))
    deployment["spec"]["replicas"] = "two"
    assert check(deployment, schemas)[1]
    certificate = copy.deepcopy(bundle.one(docs, "Certificate", "opsmanager-webhook"))
    certificate["spec"]["dnsName"] = certificate["spec"].pop("dnsNames")
    assert check(certificate, schemas)[1], "a misspelled Certificate field passed"
    del certificate["spec"]["issuerRef"]
    assert any("issuerRef" in p for p in check(certificate, schemas)[1])
    rule = copy.deepcopy(bundle.one(docs, "PrometheusRule", "opsmanager-etcd-certificates"))
    del rule["spec"]["groups"][0]["rules"][0]["expr"]
    assert check(rule, schemas)[1]
    peering = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": "p"},
               "status": {"pod-a": {"priority": 1}}}
    assert check(peering, schemas) == ("CRD schema", [])
    assert check({"apiVersion": "example.com/v1", "kind": "Nothing", "metadata": {"name": "x"}}, schemas)[0] == "unchecked"


# --- what the issue asks for -----------------------------------------------------------------------------------


def test_the_install_has_every_part(docs: list[Obj]) -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("Namespace", bundle.NAMESPACE) in kinds
    for crd in ("etcds.opsmanager.dev", "etcdopsrequests.ops.opsmanager.dev", "clusterkopfpeerings.kopf.dev",
                "kopfpeerings.kopf.dev"):
        assert ("CustomResourceDefinition", crd) in kinds
    for part in (("ServiceAccount", bundle.OPERATOR_SA), ("ServiceAccount", bundle.WEBHOOK_SA),
                 ("Deployment", "opsmanager-operator"), ("Deployment", "opsmanager-webhook"),
                 ("PodDisruptionBudget", "opsmanager-webhook"), ("Service", webhook_config.SERVICE),
                 ("Service", "opsmanager-operator-metrics"), ("PrometheusRule", "opsmanager-etcd-certificates"),
                 ("ValidatingWebhookConfiguration", "opsmanager"), ("MutatingWebhookConfiguration", "opsmanager")):
        assert part in kinds
    namespaced = [d for d in docs if d["kind"] not in (
        "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
        "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")]
    assert {d["metadata"]["namespace"] for d in namespaced} == {bundle.NAMESPACE}


def _container(deployment: Obj) -> Obj:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def _port(container: Obj, name: str) -> int:
    return int(next(p["containerPort"] for p in container["ports"] if p["name"] == name))


def _flag(args: list[str], flag: str) -> str:
    values = [a.split("=", 1)[1] for a in args if a.startswith(flag + "=")]
    assert len(values) == 1, f"{flag}=... expected once in {args}"
    return values[0]


def _hardened(deployment: Obj) -> None:
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = _container(deployment)
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    resources = container["resources"]
    assert {"cpu", "memory"} <= set(resources["requests"]) and {"cpu", "memory"} <= set(resources["limits"])


def test_two_operator_replicas_one_active_by_peering(docs: list[Obj]) -> None:
    deployment = bundle.one(docs, "Deployment", "opsmanager-operator")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    container = _container(deployment)
    args = container["args"]
    assert args[0] == "run" and _flag(args, "--peering") == "opsmanager" and "--standalone" not in args
    assert 10 <= int(_flag(args, "--peering-lifetime")) <= 30  # a standby takes over within it after a crash
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"  # kopf's peer identity
    # liveness on the operator's --liveness endpoint; metrics on 8081, named `metrics`
    liveness = re.fullmatch(r"http://0\.0\.0\.0:(\d+)(/\S+)", _flag(args, "--liveness"))
    assert liveness is not None
    probe = container["livenessProbe"]["httpGet"]
    assert _port(container, probe["port"]) == int(liveness.group(1)) and probe["path"] == liveness.group(2)
    assert _flag(args, "--metrics-port") == "8081" and _port(container, "metrics") == 8081
    _hardened(deployment)
    metrics = bundle.one(docs, "Service", "opsmanager-operator-metrics")
    assert metrics["spec"]["ports"] == [{"name": "metrics", "port": 8081, "targetPort": "metrics"}]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert metrics["spec"]["selector"].items() <= labels.items()
    pdb = bundle.one(docs, "PodDisruptionBudget", "opsmanager-operator")
    assert pdb["spec"]["minAvailable"] == 1 and pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_two_webhook_replicas_behind_the_service_the_configurations_call(docs: list[Obj]) -> None:
    deployment = bundle.one(docs, "Deployment", "opsmanager-webhook")
    assert deployment["spec"]["replicas"] == 2
    _hardened(deployment)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    pdb = bundle.one(docs, "PodDisruptionBudget", "opsmanager-webhook")
    assert pdb["spec"]["minAvailable"] == 1 and pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    container = _container(deployment)
    args = container["args"]
    assert args[:2] == ["webhook", "serve"] and _flag(args, "--host") == "0.0.0.0"
    service = bundle.one(docs, "Service", webhook_config.SERVICE)
    namespace = service["metadata"]["namespace"]
    assert service["spec"]["selector"].items() <= labels.items()
    (port,) = service["spec"]["ports"]
    assert port["port"] == 443 and _port(container, port["targetPort"]) == int(_flag(args, "--port"))
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    # the serving certificate: cert-manager's Certificate, for the Service's names, mounted where --tls-* point
    certificate = bundle.one(docs, "Certificate", webhook_config.SERVICE)
    assert f"{webhook_config.SERVICE}.{namespace}.svc" in certificate["spec"]["dnsNames"]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    mount = next(m for m in container["volumeMounts"] if volumes[m["name"]].get("secret"))
    assert volumes[mount["name"]]["secret"]["secretName"] == certificate["spec"]["secretName"]
    assert _flag(args, "--tls-cert") == f"{mount['mountPath']}/tls.crt"
    assert _flag(args, "--tls-key") == f"{mount['mountPath']}/tls.key"
    issuer = bundle.one(docs, "Issuer", certificate["spec"]["issuerRef"]["name"])
    assert issuer["metadata"]["namespace"] == namespace
    # both configurations call that Service and get the CA from that Certificate
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        configuration = bundle.one(docs, kind, "opsmanager")
        assert configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
            f"{namespace}/{certificate['metadata']['name']}")
        for hook in configuration["webhooks"]:
            called = hook["clientConfig"]["service"]
            assert (called["name"], called["namespace"], called["port"]) == (
                service["metadata"]["name"], namespace, port["port"])


def test_every_image_comes_from_the_one_images_entry(docs: list[Obj]) -> None:
    (entry,) = yaml.safe_load((bundle.BASE / "kustomization.yaml").read_text())["images"]
    assert f"{entry['newName']}:{entry['newTag']}" == IMAGE
    for deployment in (d for d in docs if d["kind"] == "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        for container in pod["containers"] + pod.get("initContainers", []):
            assert container["image"] == IMAGE, deployment["metadata"]["name"]
    # the files name the image without a tag, so nothing but `images:` can set one
    for path in sorted(bundle.BASE.rglob("*.yaml")):
        for line in path.read_text().splitlines():
            if line.strip().startswith("image:"):
                assert line.split(":", 1)[1].strip() == entry["name"], f"{path}: {line.strip()}"


def test_every_service_account_of_a_deployment_exists_and_is_bound(docs: list[Obj]) -> None:
    for deployment in (d for d in docs if d["kind"] == "Deployment"):
        sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        namespace = deployment["metadata"]["namespace"]
        bundle.one(docs, "ServiceAccount", sa)
        assert bundle.bound_roles(docs, sa, namespace), f"ServiceAccount {sa} is bound to nothing"
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        bundle.one(docs, binding["roleRef"]["kind"], binding["roleRef"]["name"])
        for subject in binding["subjects"]:
            bundle.one(docs, subject["kind"], subject["name"])


def _rules(docs: list[Obj]) -> list[tuple[str, Obj]]:
    return [(f"{d['kind']} {d['metadata']['name']}", rule) for d in docs if d["kind"] in ("Role", "ClusterRole")
            for rule in d.get("rules", [])]


def test_no_wildcards_and_one_resource_per_rule(docs: list[Obj]) -> None:
    rules = _rules(docs)
    assert rules
    for where, rule in rules:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field] and all("*" not in v for v in rule[field]), (where, rule)
        assert "nonResourceURLs" not in rule, (where, rule)
        # one (group, resource) per rule: a test can take one away and see what breaks
        assert len(rule["apiGroups"]) == 1 and len(rule["resources"]) == 1, (where, rule)


def test_only_the_operator_reads_secrets_and_the_webhook_none(docs: list[Obj]) -> None:
    """The operator lists and watches Secrets for its label-selected cache (D14.1: Kubernetes cannot limit a rule
    to a label; the selector is applied by the API server, so it receives only its own); the webhook reads none
    (its certificate is a mounted volume)."""
    assert {("", "secrets", "list"), ("", "secrets", "watch")} <= bundle.granted(docs, bundle.OPERATOR_SA)
    assert not any(g == "" and r == "secrets" for g, r, _ in bundle.granted(docs, bundle.WEBHOOK_SA))


# The operator's rights, all of them: what deploy/operator.yaml granted before the bundle (each rule's reason is in
# deploy/base/operator/rbac.yaml), plus kopf peering, plus list/watch of every kind it reads (its caches, D14.1). A change here is a change of the product's RBAC: say why there.
OPERATOR_RIGHTS: dict[tuple[str, str], set[str]] = {
    ("opsmanager.dev", "etcds"): {"get", "list", "watch", "patch"},
    ("opsmanager.dev", "etcds/status"): {"get", "patch"},
    ("ops.opsmanager.dev", "etcdopsrequests"): {"get", "list", "watch", "create", "patch"},
    ("ops.opsmanager.dev", "etcdopsrequests/status"): {"get", "patch"},
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"get", "list", "watch"},
    ("", "namespaces"): {"get", "list", "watch"},
    ("kopf.dev", "clusterkopfpeerings"): {"get", "list", "watch", "create", "patch"},
    ("apps", "statefulsets"): {"get", "list", "watch", "create", "update", "patch", "delete"},
    ("", "services"): {"get", "list", "watch", "create", "patch", "delete"},
    ("policy", "poddisruptionbudgets"): {"get", "list", "watch", "create", "patch", "delete"},
    ("cert-manager.io", "certificates"): {"get", "list", "watch", "create", "patch", "delete"},
    ("cert-manager.io", "certificates/status"): {"get", "patch"},
    ("cert-manager.io", "issuers"): {"get", "list", "watch"},
    ("cert-manager.io", "clusterissuers"): {"get", "list", "watch"},
    ("", "nodes"): {"get", "list", "watch"},  # the node of a member pod that stopped serving (read, watched by name)
    ("", "secrets"): {"get", "list", "watch", "create", "update", "patch", "delete"},
    ("", "pods"): {"get", "list", "watch", "delete"},
    ("", "pods/eviction"): {"create"},
    ("", "pods/resize"): {"patch"},  # VerticalScaling InPlace
    ("", "persistentvolumeclaims"): {"get", "list", "watch", "patch", "delete"},  # VolumeExpansion, the scan
    ("", "persistentvolumes"): {"patch"},  # StorageMigration's oldPVReclaimPolicy: Retain
    ("", "nodes/proxy"): {"get"},  # VolumeExpansion: the kubelet's statfs of each data volume
    ("", "configmaps"): {"get", "create", "patch", "delete"},  # a Restore's plan for the members' init container
    ("", "events"): {"create", "patch"},  # core/v1 only: nothing posts events.k8s.io Events (test_install.py)
}


def test_the_operator_has_exactly_its_listed_rights() -> None:
    expected = {(g, r, v) for (g, r), verbs in OPERATOR_RIGHTS.items() for v in verbs}
    assert bundle.granted(bundle.objects(), bundle.OPERATOR_SA) == expected


def test_the_webhook_may_read_etcds_opsrequests_the_catalog_and_issuers_and_nothing_else(docs: list[Obj]) -> None:
    assert bundle.granted(docs, bundle.WEBHOOK_SA) == {
        (group, resource, verb)
        for group, resource in (("opsmanager.dev", "etcds"), ("ops.opsmanager.dev", "etcdopsrequests"),
                                ("catalog.opsmanager.dev", "etcdversions"), ("cert-manager.io", "issuers"),
                                ("cert-manager.io", "clusterissuers"))
        for verb in ("get", "list", "watch")
    } | {("storage.k8s.io", "storageclasses", "get")}


def test_the_operator_may_not_touch_the_catalog(docs: list[Obj]) -> None:
    # The catalog is admission's: the engine checks what it can run from its own version logic, so the operator's
    # account reads no EtcdVersion (least privilege), and nobody in the bundle may write one.
    assert not any(r == "etcdversions" for _, r, _ in bundle.granted(docs, bundle.OPERATOR_SA))
    assert not any(r == "etcdversions" and v not in ("get", "list", "watch")
                   for _, r, v in bundle.granted(docs, bundle.WEBHOOK_SA))


def test_the_catalog_is_its_own_kustomization_of_cluster_scoped_objects() -> None:
    docs = bundle.render(bundle.DEPLOY / "catalog")
    assert docs and {d["kind"] for d in docs} == {"EtcdVersion"}
    assert all("namespace" not in d["metadata"] for d in docs)
    crds = [d for d in bundle.objects() if d["kind"] == "CustomResourceDefinition"]
    assert "etcdversions.catalog.opsmanager.dev" in {d["metadata"]["name"] for d in crds}


def test_cluster_roles_hold_cluster_scoped_needs_apart(docs: list[Obj]) -> None:
    cluster = bundle.one(docs, "ClusterRole", "opsmanager-operator-cluster")
    assert {r for _, r, _ in bundle.grants([cluster])} <= CLUSTER_SCOPED
    for role in bundle.bound_roles(docs, bundle.OPERATOR_SA):
        if role is not cluster:
            assert not {r for _, r, _ in bundle.grants([role])} & CLUSTER_SCOPED, role["metadata"]["name"]


def test_the_operator_may_peer(docs: list[Obj]) -> None:
    rights = bundle.granted(docs, bundle.OPERATOR_SA)
    clusterwide = "--all-namespaces" in _container(bundle.one(docs, "Deployment", "opsmanager-operator"))["args"]
    peering = "clusterkopfpeerings" if clusterwide else "kopfpeerings"
    assert {("kopf.dev", peering, v) for v in ("get", "list", "watch", "create", "patch")} <= rights
    other = "kopfpeerings" if clusterwide else "clusterkopfpeerings"
    assert not any(r == other for _, r, _ in rights)


# --- the single-namespace overlay ------------------------------------------------------------------------------


def test_single_namespace_watches_its_own_namespace_under_roles() -> None:
    base = bundle.objects(bundle.DEPLOY)
    docs = bundle.objects(bundle.SINGLE_NAMESPACE)
    container = _container(bundle.one(docs, "Deployment", "opsmanager-operator"))
    assert "--namespace=$(POD_NAMESPACE)" in container["args"] and "--all-namespaces" not in container["args"]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    # the operator's namespaced rights through a Role bound in the namespace; cluster-wide only what exists only
    # cluster-wide. (The webhook keeps its read-only ClusterRole: its watch cache watches across namespaces.)
    roles = bundle.bound_roles(docs, bundle.OPERATOR_SA)
    assert {r["kind"] for r in roles} == {"ClusterRole", "Role"}
    for role in roles:
        if role["kind"] == "ClusterRole":
            assert {r for _, r, _ in bundle.grants([role])} <= CLUSTER_SCOPED, role["metadata"]["name"]
        else:
            assert role["metadata"]["namespace"] == bundle.NAMESPACE
    assert bundle.granted(docs, bundle.WEBHOOK_SA) == bundle.granted(base, bundle.WEBHOOK_SA)
    peering = {("kopf.dev", "clusterkopfpeerings"): ("kopf.dev", "kopfpeerings")}
    assert {(*peering.get((g, r), (g, r)), v) for g, r, v in bundle.granted(base, bundle.OPERATOR_SA)} == (
        bundle.granted(docs, bundle.OPERATOR_SA))
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        for hook in bundle.one(docs, kind, "opsmanager")["webhooks"]:
            assert hook["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": bundle.NAMESPACE}}


def test_single_namespace_in_another_namespace_keeps_every_name_in_step(tmp_path: Path) -> None:
    for part in ("deploy", "crds", "webhooks"):
        shutil.copytree(bundle.ROOT / part, tmp_path / part)
    overlay = tmp_path / "deploy" / "overlays" / "single-namespace"
    kustomization = overlay / "kustomization.yaml"
    text = kustomization.read_text()
    assert f"\nnamespace: {bundle.NAMESPACE}\n" in text
    kustomization.write_text(text.replace(f"\nnamespace: {bundle.NAMESPACE}\n", "\nnamespace: team-a\n"))
    docs = bundle.render(overlay)
    assert bundle.NAMESPACE not in yaml.safe_dump_all(docs)
    certificate = bundle.one(docs, "Certificate", webhook_config.SERVICE)
    assert "opsmanager-webhook.team-a.svc" in certificate["spec"]["dnsNames"]
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        configuration = bundle.one(docs, kind, "opsmanager")
        assert configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "team-a/opsmanager-webhook"
        for hook in configuration["webhooks"]:
            assert hook["clientConfig"]["service"]["namespace"] == "team-a"
            assert hook["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "team-a"}
    assert bundle.granted(docs, bundle.OPERATOR_SA, "team-a")
