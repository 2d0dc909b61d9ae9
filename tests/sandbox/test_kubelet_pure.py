"""The kubelet's pure parts, without processes: container env/argv rules, pod-local addresses, pod DNS
(hosts file content and order), the ``..data`` atomic writer, pod IP allocation."""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path

import pytest

from opsmanager_sandbox import addresses, containers, dns, process, volumes

POD = {
    "metadata": {"name": "etcd-1", "namespace": "prod", "uid": "u-1", "labels": {"app": "etcd"},
                 "annotations": {"a": "b"}},
    "spec": {"hostname": "etcd-1", "subdomain": "etcd"},
}


def _no_secret(ns: str, name: str) -> None:
    return None


def test_expansion_follows_kubernetes_rules() -> None:
    env = {"A": "x", "B": "y"}
    assert containers.expand("$(A)-$(B)", env) == "x-y"
    assert containers.expand("$(MISSING)", env) == "$(MISSING)"
    assert containers.expand("$$(A)", env) == "$(A)"
    assert containers.expand("cost $5 $(A", env) == "cost $5 $(A"


def test_env_downward_api_and_expansion_in_definition_order() -> None:
    ctr = {"name": "etcd", "env": [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "LBL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "URL", "value": "http://$(POD_NAME).etcd.$(NS).svc:2379,$(LATER)"},
        {"name": "LATER", "value": "z"},
        {"name": "LISTEN", "value": "http://0.0.0.0:2379"},
    ]}
    env = containers.resolve_env(ctr, POD, pod_ip="127.9.1.2", secrets=_no_secret, configmaps=_no_secret)
    assert env["POD_NAME"] == "etcd-1" and env["NS"] == "prod" and env["IP"] == "127.9.1.2"
    assert env["LBL"] == "etcd"
    assert env["URL"] == "http://etcd-1.etcd.prod.svc:2379,$(LATER)"  # LATER defined after: not expanded
    assert env["LISTEN"] == "http://127.9.1.2:2379"
    assert env["HOSTNAME"] == "etcd-1"


def test_env_secret_refs_missing_secret_is_a_config_error() -> None:
    ctr = {"name": "c", "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}
    with pytest.raises(containers.ContainerConfigError, match='secret "s" not found'):
        containers.resolve_env(ctr, POD, pod_ip="127.9.1.2", secrets=_no_secret, configmaps=_no_secret)
    env = containers.resolve_env(ctr, POD, pod_ip="127.9.1.2", secrets=lambda ns, n: {"k": b"v"},
                                 configmaps=_no_secret)
    assert env["P"] == "v"
    optional = {"name": "c", "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k",
                                                                                  "optional": True}}}]}
    assert "P" not in containers.resolve_env(optional, POD, pod_ip="1", secrets=_no_secret, configmaps=_no_secret)


def test_argv_uses_command_args_and_image_cmd_like_a_container_runtime() -> None:
    env = {"N": "etcd-0"}
    assert containers.build_argv({"command": ["etcd"], "args": ["--name=$(N)"]}, env, pod_ip="127.1.1.1") == [
        "etcd", "--name=etcd-0"]
    assert containers.build_argv({}, env, pod_ip="127.1.1.1") == ["/usr/local/bin/etcd"]
    # args without command replace the image CMD (the etcd images have no ENTRYPOINT)
    assert containers.build_argv({"args": ["etcd", "--x"]}, env, pod_ip="1") == ["etcd", "--x"]
    assert containers.build_argv({"command": ["etcd", "--listen-client-urls=http://0.0.0.0:2379,"
                                              "http://127.0.0.1:2379", "--listen-peer-urls=https://[::]:2380"]},
                                 env, pod_ip="127.4.0.9") == [
        "etcd", "--listen-client-urls=http://127.4.0.9:2379,http://127.4.0.9:2379",
        "--listen-peer-urls=https://127.4.0.9:2380"]


def test_pod_local_rewrite_leaves_other_addresses_alone() -> None:
    assert containers.pod_local("10.0.0.0 127.0.0.12 127.0.0.1.5 a0.0.0.0", "X") == \
        "10.0.0.0 127.0.0.12 127.0.0.1.5 a0.0.0.0"
    assert containers.pod_local("0.0.0.0:1 127.0.0.1 [::1]:2", "X") == "X:1 X X:2"


