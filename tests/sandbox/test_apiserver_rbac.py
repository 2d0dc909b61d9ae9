"""Authentication and RBAC of the sandbox API server over real HTTP, with the project's ``Kube`` client and kubectl.

We test these aspects: the admin kubeconfig keeps full rights under ``authorization="RBAC"``; TokenRequest
(over HTTP, from Python and via ``kubectl create token``) issues ServiceAccount tokens that are allowed and
denied exactly per a Role (403 ``Forbidden`` with kube-apiserver's message, watch refused at open without the
``watch`` verb, ``resourceNames`` on get and on a name-selected list); 401 for a junk, expired, revoked (deleted
ServiceAccount, even when recreated) or unbound (deleted Pod) token; anonymous requests see only ``/version`` and
health; ``kubectl auth can-i`` / ``whoami``; the default ServiceAccount of a new namespace; validation of
bindings; the audit log's records and counts; the default ``AlwaysAllow`` mode still authenticates.
"""

from __future__ import annotations

import asyncio
import collections
import os
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from opsmanager import kube
from opsmanager.kube import config as kube_config
from opsmanager.kube import errors as kube_errors
from opsmanager_sandbox.apiserver import ThreadedAPIServer
from tests.fixtures.sandbox import webhook_configuration
from tests.polling import aeventually, eventually

Obj = dict[str, Any]
G = "rbac.authorization.k8s.io"
SA_USER = "system:serviceaccount:ops:operator"
Kubectl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ThreadedAPIServer]:
    with ThreadedAPIServer(authorization="RBAC", cert_manager=False, bookmark_interval=0.5) as threaded:
        threaded.write_kubeconfig(tmp_path / "kubeconfig")
        yield threaded


@pytest.fixture
def kubectl(server: ThreadedAPIServer, tmp_path: Path) -> Kubectl:
    config = tmp_path / "kubeconfig"
    env = dict(os.environ, HOME=str(tmp_path), KUBECONFIG=str(config))

    def run(*args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        cmd = ["/usr/bin/kubectl", "--kubeconfig", str(config), "--cache-dir", str(tmp_path / "cache"), *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)

    return run


def client(server: ThreadedAPIServer, token: str | None) -> kube.Kube:
    """The project's client of the HTTPS server (RBAC mode serves TLS), verifying its CA."""
    return kube.Kube.for_url(server.url, token=token, ca_path=str(server.server.ca_file))


def tls(server: ThreadedAPIServer) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(server.server.ca_file))


async def setup_operator(admin: kube.Kube, rules: list[Obj]) -> str:
    """Namespace ``ops``, ServiceAccount ``operator`` bound to a Role with ``rules``; returns a token of it."""
    await admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ops"}})
    await admin.create({"apiVersion": "v1", "kind": "ServiceAccount",
                        "metadata": {"name": "operator", "namespace": "ops"}})
    await admin.create({"apiVersion": f"{G}/v1", "kind": "Role", "metadata": {"name": "operator", "namespace": "ops"},
                        "rules": rules})
    await admin.create({"apiVersion": f"{G}/v1", "kind": "RoleBinding",
                        "metadata": {"name": "operator", "namespace": "ops"},
                        "roleRef": {"apiGroup": G, "kind": "Role", "name": "operator"},
                        "subjects": [{"kind": "ServiceAccount", "name": "operator"}]})
    answer = await admin.request("POST", "/api/v1/namespaces/ops/serviceaccounts/operator/token",
                                 body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                       "spec": {"expirationSeconds": 3600}})
    assert answer["kind"] == "TokenRequest" and answer["status"]["expirationTimestamp"].endswith("Z")
    token: str = answer["status"]["token"]
    return token


CONFIGMAP_READER = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
                    {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["s1"],
                     "verbs": ["get", "list", "watch"]}]


