"""Contract tests: admission webhooks called by the sandbox API server over real HTTPS.

We test these aspects: a validating webhook's denial reaches the client with the webhook's code and the
real server's message; warnings become ``Warning`` headers; mutating webhooks run first and their JSONPatch
is stored; a ``service`` clientConfig is resolved through ``register_service_address`` or the Service's Ready
pods and verified for ``<svc>.<ns>.svc``; failurePolicy Fail/Ignore, timeoutSeconds and a wrong caBundle; rules by operation
(DELETE) and subresource; objectSelector.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import kubernetes.client as k
import pytest
from kubernetes.client.rest import ApiException

from opsmanager import pki
from tests.fixtures.sandbox import LocalWebhook, SandboxAPI, webhook_configuration
from tests.timing import allowance, baseline

pytestmark = pytest.mark.slow
G, V, P = "test.opsmanager.dev", "v1", "widgets"
VWC, MWC = "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"


def widget(name: str, size: int = 1) -> dict[str, Any]:
    return {"apiVersion": f"{G}/{V}", "kind": "Widget", "metadata": {"name": name}, "spec": {"size": size}}


def install(apiserver: SandboxAPI, config: dict[str, Any]) -> None:
    api = k.AdmissionregistrationV1Api(apiserver.api_client)
    if config["kind"] == VWC:
        api.create_validating_webhook_configuration(config)
    else:
        api.create_mutating_webhook_configuration(config)


def create(apiserver: SandboxAPI, body: dict[str, Any]) -> dict[str, Any]:
    return k.CustomObjectsApi(apiserver.api_client).create_namespaced_custom_object(G, V, "default", P, body)


def rejected(apiserver: SandboxAPI, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    with pytest.raises(ApiException) as info:
        create(apiserver, body)
    return info.value.status, json.loads(info.value.body)


def test_validating_webhook_denial_and_warnings(apiserver: SandboxAPI, widget_crd: Any,
                                                local_webhook: LocalWebhook) -> None:
    install(apiserver, webhook_configuration(VWC, "sizes", local_webhook, "/validate"))
    code, status = rejected(apiserver, widget("big", 42))
    assert code == 422
    assert status["message"] == ('admission webhook "sizes.test.opsmanager.dev" denied the request: '
                                 "size 42 is too big (max 10)")
    review = local_webhook.reviews[-1]["request"]
    assert review["operation"] == "CREATE" and review["kind"] == {"group": G, "version": V, "kind": "Widget"}
    assert review["resource"]["resource"] == "widgets" and review["namespace"] == "default"
    code, headers, _ = apiserver.raw("POST", f"/apis/{G}/{V}/namespaces/default/{P}", widget("medium", 7))
    assert code == 201 and headers["Warning"] == '299 - "size 7 is large"'
    code, _, _ = apiserver.raw("PATCH", f"/apis/{G}/{V}/namespaces/default/{P}/medium", {"spec": {"size": 11}},
                               content_type="application/merge-patch+json")
    assert code == 422 and local_webhook.reviews[-1]["request"]["oldObject"]["spec"]["size"] == 7


def test_service_client_config_resolves_to_the_registered_address(apiserver: SandboxAPI, widget_crd: Any,
                                                                   local_webhook: LocalWebhook) -> None:
    install(apiserver, webhook_configuration(VWC, "sizes", local_webhook, "/validate", service=True))
    code, status = rejected(apiserver, widget("big", 42))
    assert code == 500 and 'service "test-webhook" not found' in status["message"]
    apiserver.threaded.call_soon(apiserver.server.register_service_address, "default", "test-webhook", 443,
                                 "127.0.0.1", local_webhook.port)
    code, status = rejected(apiserver, widget("big", 42))
    assert code == 422 and "size 42 is too big" in status["message"]
    assert create(apiserver, widget("small", 1))["metadata"]["name"] == "small"


def test_service_client_config_reaches_a_ready_pod_behind_the_service(apiserver: SandboxAPI, widget_crd: Any,
                                                                      local_webhook: LocalWebhook) -> None:
    """Without a registered address, the Service's endpoints: a Ready pod its selector picks, on the targetPort
    (here by name), as the real server calls an in-cluster webhook."""
    install(apiserver, webhook_configuration(VWC, "sizes", local_webhook, "/validate", service=True))
    code, _, _ = apiserver.raw("POST", "/api/v1/namespaces/default/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "test-webhook"},
        "spec": {"selector": {"app": "hook"}, "ports": [{"name": "https", "port": 443, "targetPort": "https"}]}})
    assert code == 201
    code, status = rejected(apiserver, widget("big", 42))
    assert code == 500 and 'no endpoints available for service "test-webhook"' in status["message"]
    code, _, _ = apiserver.raw("POST", "/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hook", "labels": {"app": "hook"}},
        "spec": {"containers": [{"name": "c", "image": "x",
                                 "ports": [{"name": "https", "containerPort": local_webhook.port}]}]}})
    assert code == 201
    code, status = rejected(apiserver, widget("big", 42))
    assert code == 500 and "no endpoints available" in status["message"]  # not Ready yet
    code, _, _ = apiserver.raw("PATCH", "/api/v1/namespaces/default/pods/hook/status", {"status": {
        "phase": "Running", "podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}},
        content_type="application/merge-patch+json")
    assert code == 200
    code, status = rejected(apiserver, widget("big", 42))
    assert code == 422 and "size 42 is too big" in status["message"]


def test_mutating_webhooks_run_before_validating_ones(apiserver: SandboxAPI, widget_crd: Any,
                                                      local_webhook: LocalWebhook) -> None:
    install(apiserver, webhook_configuration(MWC, "labels", local_webhook, "/mutate"))
    install(apiserver, webhook_configuration(VWC, "sizes", local_webhook, "/validate"))
    created = create(apiserver, widget("w", 1))
    assert created["metadata"]["labels"] == {"mutated-by": "test-webhook"}
    paths = [r["request"]["object"]["metadata"].get("labels") for r in local_webhook.reviews]
    assert paths == [None, {"mutated-by": "test-webhook"}], "the validating webhook sees the mutated object"


def test_failure_policy_fail_and_ignore(apiserver: SandboxAPI, widget_crd: Any,
                                        local_webhook: LocalWebhook) -> None:
    unreachable = LocalWebhook(port=1, ca_bundle=local_webhook.ca_bundle, reviews=[], stop=lambda: None)
    install(apiserver, webhook_configuration(VWC, "ignored", unreachable, "/validate", failure_policy="Ignore"))
    assert create(apiserver, widget("w1"))
    install(apiserver, webhook_configuration(VWC, "failing", unreachable, "/validate"))
    code, status = rejected(apiserver, widget("w2"))
    assert code == 500 and status["reason"] == "InternalError"
    assert status["message"].startswith('Internal error occurred: failed calling webhook '
                                        '"failing.test.opsmanager.dev": failed to call webhook: Post '
                                        '"https://127.0.0.1:1/validate?timeout=10s"')


def test_timeout_seconds_is_honoured(apiserver: SandboxAPI, widget_crd: Any, local_webhook: LocalWebhook) -> None:
    install(apiserver, webhook_configuration(VWC, "quick", local_webhook, "/validate", timeout=1))
    names = iter(range(3))
    one_call = baseline(lambda: create(apiserver, widget(f"quick-{next(names)}")))  # a webhook that answers at once
    install(apiserver, webhook_configuration(VWC, "slow", local_webhook, "/slow", timeout=1))
    started = time.monotonic()
    code, status = rejected(apiserver, widget("w"))
    elapsed = time.monotonic() - started
    assert code == 500 and "context deadline exceeded" in status["message"]
    # The slow webhook answers after 3 s; timeoutSeconds=1 ends the call after 1 s and what a call costs here.
    assert elapsed < 1 + allowance(one_call), (elapsed, one_call)


def test_certificate_must_verify_against_the_ca_bundle(apiserver: SandboxAPI, widget_crd: Any,
                                                       local_webhook: LocalWebhook) -> None:
    other_ca = base64.b64encode(pki.make_ca("someone-else").cert_pem).decode()
    wrong = LocalWebhook(local_webhook.port, other_ca, [], lambda: None)
    install(apiserver, webhook_configuration(VWC, "wrong-ca", wrong, "/validate"))
    code, status = rejected(apiserver, widget("w"))
    assert code == 500 and "certificate verify failed" in status["message"]
    assert local_webhook.reviews == []


def test_rules_select_operations_and_subresources(apiserver: SandboxAPI, widget_crd: Any,
                                                  local_webhook: LocalWebhook) -> None:
    custom = k.CustomObjectsApi(apiserver.api_client)
    create(apiserver, widget("w"))
    install(apiserver, webhook_configuration(VWC, "no-delete", local_webhook, "/deny", operations=("DELETE",)))
    custom.patch_namespaced_custom_object(G, V, "default", P, "w", {"spec": {"size": 2}})
    custom.patch_namespaced_custom_object_status(G, V, "default", P, "w", {"status": {"phase": "A"}})
    with pytest.raises(ApiException) as info:
        custom.delete_namespaced_custom_object(G, V, "default", P, "w")
    assert info.value.status == 400
    assert json.loads(info.value.body)["message"] == ('admission webhook "no-delete.test.opsmanager.dev" denied '
                                                      "the request without explanation")
    assert [r["request"]["operation"] for r in local_webhook.reviews] == ["DELETE"]
    assert local_webhook.reviews[0]["request"]["oldObject"]["metadata"]["name"] == "w"
    install(apiserver, webhook_configuration(VWC, "status-only", local_webhook, "/deny", operations=("UPDATE",),
                                             resources=("widgets/status",)))
    custom.patch_namespaced_custom_object(G, V, "default", P, "w", {"spec": {"size": 3}})
    with pytest.raises(ApiException):
        custom.patch_namespaced_custom_object_status(G, V, "default", P, "w", {"status": {"phase": "B"}})
    assert local_webhook.reviews[-1]["request"]["subResource"] == "status"


def test_object_selector_limits_which_objects_are_sent(apiserver: SandboxAPI, widget_crd: Any,
                                                       local_webhook: LocalWebhook) -> None:
    install(apiserver, webhook_configuration(VWC, "selected", local_webhook, "/deny",
                                             object_selector={"matchLabels": {"checked": "yes"}}))
    assert create(apiserver, widget("free"))
    body = widget("checked")
    body["metadata"]["labels"] = {"checked": "yes"}
    code, _ = rejected(apiserver, body)
    assert code == 400 and len(local_webhook.reviews) == 1