@pytest.mark.parametrize("image,ok", [
    ("registry.k8s.io/etcd:3.5.1-0", True), ("quay.io/coreos/etcd:v3.5.1", True),
    ("gcr.io/etcd-development/etcd:v3.5.1", True), ("busybox:1.36", False), ("etcd-io/nginx:1", False),
])
def test_only_etcd_images_run(image: str, ok: bool) -> None:
    assert containers.is_etcd_image(image) is ok


@pytest.mark.parametrize("image,ok", [
    ("opsmanager", True), ("opsmanager:0.1.0", True), ("ghcr.io/example/opsmanager@sha256:ab", True),
    ("opsmanager-tools:1", False), ("etcd:3.5", False), ("example.com/opsmanager/etcd:1", False),
])
def test_the_operator_image_is_recognised_by_its_repository_name(image: str, ok: bool) -> None:
    assert containers.is_product_image(image) is ok


def test_the_operator_image_runs_this_python_with_its_cmd_and_the_containers_args() -> None:
    entrypoint = process.product_entrypoint()
    assert entrypoint == [sys.executable, "-m", "opsmanager"]
    env = {"POD_IP": "127.0.0.9"}
    assert containers.build_argv({"args": ["run", "--metrics-address=$(POD_IP)"]}, env, pod_ip="127.0.0.9",
                                 image_entrypoint=entrypoint, image_cmd=containers.PRODUCT_IMAGE_CMD) == \
        [*entrypoint, "run", "--metrics-address=127.0.0.9"]
    assert containers.build_argv({}, env, pod_ip="127.0.0.9", image_entrypoint=entrypoint,
                                 image_cmd=containers.PRODUCT_IMAGE_CMD) == [*entrypoint, "run"]
    # The "image" is this installation: the interpreter's prefixes and the package's directory, none inside another.
    dirs = process.product_image_dirs()
    assert any(sys.executable.startswith(d) or os.path.realpath(sys.executable).startswith(d) for d in dirs)
    package = str(Path(containers.__file__).resolve().parents[2])
    assert any(package == d or package.startswith(d + "/") for d in dirs)
    assert not any(a != b and a.startswith(b + "/") for a in dirs for b in dirs)


def test_containers_get_home_as_the_runtime_sets_it() -> None:
    env = containers.resolve_env({"env": [{"name": "A", "value": "$(HOME)x"}]}, {"metadata": {"name": "p"}},
                                 pod_ip="127.0.0.2", secrets=lambda ns, n: None, configmaps=lambda ns, n: None)
    assert env["HOME"] == "/" and env["A"] == "/x"


def _records() -> tuple[list[dns.PodRecord], list[dns.ServiceRecord]]:
    lbl = {"app": "etcd"}
    pods = [dns.PodRecord("prod", f"etcd-{i}", f"127.9.1.{i + 1}", f"etcd-{i}", "etcd", lbl, ready=i != 2)
            for i in range(3)]
    return pods, [dns.ServiceRecord("prod", "etcd", lbl, publish_not_ready=True)]


def test_hosts_file_ptr_is_the_fqdn_and_peers_resolve() -> None:
    pods, svcs = _records()
    text = dns.hosts_file(pods[0], pods, svcs)
    lines = [ln.split("\t") for ln in text.splitlines() if not ln.startswith("#")]
    by_ip: dict[str, list[str]] = {}
    for ip, names in lines:
        by_ip.setdefault(ip, []).extend(names.split())
    # the first name listed for a pod IP (what a reverse lookup returns first) is the FQDN
    for i in range(3):
        assert by_ip[f"127.9.1.{i + 1}"][0] == f"etcd-{i}.etcd.prod.svc.cluster.local"
        assert f"etcd-{i}.etcd.prod.svc" in by_ip[f"127.9.1.{i + 1}"]
        assert f"etcd-{i}.etcd" in by_ip[f"127.9.1.{i + 1}"]
    assert "localhost" in by_ip["127.9.1.1"] and "localhost" not in by_ip["127.9.1.2"]
    assert "etcd.prod.svc.cluster.local" in by_ip["127.9.1.3"]  # service name -> every endpoint
    # 127.0.0.1 (the source of every peer connection) maps to the FQDNs only, on the last line
    assert lines[-1][0] == "127.0.0.1"
    assert lines[-1][1].split() == [f"etcd-{i}.etcd.prod.svc.cluster.local" for i in range(3)]