def configmap(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ops"}}


async def test_a_service_account_token_is_allowed_and_denied_per_its_role(server: ThreadedAPIServer) -> None:
    async with client(server, server.server.admin_token) as admin:
        token = await setup_operator(admin, CONFIGMAP_READER)
        await admin.create(configmap("c1"))
        for name in ("s1", "s2"):
            await admin.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "ops"}})
        t0 = time.monotonic()
        async with client(server, token) as operator:
            assert (await operator.get("v1", "ConfigMap", "ops", "c1") or {})["metadata"]["name"] == "c1"
            assert [c["metadata"]["name"] for c in await operator.list("v1", "ConfigMap", "ops")] == ["c1"]
            with pytest.raises(kube_errors.Forbidden) as denied:
                await operator.create(configmap("c2"))
            assert denied.value.status == 403 and denied.value.reason == "Forbidden"
            assert str(denied.value.body and denied.value.body["message"]) == (
                f'configmaps is forbidden: User "{SA_USER}" cannot create resource "configmaps" in API group "" '
                f'in the namespace "ops"')
            with pytest.raises(kube_errors.Forbidden):
                await operator.delete("v1", "ConfigMap", "ops", "c1")
            with pytest.raises(kube_errors.Forbidden):  # another namespace
                await operator.list("v1", "ConfigMap", "default")
            # resourceNames: the named secret by name or by a metadata.name list, nothing else
            assert await operator.get("v1", "Secret", "ops", "s1") is not None
            with pytest.raises(kube_errors.Forbidden) as named:
                await operator.get("v1", "Secret", "ops", "s2")
            assert 'secrets "s2" is forbidden' in str(named.value)
            assert len(await operator.list("v1", "Secret", "ops", field_selector="metadata.name=s1")) == 1
            with pytest.raises(kube_errors.Forbidden):
                await operator.list("v1", "Secret", "ops")
            # a watch without the verb is refused when it opens
            with pytest.raises(kube_errors.Forbidden):
                async for _ in operator.watch("v1", "ConfigMap", "ops", timeout_seconds=5):
                    pass
            async for event in operator.watch("v1", "Secret", "ops", field_selector="metadata.name=s1",
                                              timeout_seconds=5):
                assert event.object["metadata"]["name"] == "s1"
                break
        counts = server.server.audit.counts(user=SA_USER, since=t0)
        assert counts == collections.Counter({
            ("get", "configmaps"): 1, ("list", "configmaps"): 2, ("create", "configmaps"): 1,
            ("delete", "configmaps"): 1, ("get", "secrets"): 2, ("list", "secrets"): 2, ("watch", "configmaps"): 1,
            ("watch", "secrets"): 1})
        codes = [(r.verb, r.resource, r.namespace, r.name, r.code) for r in server.server.audit.records(
            user=SA_USER, since=t0)]
        assert ("get", "secrets", "ops", "s2", 403) in codes and ("watch", "secrets", "ops", "s1", 200) in codes
        assert ("list", "configmaps", "default", "", 403) in codes


