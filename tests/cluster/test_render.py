"""The renderer, one test per decision: exact flags, mounts, names and the transition wirings."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import naming, render


def make_db(tls: bool | dict[str, Any] = False, **spec: Any) -> etcd_api.Etcd:
    body: dict[str, Any] = {"version": "3.5.1", **spec}
    if tls:
        body["tls"] = tls if isinstance(tls, dict) else {"issuerRef": {"name": "ca", "kind": "Issuer"}}
    return etcd_api.Etcd.model_validate(
        {"metadata": {"name": "db", "namespace": "ns", "uid": "u-1"}, "spec": body}
    )


def sts_of(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    return next(m for m in manifests if m["kind"] == "StatefulSet")


def container(sts: dict[str, Any]) -> dict[str, Any]:
    return sts["spec"]["template"]["spec"]["containers"][0]


def args_of(db: etcd_api.Etcd, wiring: render.Wiring | None = None) -> list[str]:
    return container(render.render_statefulset(db, wiring))["args"]


def test_statefulset_is_parallel_and_on_delete() -> None:
    sts = render.render_statefulset(make_db())
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert sts["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert sts["spec"]["serviceName"] == "db-pods"
    assert sts["metadata"]["ownerReferences"][0]["uid"] == "u-1"


def test_plaintext_flags_exactly() -> None:
    assert args_of(make_db()) == [
        "--name=$(POD_NAME)",
        "--data-dir=/var/lib/etcd/data",
        "--listen-client-urls=http://0.0.0.0:2379",
        "--advertise-client-urls=http://$(POD_NAME).db-pods.ns.svc:2379",
        "--listen-peer-urls=http://0.0.0.0:2380",
        "--initial-advertise-peer-urls=http://$(POD_NAME).db-pods.ns.svc:2380",
        "--initial-cluster=db-0=http://db-0.db-pods.ns.svc:2380,db-1=http://db-1.db-pods.ns.svc:2380,"
        "db-2=http://db-2.db-pods.ns.svc:2380",
        "--initial-cluster-state=new",
        "--initial-cluster-token=ns-db",
        "--listen-metrics-urls=http://0.0.0.0:2381",
    ]


def test_tls_flags_point_at_the_trust_bundle_never_a_leaf_ca() -> None:
    args = args_of(make_db(tls=True))
    assert "--listen-client-urls=https://0.0.0.0:2379" in args
    assert "--listen-peer-urls=https://0.0.0.0:2382" in args
    assert "--initial-advertise-peer-urls=https://$(POD_NAME).db-pods.ns.svc:2382" in args
    assert "--trusted-ca-file=/var/run/etcd/tls/ca/ca.crt" in args
    assert "--peer-trusted-ca-file=/var/run/etcd/tls/ca/ca.crt" in args
    assert "--cert-file=/var/run/etcd/tls/server/tls.crt" in args
    assert "--peer-key-file=/var/run/etcd/tls/peer/tls.key" in args
    assert "--client-cert-auth=true" in args and "--peer-client-cert-auth=true" in args
    assert not any("server/ca.crt" in a or "peer/ca.crt" in a for a in args)


def test_tls_mounts_and_volumes() -> None:
    sts = render.render_statefulset(make_db(tls=True))
    mounts = {m["name"]: m["mountPath"] for m in container(sts)["volumeMounts"]}
    assert mounts == {
        "data": "/var/lib/etcd",
        "server-tls": "/var/run/etcd/tls/server",
        "peer-tls": "/var/run/etcd/tls/peer",
        "ca-bundle": "/var/run/etcd/tls/ca",
        "etcdstop": "/opt/opsmanager",
    }
    secrets = {v["name"]: v["secret"]["secretName"] for v in sts["spec"]["template"]["spec"]["volumes"]
               if "secret" in v}
    assert secrets == {"server-tls": "db-server-cert", "peer-tls": "db-peer-cert", "ca-bundle": "db-ca-bundle"}


def test_secret_name_override_is_mounted() -> None:
    db = make_db(tls=True)
    db.spec.tls.certificates = [etcd_api.common.CertificateSpec(alias="server", secret_name="mine")]
    sts = render.render_statefulset(db)
    secrets = {v["name"]: v["secret"]["secretName"] for v in sts["spec"]["template"]["spec"]["volumes"]
               if "secret" in v}
    assert secrets["server-tls"] == "mine"
    # the override names the mounted Secret; the Certificate still writes its source
    server = next(c for c in render.render_certificates(db) if c["metadata"]["name"] == "db-server")
    assert server["spec"]["secretName"] == "db-server-issued"


def test_probes_use_plain_http_metrics_port_whatever_the_tls_mode() -> None:
    for db in (make_db(), make_db(tls=True)):
        probe = container(render.render_statefulset(db))["readinessProbe"]
        assert probe["httpGet"] == {"path": "/health", "port": 2381, "scheme": "HTTP"}  # 3.5.1: no /readyz
        assert "--listen-metrics-urls=http://0.0.0.0:2381" in args_of(db)


def test_an_etcd_with_readyz_is_probed_there_so_a_learner_is_not_ready() -> None:
    for version, path in (("3.5.1", "/health"), ("3.5.35", "/readyz"), ("3.6.16", "/readyz")):
        db = make_db()
        db.spec.version = version
        assert container(render.render_statefulset(db))["readinessProbe"]["httpGet"]["path"] == path, version


def test_members_join_the_existing_cluster_once_the_membership_was_changed() -> None:
    db = make_db()
    assert "--initial-cluster-state=new" in args_of(db)
    db.status = etcd_api.EtcdStatus(initialClusterState="existing")
    assert "--initial-cluster-state=existing" in args_of(db)


def test_peer_certificates_have_both_usages_and_both_dns_suffixes() -> None:
    db = make_db(tls=True)
    certs = {c["metadata"]["name"]: c["spec"] for c in render.render_certificates(db)}
    assert set(certs) == {"db-server", "db-peer", "db-client"}
    peer = certs["db-peer"]
    assert {"server auth", "client auth"} <= set(peer["usages"])
    assert "*.db-pods.ns.svc" in peer["dnsNames"] and "*.db-pods.ns.svc.cluster.local" in peer["dnsNames"]
    # cert-manager writes the source; members mount db-peer-cert, which only the operator writes (the gate)
    assert peer["secretName"] == "db-peer-issued"
    assert peer["secretTemplate"] == {"labels": {"opsmanager.dev/source-of": "db", "app.kubernetes.io/name": "etcd",
                                                 "app.kubernetes.io/instance": "db",
                                                 "app.kubernetes.io/managed-by": "opsmanager"}}
    assert peer["issuerRef"] == {"group": "cert-manager.io", "kind": "Issuer", "name": "ca"}
    assert {"server auth", "client auth"} <= set(certs["db-server"]["usages"])
    client = certs["db-client"]
    assert client["commonName"] == "root" and client["usages"][-1] == "client auth"
    assert "dnsNames" not in client


def test_user_certificate_fields_merge_with_defaults() -> None:
    db = make_db(tls=True)
    db.spec.tls.certificates = [etcd_api.common.CertificateSpec.model_validate(
        {"alias": "server", "dnsNames": ["etcd.example.com"], "subject": {"organizations": ["acme"]},
         "duration": "720h", "privateKey": {"encoding": "PKCS8"}})]
    server = render.render_certificate(db, db.spec.tls, "server")["spec"]
    assert server["dnsNames"][0] == "db" and server["dnsNames"][-1] == "etcd.example.com"
    assert server["subject"] == {"organizations": ["acme"]}
    assert server["duration"] == "720h" and server["privateKey"]["encoding"] == "PKCS8"


def test_dual_wiring_for_adding_tls() -> None:
    db = make_db(tls=True)
    args = args_of(db, render.Wiring.dual(db.spec.tls, advertised_peer_scheme="http"))
    assert "--listen-client-urls=http://0.0.0.0:2379,https://0.0.0.0:2379" in args
    assert "--advertise-client-urls=http://$(POD_NAME).db-pods.ns.svc:2379,https://$(POD_NAME).db-pods.ns.svc:2379" \
        in args
    assert "--listen-peer-urls=http://0.0.0.0:2380,https://0.0.0.0:2382" in args
    assert "--initial-advertise-peer-urls=http://$(POD_NAME).db-pods.ns.svc:2380" in args
    assert "--peer-cert-file=/var/run/etcd/tls/peer/tls.crt" in args


def test_wiring_rejects_impossible_states() -> None:
    with pytest.raises(ValueError, match="no TLS certificates"):
        render.Wiring(tls=None, client_schemes=("https",), peer_schemes=("http",), advertised_peer_scheme="http")
    with pytest.raises(ValueError, match="advertised_peer_scheme"):
        render.Wiring(tls=None, client_schemes=("http",), peer_schemes=("http",), advertised_peer_scheme="https")


def test_services_pdb_and_names() -> None:
    manifests = render.render(make_db(tls=True), trust_bundle=b"PEM")
    kinds = [(m["kind"], m["metadata"]["name"]) for m in manifests]
    assert kinds == [
        ("Certificate", "db-server"), ("Certificate", "db-client"), ("Certificate", "db-peer"),
        ("Secret", "db-ca-bundle"), ("Service", "db-pods"), ("Service", "db"),
        ("PodDisruptionBudget", "db"), ("StatefulSet", "db"),
    ]
    headless = manifests[4]["spec"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True
    assert manifests[6]["spec"]["maxUnavailable"] == 1


def test_storage_types_and_halt() -> None:
    durable = render.render_statefulset(make_db())
    assert durable["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    ephemeral = render.render_statefulset(make_db(storageType="Ephemeral"))
    assert "volumeClaimTemplates" not in ephemeral["spec"]
    assert {"name": "data", "emptyDir": {}} in ephemeral["spec"]["template"]["spec"]["volumes"]
    assert render.render_statefulset(make_db(halted=True))["spec"]["replicas"] == 0


def test_template_annotations_carry_the_restart_token() -> None:
    sts = render.render_statefulset(make_db(), template_annotations={naming.ANNOTATION_RESTARTED_AT: "x/1"})
    assert sts["spec"]["template"]["metadata"]["annotations"] == {naming.ANNOTATION_RESTARTED_AT: "x/1"}


def test_ca_probe_certificate_is_a_short_client_certificate_of_the_issuer_owned_by_the_etcd() -> None:
    db = make_db(tls=True)
    issuer = render.issuer_of(db.spec.tls, "peer")  # type: ignore[arg-type]
    assert issuer is not None
    probe = render.render_ca_probe(db, 1, issuer)
    assert probe["metadata"]["name"] == probe["spec"]["secretName"] == naming.ca_probe("db", 1) == "db-ca-probe-1"
    assert probe["metadata"]["ownerReferences"][0]["uid"] == db.metadata.uid
    assert probe["spec"]["issuerRef"] == {"group": issuer.api_group, "kind": issuer.kind, "name": issuer.name}
    assert probe["spec"]["usages"] == ["digital signature", "client auth"] and "dnsNames" not in probe["spec"]


def test_a_certificate_issuer_overrides_the_tls_issuer() -> None:
    db = make_db(tls={"issuerRef": {"name": "ca", "kind": "Issuer"}, "certificates": [
        {"alias": "client", "issuerRef": {"apiGroup": "cert-manager.io", "kind": "ClusterIssuer", "name": "other"}}]})
    assert db.spec.tls is not None
    assert render.issuer_of(db.spec.tls, "client").name == "other"  # type: ignore[union-attr]
    assert render.issuer_of(db.spec.tls, "server") == db.spec.tls.issuer_ref
    assert render.render_certificate(db, db.spec.tls, "client")["spec"]["issuerRef"]["name"] == "other"


def test_the_recovery_wiring_runs_some_ordinals_with_their_own_initial_cluster_and_the_force_flag() -> None:
    from opsmanager.api import etcd as etcd_api
    from opsmanager.cluster import render as r

    db = etcd_api.Etcd.model_validate({"metadata": {"name": "db", "namespace": "ns"},
                                       "spec": {"version": "3.5.35", "replicas": 3}})
    w = dataclasses.replace(r.Wiring.steady(None), ordinals=(1, 2), initial_members=("db-1", "db-2"),
                            force_new_cluster=True)
    sts = r.render_statefulset(db, w)
    assert sts["spec"]["replicas"] == 2 and sts["spec"]["ordinals"] == {"start": 1}
    args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--force-new-cluster" in args
    assert "--initial-cluster=db-1=http://db-1.db-pods.ns.svc:2380,db-2=http://db-2.db-pods.ns.svc:2380" in args
    steady = r.render_statefulset(db)
    assert steady["spec"]["replicas"] == 3 and "ordinals" not in steady["spec"]
    assert "--force-new-cluster" not in steady["spec"]["template"]["spec"]["containers"][0]["args"]


BACKUP = {"schedule": "0 3 * * *", "retention": 3,
          "destination": {"endpoint": "http://127.0.0.1:1", "bucket": "snaps", "credentialsSecret": {"name": "s3"}}}


def restore_init(db: etcd_api.Etcd) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    pod = render.render_statefulset(db)["spec"]["template"]["spec"]
    init = next(c for c in pod.get("initContainers", []) if c["name"] == naming.RESTORE_CONTAINER)
    return init, pod["volumes"]


def test_the_restore_init_container_mounts_the_auth_secret_only_with_authentication() -> None:
    init, volumes = restore_init(make_db(backup=BACKUP, authSecret={"name": "db-auth"}))
    assert {"name": "restore-auth", "secret": {"secretName": "db-auth", "optional": True}} in volumes
    assert {"name": "restore-auth", "mountPath": naming.RESTORE_AUTH_MOUNT, "readOnly": True} in init["volumeMounts"]
    assert all("password" not in repr(e).lower() for e in init["env"])  # a file, never an environment variable
    init, volumes = restore_init(make_db(backup=BACKUP))
    assert all(v["name"] != "restore-auth" for v in volumes)
    assert all(m["name"] != "restore-auth" for m in init["volumeMounts"])


def test_members_prefer_one_node_each_by_default() -> None:
    pod = render.render_statefulset(make_db())["spec"]["template"]["spec"]
    term = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    # the term selects exactly this Etcd's members: another Etcd's pods do not repel them
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == naming.selector_labels("db")
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in pod["affinity"]["podAntiAffinity"]
    assert "nodeSelector" not in pod and "tolerations" not in pod


def test_the_pod_templates_affinity_node_selector_and_tolerations_are_used_as_given() -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}]}}}
    tolerations = [{"key": "dedicated", "operator": "Equal", "value": "etcd", "effect": "NoSchedule"}]
    db = make_db(podTemplate={"spec": {"affinity": affinity, "nodeSelector": {"zone": "a"},
                                       "tolerations": tolerations}})
    pod = render.render_statefulset(db)["spec"]["template"]["spec"]
    assert pod["affinity"] == affinity  # no anti-affinity added behind the user's back
    assert pod["nodeSelector"] == {"zone": "a"}
    assert pod["tolerations"] == tolerations


@pytest.mark.parametrize("backup", [None, BACKUP])
def test_etcd_runs_under_etcdstop_which_the_first_init_container_copies_from_the_operator_image(
        backup: dict[str, Any] | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(render.OPERATOR_IMAGE_ENV, "registry.example/opsmanager:1.2.3")
    pod = render.render_statefulset(make_db(**({"backup": backup} if backup else {})))["spec"]["template"]["spec"]
    etcd = pod["containers"][0]
    assert etcd["command"] == ["/opt/opsmanager/etcdstop", "--", "etcd"]
    assert etcd["args"][0] == "--name=$(POD_NAME)"  # etcd's own flags, unchanged, after the "--"
    assert {"name": "etcdstop", "mountPath": "/opt/opsmanager", "readOnly": True} in etcd["volumeMounts"]
    first = pod["initContainers"][0]
    assert first == {"name": "etcdstop", "image": "registry.example/opsmanager:1.2.3",
                     "args": ["install-etcdstop", "--to=/opt/opsmanager"],
                     "volumeMounts": [{"name": "etcdstop", "mountPath": "/opt/opsmanager"}]}
    assert {"name": "etcdstop", "emptyDir": {}} in pod["volumes"]
    assert [c["name"] for c in pod["initContainers"]] == ["etcdstop"] + (["restore"] if backup else [])


def test_the_etcdstop_init_container_takes_etcds_resources_so_a_guaranteed_pod_stays_guaranteed() -> None:
    limits = {"cpu": "500m", "memory": "512Mi"}
    db = make_db(podTemplate={"spec": {"resources": {"requests": limits, "limits": limits}}})
    pod = render.render_statefulset(db)["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"] == {"requests": limits, "limits": limits}
    assert pod["initContainers"][0]["resources"] == {"requests": limits, "limits": limits}
    assert "resources" not in render.render_statefulset(make_db())["spec"]["template"]["spec"]["initContainers"][0]