def test_hosts_file_publishes_only_ready_pods_without_publish_not_ready() -> None:
    pods, _ = _records()
    svcs = [dns.ServiceRecord("prod", "etcd", {"app": "etcd"}, publish_not_ready=False)]
    text = dns.hosts_file(pods[0], pods, svcs)
    assert "etcd-1.etcd.prod.svc" in text
    assert "etcd-2.etcd" not in text  # not ready
    # no Service named like the subdomain: no pod records at all (only the pod's own names)
    alone = dns.hosts_file(pods[0], pods, [])
    assert "etcd-1" not in alone and alone.count("etcd-0.etcd.prod.svc.cluster.local") == 1


def test_hosts_file_other_namespace_has_no_short_forms() -> None:
    pods, svcs = _records()
    viewer = dns.PodRecord("other", "client", "127.9.2.1")
    text = dns.hosts_file(viewer, pods, svcs)
    assert "etcd-0.etcd.prod.svc" in text and "\tetcd-0.etcd\n" not in text and " etcd-0.etcd " not in text
    assert "127.0.0.1" not in text  # no subdomain, no peers


def test_hosts_file_layout_is_exact_with_shared_ips_and_other_namespaces() -> None:
    """The whole file, byte for byte (what the kubelet wrote before the per-namespace parts were shared): the
    viewer's own line first, merged with the names of every published pod on its IP (a terminating pod and its
    replacement share one IP while a publishNotReadyAddresses Service publishes both), then the other published
    IPs, the Services' endpoint lines, and the 127.0.0.1 line of the viewer's subdomain last."""
    lbl = {"app": "etcd"}
    pods = [dns.PodRecord("prod", "etcd-0", "127.9.1.1", "etcd-0", "etcd", lbl, ready=True),
            dns.PodRecord("prod", "etcd-1", "127.9.1.2", "etcd-1", "etcd", lbl, ready=True, terminating=True),
            dns.PodRecord("prod", "etcd-1b", "127.9.1.2", "etcd-1", "etcd", lbl, ready=False),
            dns.PodRecord("dev", "etcd-0", "127.9.2.1", "etcd-0", "etcd", lbl, ready=True)]
    svcs = [dns.ServiceRecord("prod", "etcd", lbl, publish_not_ready=True),
            dns.ServiceRecord("prod", "client", lbl), dns.ServiceRecord("dev", "etcd", lbl)]
    head = ("# Kubernetes-managed hosts file (opsmanager sandbox): pod and Service DNS records of the cluster.\n"
            "# Rewritten in place by the sandbox kubelet; see sandbox/opsmanager_sandbox/dns.py.\n")
    table = dns.HostsTable(pods, svcs)
    assert table.for_pod(pods[1]) == head + (
        "127.9.1.2\tetcd-1.etcd.prod.svc.cluster.local etcd-1 localhost etcd-1.etcd.prod.svc etcd-1.etcd.prod "
        "etcd-1.etcd\n"
        "127.9.2.1\tetcd-0.etcd.dev.svc.cluster.local etcd-0.etcd.dev.svc etcd-0.etcd.dev\n"
        "127.9.1.1\tetcd-0.etcd.prod.svc.cluster.local etcd-0.etcd.prod.svc etcd-0.etcd.prod etcd-0.etcd\n"
        "127.9.2.1\tetcd.dev.svc.cluster.local etcd.dev.svc etcd.dev\n"
        "127.9.1.1\tclient.prod.svc.cluster.local client.prod.svc client.prod client\n"
        "127.9.1.1\tetcd.prod.svc.cluster.local etcd.prod.svc etcd.prod etcd\n"
        "127.9.1.2\tetcd.prod.svc.cluster.local etcd.prod.svc etcd.prod etcd\n"
        "127.9.1.2\tetcd.prod.svc.cluster.local etcd.prod.svc etcd.prod etcd\n"
        "# peer connections between sandbox pods come from 127.0.0.1 (shared loopback): reverse-map it\n"
        "127.0.0.1\tetcd-0.etcd.prod.svc.cluster.local etcd-1.etcd.prod.svc.cluster.local "
        "etcd-1.etcd.prod.svc.cluster.local\n")
    assert table.for_pod(pods[3]) == head + (
        "127.9.2.1\tetcd-0.etcd.dev.svc.cluster.local etcd-0 localhost etcd-0.etcd.dev.svc etcd-0.etcd.dev "
        "etcd-0.etcd\n"
        "127.9.1.1\tetcd-0.etcd.prod.svc.cluster.local etcd-0.etcd.prod.svc etcd-0.etcd.prod\n"
        "127.9.1.2\tetcd-1.etcd.prod.svc.cluster.local etcd-1.etcd.prod.svc etcd-1.etcd.prod\n"
        "127.9.2.1\tetcd.dev.svc.cluster.local etcd.dev.svc etcd.dev etcd\n"
        "127.9.1.1\tclient.prod.svc.cluster.local client.prod.svc client.prod\n"
        "127.9.1.1\tetcd.prod.svc.cluster.local etcd.prod.svc etcd.prod\n"
        "127.9.1.2\tetcd.prod.svc.cluster.local etcd.prod.svc etcd.prod\n"
        "127.9.1.2\tetcd.prod.svc.cluster.local etcd.prod.svc etcd.prod\n"
        "# peer connections between sandbox pods come from 127.0.0.1 (shared loopback): reverse-map it\n"
        "127.0.0.1\tetcd-0.etcd.dev.svc.cluster.local\n")
    # the same table answers again from its per-namespace parts; a fresh table agrees
    assert table.for_pod(pods[0]) == dns.HostsTable(pods, svcs).for_pod(pods[0]) == dns.hosts_file(pods[0], pods, svcs)