async def test_bad_expired_and_revoked_tokens_get_401(server: ThreadedAPIServer) -> None:
    async def status_with(token: str, path: str = "/api/v1/namespaces/ops/configmaps") -> tuple[int, Obj]:
        async with aiohttp.ClientSession() as session, session.get(
                server.url + path, headers={"Authorization": f"Bearer {token}"}, ssl=tls(server)) as resp:
            return resp.status, await resp.json()

    async with client(server, server.server.admin_token) as admin:
        token = await setup_operator(admin, CONFIGMAP_READER)
        assert (await status_with(token))[0] == 200
        code, body = await status_with("junk")
        assert (code, body["kind"], body["reason"], body["message"]) == (401, "Status", "Unauthorized", "Unauthorized")

        short = server.issue_token("ops", "operator", expiration_seconds=1)
        assert (await status_with(short))[0] == 200
        await aeventually(lambda: _code(status_with(short), 401), timeout=15, what="the 1 s token expires")

        foreign = server.issue_token("ops", "operator", audiences=["vault"])
        assert (await status_with(foreign))[0] == 401  # not meant for the API server

        await admin.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ops"},
                            "spec": {"containers": [{"name": "c", "image": "x"}]}})
        pod = await admin.get("v1", "Pod", "ops", "p")
        assert pod is not None
        bound = server.issue_token("ops", "operator", bound={"kind": "Pod", "name": "p",
                                                              "uid": pod["metadata"]["uid"]})
        assert (await status_with(bound))[0] == 200
        # the audit log names the pod a bound token belongs to (its user.extra), as Kubernetes 1.30+ does
        last = server.server.audit.records(user="system:serviceaccount:ops:operator")[-1]
        assert (last.pod, last.code) == ("p", 200)
        await admin.delete("v1", "Pod", "ops", "p")
        assert (await status_with(bound))[0] == 401

        await admin.delete("v1", "ServiceAccount", "ops", "operator")
        assert (await status_with(token))[0] == 401
        await admin.create({"apiVersion": "v1", "kind": "ServiceAccount",
                            "metadata": {"name": "operator", "namespace": "ops"}})
        assert (await status_with(token))[0] == 401  # same name, another ServiceAccount
        with pytest.raises(kube_errors.Invalid) as short_request:
            await admin.request("POST", "/api/v1/namespaces/ops/serviceaccounts/operator/token",
                                body={"spec": {"expirationSeconds": 60}})
        assert "spec.expirationSeconds" in str(short_request.value)
        with pytest.raises(kube_errors.NotFound):
            await admin.request("POST", "/api/v1/namespaces/ops/serviceaccounts/nobody/token", body={})
    records = server.server.audit.records()
    assert ("", "list", "configmaps", 401) in [(r.user, r.verb, r.resource, r.code) for r in records]


async def _code(pending: Any, expected: int) -> bool:
    code, _ = await pending
    return bool(code == expected)


async def test_anonymous_requests_see_only_version_and_health(server: ThreadedAPIServer) -> None:
    async with aiohttp.ClientSession() as session:
        for path, expected in (("/version", 200), ("/healthz", 200), ("/readyz", 200), ("/livez", 200),
                               ("/api", 403), ("/apis", 403), ("/api/v1/namespaces/default/pods", 403),
                               ("/api/v1/namespaces", 403)):
            async with session.get(server.url + path, ssl=tls(server)) as resp:
                assert resp.status == expected, path
                if expected == 403:
                    body = await resp.json()
                    assert body["reason"] == "Forbidden" and 'User "system:anonymous"' in body["message"]


async def test_the_default_mode_allows_everyone_but_still_authenticates(tmp_path: Path) -> None:
    with ThreadedAPIServer(cert_manager=False) as threaded:
        async with kube.Kube.for_url(threaded.url) as anonymous:
            await anonymous.create({"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": "c", "namespace": "default"}})
        async with kube.Kube.for_url(threaded.url, token="junk") as junk:
            with pytest.raises(kube_errors.Unauthorized):
                await junk.list("v1", "ConfigMap", "default")
        users = {(r.user, r.verb, r.code) for r in threaded.server.audit}
        assert ("system:anonymous", "create", 201) in users and ("", "list", 401) in users


