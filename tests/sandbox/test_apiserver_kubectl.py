"""Contract tests: kubectl 1.32 (/usr/bin/kubectl) against the sandbox API server.

We test these aspects: ``apply -f`` of the project's real ``crds/`` and of objects (create, then
"configured" through a three-way patch), ``get`` with printer columns (``kubectl get etcdops`` shows
Type/Status/Age), ``get -w`` printing a change, ``describe``, ``delete``, ``scale``, ``patch`` and a
ValidatingWebhookConfiguration's denial reaching kubectl's stderr.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from pathlib import Path
from typing import Any

import kubernetes.client as k
import pytest
import yaml

from tests.fixtures.sandbox import LocalWebhook, SandboxAPI, webhook_configuration
from tests.polling import eventually

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]

OPS_REQUEST = """
apiVersion: ops.opsmanager.dev/v1alpha1
kind: EtcdOpsRequest
metadata:
  name: rotate-tls
spec:
  type: ReconfigureTLS
  databaseRef: {name: etcd-demo}
  tls: {rotateCertificates: true}
"""


def test_apply_get_describe_delete_with_the_project_crds(apiserver: SandboxAPI, kubectl: Any,
                                                         tmp_path: Path) -> None:
    result = kubectl("apply", "-f", str(REPO / "crds"))
    assert result.returncode == 0, result.stderr
    assert "customresourcedefinition.apiextensions.k8s.io/etcdopsrequests.ops.opsmanager.dev created" in \
        result.stdout
    manifest = tmp_path / "ops.yaml"
    manifest.write_text(OPS_REQUEST)
    result = kubectl("apply", "-f", str(manifest))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "etcdopsrequest.ops.opsmanager.dev/rotate-tls created"
    k.CustomObjectsApi(apiserver.api_client).patch_namespaced_custom_object_status(
        "ops.opsmanager.dev", "v1alpha1", "default", "etcdopsrequests", "rotate-tls",
        {"status": {"phase": "Progressing"}})
    result = kubectl("get", "etcdops")
    assert result.returncode == 0, result.stderr
    header, row = result.stdout.splitlines()
    assert header.split() == ["NAME", "TYPE", "STATUS", "REASON", "AGE"]
    assert re.fullmatch(r"rotate-tls\s+ReconfigureTLS\s+Progressing\s+\d+s", row.strip()), row
    wide = kubectl("get", "etcdops", "-o", "wide")
    assert wide.stdout.splitlines()[0].split() == ["NAME", "TYPE", "DATABASE", "STATUS", "REASON", "AGE"]
    result = kubectl("get", "etcdops", "rotate-tls", "-o", "yaml")
    obj = yaml.safe_load(result.stdout)
    assert obj["spec"]["apply"] == "IfReady" and obj["spec"]["timeout"] == "10m", "schema defaults applied"
    assert "kubectl.kubernetes.io/last-applied-configuration" in obj["metadata"]["annotations"]
    result = kubectl("describe", "etcdops", "rotate-tls")
    assert result.returncode == 0, result.stderr
    assert "Kind:         EtcdOpsRequest" in result.stdout and "Type:" in result.stdout
    manifest.write_text(OPS_REQUEST.replace("ReconfigureTLS", "Restart"))
    result = kubectl("apply", "-f", str(manifest))
    assert result.returncode != 0 and "spec is immutable" in result.stderr
    result = kubectl("delete", "-f", str(manifest))
    assert result.returncode == 0 and 'etcdopsrequest.ops.opsmanager.dev "rotate-tls" deleted' in result.stdout
    assert "No resources found" in kubectl("get", "etcdops").stderr


def test_apply_updates_builtin_objects_with_a_strategic_patch(apiserver: SandboxAPI, kubectl: Any,
                                                              tmp_path: Path) -> None:
    manifest = tmp_path / "pod.yaml"
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "x"}},
                           "spec": {"containers": [{"name": "main", "image": "etcd:3.5.1",
                                                    "env": [{"name": "A", "value": "1"}]}]}}
    manifest.write_text(yaml.safe_dump(pod))
    assert kubectl("apply", "-f", str(manifest)).returncode == 0
    pod["spec"]["containers"][0]["env"].append({"name": "B", "value": "2"})
    pod["metadata"]["labels"]["tier"] = "db"
    manifest.write_text(yaml.safe_dump(pod))
    result = kubectl("apply", "-f", str(manifest))
    assert result.stdout.strip() == "pod/p configured", result.stderr
    live = k.CoreV1Api(apiserver.api_client).read_namespaced_pod("p", "default")
    assert [e.name for e in live.spec.containers[0].env] == ["A", "B"] and live.metadata.labels["tier"] == "db"
    result = kubectl("patch", "pod", "p", "-p", '{"metadata":{"labels":{"tier":null}}}')
    assert result.returncode == 0, result.stderr
    result = kubectl("get", "pods")
    assert result.stdout.splitlines()[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert result.stdout.splitlines()[1].split()[:4] == ["p", "0/1", "Pending", "0"]
    result = kubectl("describe", "pod", "p")
    assert result.returncode == 0 and "Labels:       app=x" in result.stdout, result.stdout
    assert kubectl("delete", "pod", "p").returncode == 0


def test_get_watch_prints_a_change(apiserver: SandboxAPI, kubectl: Any, tmp_path: Path) -> None:
    core = k.CoreV1Api(apiserver.api_client)
    core.create_namespaced_config_map("default", {"metadata": {"name": "watched"}, "data": {"a": "1"}})
    env = dict(os.environ, HOME=str(tmp_path))
    process = subprocess.Popen(
        ["/usr/bin/kubectl", "--kubeconfig", str(apiserver.kubeconfig), "--cache-dir", str(tmp_path / "cache"),
         "get", "configmaps", "-w", "--request-timeout=30s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        eventually(lambda: any(line.startswith("watched") for line in lines), timeout=15)
        assert lines[0].split() == ["NAME", "DATA", "AGE"]
        core.patch_namespaced_config_map("watched", "default", {"data": {"b": "2"}})
        eventually(lambda: any(re.match(r"watched\s+2\s", line) for line in lines), timeout=15)
    finally:
        process.kill()
        process.wait(10)
    assert sum(1 for line in lines if line.startswith("NAME")) == 1


def test_scale_uses_the_scale_subresource(apiserver: SandboxAPI, kubectl: Any, tmp_path: Path) -> None:
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "etcd"},
           "spec": {"replicas": 1, "serviceName": "etcd", "selector": {"matchLabels": {"app": "etcd"}},
                    "template": {"metadata": {"labels": {"app": "etcd"}},
                                 "spec": {"containers": [{"name": "etcd", "image": "etcd:3.5.1"}]}}}}
    result = kubectl("apply", "-f", "-", input=yaml.safe_dump(sts))
    assert result.returncode == 0, result.stderr
    result = kubectl("scale", "statefulset", "etcd", "--replicas=3")
    assert result.stdout.strip() == "statefulset.apps/etcd scaled", result.stderr
    assert k.AppsV1Api(apiserver.api_client).read_namespaced_stateful_set("etcd", "default").spec.replicas == 3
    assert kubectl("get", "sts").stdout.splitlines()[1].split()[:2] == ["etcd", "0/3"]


def test_webhook_denial_reaches_stderr(apiserver: SandboxAPI, kubectl: Any, widget_crd: Any,
                                       local_webhook: LocalWebhook, tmp_path: Path) -> None:
    config = webhook_configuration("ValidatingWebhookConfiguration", "sizes", local_webhook, "/validate")
    result = kubectl("apply", "-f", "-", input=yaml.safe_dump(config))
    assert result.returncode == 0, result.stderr
    widget = {"apiVersion": "test.opsmanager.dev/v1", "kind": "Widget", "metadata": {"name": "big"},
              "spec": {"size": 42}}
    result = kubectl("apply", "-f", "-", input=yaml.safe_dump(widget))
    assert result.returncode == 1
    assert ('admission webhook "sizes.test.opsmanager.dev" denied the request: size 42 is too big (max 10)'
            in result.stderr), result.stderr
    widget["spec"]["size"] = 7
    result = kubectl("apply", "-f", "-", input=yaml.safe_dump(widget))
    assert result.returncode == 0 and "Warning: size 7 is large" in result.stderr, result.stderr


def test_create_generators_sending_protobuf(apiserver: SandboxAPI, kubectl: Any) -> None:
    assert kubectl("create", "namespace", "demo").stdout.strip() == "namespace/demo created"
    result = kubectl("create", "secret", "generic", "s", "--from-literal=user=root", "-n", "demo")
    assert result.returncode == 0, result.stderr
    result = kubectl("create", "configmap", "c", "--from-literal=k=v", "-n", "demo")
    assert result.returncode == 0, result.stderr
    core = k.CoreV1Api(apiserver.api_client)
    secret = core.read_namespaced_secret("s", "demo")
    assert secret.data == {"user": "cm9vdA=="} and secret.type == "Opaque"
    assert core.read_namespaced_config_map("c", "demo").data == {"k": "v"}
    assert core.read_namespace("demo").metadata.labels == {"kubernetes.io/metadata.name": "demo"}
    result = kubectl("delete", "namespace", "demo", "--timeout=20s")
    assert result.returncode == 0, result.stderr
    assert "demo" not in {n.metadata.name for n in core.list_namespace().items}


def test_logs_come_from_the_registered_log_source(apiserver: SandboxAPI, kubectl: Any, tmp_path: Path) -> None:
    log = tmp_path / "etcd.log"
    log.write_text("line 1\nline 2\n")
    apiserver.threaded.call_soon(apiserver.server.set_log_source,
                                 lambda ns, pod, container: log if (ns, pod, container) == ("default", "p", "etcd")
                                 else None)
    k.CoreV1Api(apiserver.api_client).create_namespaced_pod("default", {
        "metadata": {"name": "p"}, "spec": {"containers": [{"name": "etcd", "image": "etcd:3.5.1"}]}})
    assert kubectl("logs", "p").stdout == "line 1\nline 2\n"
    assert kubectl("logs", "p", "--tail=1").stdout == "line 2\n"
    env = dict(os.environ, HOME=str(tmp_path))
    process = subprocess.Popen(["/usr/bin/kubectl", "--kubeconfig", str(apiserver.kubeconfig), "--cache-dir",
                                str(tmp_path / "cache"), "logs", "-f", "p"], stdout=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout or []), daemon=True)
    reader.start()
    try:
        eventually(lambda: len(lines) >= 2, timeout=15)
        with log.open("a") as f:
            f.write("line 3\n")
        eventually(lambda: lines[-1:] == ["line 3\n"], timeout=15)
    finally:
        process.kill()
        process.wait(10)
    code, _, _ = apiserver.raw("PATCH", "/api/v1/namespaces/default/pods/p/log", {"x": 1},
                               content_type="application/merge-patch+json")
    assert code == 405