async def test_dns_pass_writes_changed_files_and_skips_unchanged_ones(tmp_path: Path) -> None:
    """A pass rebuilds a pod's file only when the published records, the Services' endpoints or the pod's own
    names changed; the others are not even computed (``dns_files_built``), and a file is not rewritten when its
    text is what was written last."""
    from opsmanager_sandbox import kubelet

    with addresses.PodAddresses() as addrs:
        host = kubelet.StandaloneHost(kubelet.KubeletConfig(dir=tmp_path / "node"), addrs)
        workers = []
        for ns, i in (("a", 0), ("a", 1), ("b", 0)):
            pod = {"metadata": {"name": f"etcd-{i}", "namespace": ns, "uid": f"uid-{ns}-{i}",
                                "labels": {"app": "etcd"}},
                   "spec": {"hostname": f"etcd-{i}", "subdomain": "etcd", "containers": []}}
            w = host._new_worker(pod, addrs.allocate(ns, f"etcd-{i}"))
            w.etc_files["hosts"].parent.mkdir(parents=True)
            workers.append(w)
        host.service_records[:] = [dns.ServiceRecord("a", "etcd", {"app": "etcd"}, publish_not_ready=True)]

        def texts() -> list[str]:
            return [w.etc_files["hosts"].read_text() for w in workers]

        def expected() -> list[str]:
            records = [w.record() for w in workers]
            return [dns.hosts_file(r, records, host.service_records) for r in records]

        host._write_dns()
        assert host.dns_files_built == 3 and texts() == expected()
        assert "etcd-1.etcd.a.svc" in texts()[2]
        host._write_dns()
        host.flush_dns()
        assert host.dns_files_built == 3, "nothing changed: no file is computed again"

        # a change in namespace b's labels publishes nothing new (b has no Service): recomputed, not rewritten
        inodes = [w.etc_files["hosts"].stat().st_mtime_ns for w in workers]
        workers[2].pod["metadata"]["labels"] = {"app": "other"}
        host._write_dns()
        assert host.dns_files_built == 3 and texts() == expected()
        # etcd-1 of namespace a leaves the Service: every file changes
        workers[1].pod["metadata"]["labels"] = {"app": "other"}
        host._write_dns()
        assert host.dns_files_built == 6 and texts() == expected()
        assert "etcd-1.etcd.a.svc" not in texts()[2]
        assert [w.etc_files["hosts"].stat().st_mtime_ns for w in workers] != inodes
        # a file someone emptied (the pod worker does at start) is written again once its memo is reset
        dns.write_in_place(workers[0].etc_files["hosts"], "")
        workers[0].hosts_key, workers[0].hosts_text = None, ""
        host._write_dns()
        assert host.dns_files_built == 7 and texts() == expected()
        # a new Service in namespace b: b's pod gains it, every file is recomputed
        host.service_records.append(dns.ServiceRecord("b", "etcd", {"app": "other"}, publish_not_ready=True))
        host._write_dns()
        assert host.dns_files_built == 10 and texts() == expected()
        assert "etcd.b.svc.cluster.local" in texts()[0]