def test_kubectl_with_admin_kubeconfig_and_with_a_service_account_token(server: ThreadedAPIServer,
                                                                        kubectl: Kubectl) -> None:
    def ok(*args: str) -> str:
        done = kubectl(*args)
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout.strip()

    assert ok("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}") == "system:admin"
    ok("create", "namespace", "ops")
    ok("create", "serviceaccount", "operator", "-n", "ops")
    ok("create", "role", "operator", "-n", "ops", "--verb=get,list", "--resource=configmaps")
    ok("create", "rolebinding", "operator", "-n", "ops", "--role=operator", "--serviceaccount=ops:operator")
    ok("create", "configmap", "c1", "-n", "ops", "--from-literal=a=b")
    assert ok("auth", "can-i", "delete", "nodes") == "yes"  # system:masters
    token = ok("create", "token", "operator", "-n", "ops", "--duration=15m")
    as_operator = ("--token", token, "-n", "ops")

    assert ok(*as_operator, "get", "configmaps", "-o", "name") == "configmap/c1"
    denied = kubectl(*as_operator, "delete", "configmap", "c1")
    assert denied.returncode != 0
    assert ('Error from server (Forbidden): configmaps "c1" is forbidden: User "system:serviceaccount:ops:operator" '
            'cannot delete resource "configmaps" in API group "" in the namespace "ops"') in denied.stderr
    assert ok(*as_operator, "auth", "can-i", "list", "configmaps") == "yes"
    cannot = kubectl(*as_operator, "auth", "can-i", "create", "configmaps")
    assert (cannot.returncode, cannot.stdout.strip()) == (1, "no")
    assert ok(*as_operator, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}") == SA_USER
    junk = kubectl("--token", "junk", "get", "configmaps", "-n", "ops")
    assert junk.returncode != 0 and "Unauthorized" in junk.stderr
    # a ServiceAccount of a new namespace exists without anyone creating it
    eventually(lambda: kubectl("get", "serviceaccount", "default", "-n", "ops").returncode == 0,
               what="the default ServiceAccount of ops")


def test_bindings_are_validated(server: ThreadedAPIServer, kubectl: Kubectl, tmp_path: Path) -> None:
    manifest = (f"apiVersion: {G}/v1\nkind: ClusterRoleBinding\nmetadata: {{name: bad}}\n"
                f"roleRef: {{apiGroup: {G}, kind: Role, name: x}}\n"
                "subjects: [{kind: ServiceAccount, name: operator}]\n")
    path = tmp_path / "bad-binding.yaml"
    path.write_text(manifest)
    done = kubectl("apply", "-f", str(path))
    assert done.returncode != 0
    assert "roleRef.kind" in done.stderr and "subjects[0].namespace" in done.stderr


def test_kubectl_auth_can_i_list_shows_the_granted_rules(server: ThreadedAPIServer, kubectl: Kubectl) -> None:
    for args in (("create", "namespace", "ops"), ("create", "serviceaccount", "operator", "-n", "ops"),
                 ("create", "role", "operator", "-n", "ops", "--verb=get", "--resource=secrets",
                  "--resource-name=s1"),
                 ("create", "rolebinding", "operator", "-n", "ops", "--role=operator",
                  "--serviceaccount=ops:operator")):
        assert kubectl(*args).returncode == 0, args
    token = kubectl("create", "token", "operator", "-n", "ops").stdout.strip()
    listed = kubectl("--token", token, "auth", "can-i", "--list", "-n", "ops")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()]
    assert ["secrets", "[]", "[s1]", "[get]"] in rows
    assert ["selfsubjectaccessreviews.authorization.k8s.io", "[]", "[]", "[create]"] in rows
    assert not any(row[0] == "configmaps" for row in rows)
    assert kubectl("--token", token, "auth", "can-i", "get", "secrets/s1", "-n", "ops").stdout.strip() == "yes"
    assert kubectl("--token", token, "auth", "can-i", "get", "secrets/s2", "-n", "ops").stdout.strip() == "no"