def test_write_in_place_keeps_the_inode(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    assert dns.write_in_place(path, "a long first content\n")
    inode = path.stat().st_ino
    assert dns.write_in_place(path, "short\n")
    assert not dns.write_in_place(path, "short\n")
    assert path.read_text() == "short\n" and path.stat().st_ino == inode


def test_atomic_writer_layout_and_swap(tmp_path: Path) -> None:
    target = tmp_path / "vol"
    writer = volumes.AtomicWriter(target)
    assert writer.write({"tls.crt": volumes.FileProjection(b"one"), "sub/x": volumes.FileProjection(b"s", 0o600)})
    first = os.readlink(target / "..data")
    assert first.startswith("..") and (target / first).is_dir()
    assert os.readlink(target / "tls.crt") == "..data/tls.crt"
    assert os.readlink(target / "sub") == "..data/sub"
    assert (target / "tls.crt").read_bytes() == b"one"
    assert (target / "sub" / "x").stat().st_mode & 0o777 == 0o600
    assert not writer.write({"tls.crt": volumes.FileProjection(b"one"), "sub/x": volumes.FileProjection(b"s", 0o600)})
    assert writer.write({"tls.crt": volumes.FileProjection(b"two")})
    second = os.readlink(target / "..data")
    assert second != first and not (target / first).exists()  # old payload removed after the swap
    assert (target / "tls.crt").read_bytes() == b"two"
    assert not os.path.lexists(target / "sub")  # keys gone from the object disappear


def test_project_keys_items_modes_and_missing_keys() -> None:
    data = {"tls.crt": b"c", "tls.key": b"k"}
    out = volumes.project_keys(data, [{"key": "tls.key", "path": "peer.key", "mode": 0o600}], 0o640,
                               kind="Secret", name="s", optional=False)
    assert out == {"peer.key": volumes.FileProjection(b"k", 0o600)}
    assert volumes.project_keys(data, None, 0o640, kind="Secret", name="s", optional=False)["tls.crt"].mode == 0o640
    with pytest.raises(volumes.VolumeError, match="non-existent secret key: ca.crt"):
        volumes.project_keys(data, [{"key": "ca.crt", "path": "ca.crt"}], None, kind="Secret", name="s",
                             optional=False)
    with pytest.raises(volumes.VolumeError, match='Secret "s" not found'):
        volumes.project_keys(None, None, None, kind="Secret", name="s", optional=False)
    assert volumes.project_keys(None, None, None, kind="Secret", name="s", optional=True) == {}
    assert volumes.decode_secret({"data": {"a": base64.b64encode(b"x").decode()}}) == {"a": b"x"}


def test_addresses_are_stable_per_pod_and_sandboxes_never_share_a_range(tmp_path: Path) -> None:
    with addresses.PodAddresses(lock_dir=tmp_path) as a, addresses.PodAddresses(lock_dir=tmp_path) as b:
        assert a.second_octet != b.second_octet
        ip = a.allocate("ns", "etcd-0")
        assert ip.startswith(f"127.{a.second_octet}.") and a.allocate("ns", "etcd-1") != ip
        assert a.allocate("ns", "etcd-0") == ip
        with pytest.raises(addresses.AddressSpaceExhausted, match="reserved by another sandbox"):
            addresses.PodAddresses(a.second_octet, lock_dir=tmp_path)
    with addresses.PodAddresses(a.second_octet, lock_dir=tmp_path) as again:  # released on close
        assert again.allocate("ns", "x").startswith(f"127.{a.second_octet}.")


def test_a_service_selecting_on_two_labels_lists_only_pods_with_both() -> None:
    pods = [dns.PodRecord("ns", f"{db}-{i}", f"127.0.{ord(db)}.{i + 1}", labels={"app": "etcd", "instance": db},
                          ready=True) for db in "ab" for i in range(2)]
    svc = dns.ServiceRecord("ns", "b-client", {"app": "etcd", "instance": "b"})
    hosts = dns.HostsTable(pods, [svc]).for_pod(pods[0])
    listed = [line.split("\t")[0] for line in hosts.splitlines() if line.endswith("b-client")]
    assert listed == [p.ip for p in pods if p.labels["instance"] == "b"]