async def test_admin_kubeconfig_and_in_cluster_service_account_files(server: ThreadedAPIServer, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "kubeconfig"
    assert config.stat().st_mode & 0o077 == 0  # it holds the admin token
    async with kube.Kube.from_kubeconfig(str(config)) as admin:  # token and CA from the file, over HTTPS
        token = await setup_operator(admin, CONFIGMAP_READER)
        await admin.create(configmap("c1"))
        await admin.delete("rbac.authorization.k8s.io/v1", "ClusterRole", None, "system:discovery")
    # what a pod's projected volume holds, read by the in-cluster loader (which always speaks https)
    (tmp_path / "token").write_text(token)
    (tmp_path / "ca.crt").write_bytes(server.server.ca_pem or b"")
    host, port = server.url.removeprefix("https://").rsplit(":", 1)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    connection = kube_config.in_cluster(token_file=str(tmp_path / "token"), ca_file=str(tmp_path / "ca.crt"))
    async with kube.Kube(connection) as operator:
        assert [c["metadata"]["name"] for c in await operator.list("v1", "ConfigMap", "ops")] == ["c1"]
        with pytest.raises(kube_errors.Forbidden):
            await operator.request("GET", "/api")  # discovery went with its default ClusterRole


def test_webhooks_are_told_who_asked(server: ThreadedAPIServer, local_webhook: Any) -> None:
    async def scenario() -> str:
        async with client(server, server.server.admin_token) as admin:
            token = await setup_operator(admin, [{"apiGroups": [""], "resources": ["configmaps"],
                                                  "verbs": ["create"]}])
            await admin.create(webhook_configuration("ValidatingWebhookConfiguration", "who", local_webhook,
                                                     "/validate", resources=("configmaps",), groups=("",)))
            async with client(server, token) as operator:
                await operator.create(configmap("c1"))
            return token

    asyncio.run(scenario())
    users = [r["request"]["userInfo"] for r in local_webhook.reviews]
    assert users == [{"username": SA_USER, "uid": users[0]["uid"],
                      "groups": ["system:serviceaccounts", "system:serviceaccounts:ops", "system:authenticated"]}]


async def test_subject_access_reviews_answer_for_another_user(server: ThreadedAPIServer) -> None:
    async with client(server, server.server.admin_token) as admin:
        await setup_operator(admin, CONFIGMAP_READER)

        async def review(path: str, spec: Obj) -> Obj:
            answer: Obj = await admin.request("POST", path, body={"apiVersion": "authorization.k8s.io/v1",
                                                                  "kind": "SubjectAccessReview", "spec": spec})
            return answer

        groups = ["system:serviceaccounts", "system:serviceaccounts:ops", "system:authenticated"]
        sar = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
        allowed = await review(sar, {"user": SA_USER, "groups": groups, "resourceAttributes": {
            "namespace": "ops", "verb": "get", "resource": "secrets", "name": "s1"}})
        assert allowed["status"] == {"allowed": True, "reason": 'RBAC: allowed by RoleBinding "operator/ops" of Role '
                                                                '"operator" to ServiceAccount "ops/operator"'}
        denied = await review(sar, {"user": SA_USER, "groups": groups, "resourceAttributes": {
            "namespace": "ops", "verb": "get", "resource": "secrets", "name": "s2"}})
        assert denied["status"] == {"allowed": False}
        path = await review(sar, {"user": "nobody", "groups": ["system:authenticated"],
                                  "nonResourceAttributes": {"path": "/apis/apps", "verb": "get"}})
        assert path["status"]["allowed"] is True  # system:discovery
        local = "/apis/authorization.k8s.io/v1/namespaces/ops/localsubjectaccessreviews"
        assert (await review(local, {"user": SA_USER, "resourceAttributes": {"verb": "list",
                                                                            "resource": "configmaps"}}))["status"][
            "allowed"] is True
        with pytest.raises(kube_errors.Invalid) as elsewhere:
            await review(local, {"user": SA_USER, "resourceAttributes": {"namespace": "default", "verb": "list",
                                                                         "resource": "configmaps"}})
        assert "spec.resourceAttributes.namespace" in str(elsewhere.value)
        with pytest.raises(kube_errors.Invalid):
            await review(sar, {"resourceAttributes": {"verb": "list", "resource": "configmaps"}})  # nobody
        with pytest.raises(kube_errors.KubeError) as listed:  # answered, never stored
            await admin.request("GET", sar)
        assert listed.value.status == 405
