"""The webhook's Kubernetes manifests: the committed YAML is what ``render`` produces, with the required settings.

We test these aspects: ``webhooks/manifests/`` is up to date; every webhook has failurePolicy Fail, sideEffects
None, timeoutSeconds 10, admissionReviewVersions [v1], a service clientConfig in opsmanager-system on 443 whose
path the server actually serves; the caBundle comes from cert-manager's cainjector annotation, or is embedded (and
the annotation dropped) when given, with a URL clientConfig for the sandbox; the certificate chain is consistent.
"""

from __future__ import annotations

import base64
import pathlib

import yaml

from opsmanager.webhook import admission, config

MANIFESTS = pathlib.Path(__file__).resolve().parents[2] / "webhooks" / "manifests"


def test_committed_manifests_are_up_to_date(tmp_path: pathlib.Path) -> None:
    for name, text in config.files().items():
        assert (MANIFESTS / name).read_text() == text, f"{name} is stale: run python -m opsmanager.webhook.config"
    assert sorted(p.name for p in MANIFESTS.iterdir()) == sorted(config.files())
    kustomization = yaml.safe_load(config.files()[config.KUSTOMIZATION_FILE])
    assert sorted(kustomization["resources"]) == sorted(p.name for p in MANIFESTS.glob("*.yaml"))
    assert config.main(["--out", str(tmp_path)]) == 0
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == config.files()


def test_webhook_configurations_have_the_required_settings() -> None:
    docs = list(yaml.safe_load_all((MANIFESTS / config.WEBHOOK_CONFIG_FILE).read_text()))
    assert [d["kind"] for d in docs] == ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"]
    paths = []
    for doc in docs:
        assert doc["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": "opsmanager-system/opsmanager-webhook"}
        for hook in doc["webhooks"]:
            assert hook["failurePolicy"] == "Fail"
            assert hook["sideEffects"] == "None"
            assert hook["timeoutSeconds"] == 10
            assert hook["admissionReviewVersions"] == ["v1"]
            service = hook["clientConfig"]["service"]
            assert (service["name"], service["namespace"], service["port"]) == (
                "opsmanager-webhook", "opsmanager-system", 443)
            assert "caBundle" not in hook["clientConfig"]
            paths.append(service["path"])
            endpoint = admission.ENDPOINTS[service["path"]]
            rule = hook["rules"][0]
            assert rule["apiGroups"] == [endpoint.group] and rule["apiVersions"] == [endpoint.version]
            assert endpoint.mutating == (doc["kind"] == "MutatingWebhookConfiguration")
    assert sorted(paths) == sorted(admission.ENDPOINTS)
    validating = {h["name"]: h for h in docs[0]["webhooks"]}
    assert validating["validate-etcd.opsmanager.dev"]["rules"][0]["operations"] == ["CREATE", "UPDATE", "DELETE"]
    assert validating["validate-etcdopsrequest.ops.opsmanager.dev"]["rules"][0]["resources"] == ["etcdopsrequests"]


def test_render_for_the_sandbox_embeds_the_ca_and_uses_a_url() -> None:
    objects = config.render("sandbox-ns", "hook", url="https://127.0.0.1:9443/", ca_bundle=b"PEM")
    assert [o["kind"] for o in objects] == ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"]
    for obj in objects:
        assert "annotations" not in obj["metadata"]
        for hook in obj["webhooks"]:
            assert hook["clientConfig"]["url"].startswith("https://127.0.0.1:9443/")
            assert hook["clientConfig"]["url"][len("https://127.0.0.1:9443"):] in admission.ENDPOINTS
            assert base64.b64decode(hook["clientConfig"]["caBundle"]) == b"PEM"


def test_render_for_another_namespace_and_service() -> None:
    objects = config.render("ops", "hook")
    kinds = [o["kind"] for o in objects]
    assert kinds == ["Issuer", "Certificate", "Issuer", "Certificate",
                     "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"]
    assert objects[4]["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "ops/hook"
    assert objects[4]["webhooks"][0]["clientConfig"]["service"]["namespace"] == "ops"


def test_certificate_chain_is_consistent() -> None:
    selfsigned, ca_cert, ca_issuer, serving = config.render_certificates()
    assert selfsigned["spec"] == {"selfSigned": {}}
    assert ca_cert["spec"]["isCA"] is True and ca_cert["spec"]["issuerRef"]["name"] == selfsigned["metadata"]["name"]
    assert ca_issuer["spec"]["ca"]["secretName"] == ca_cert["spec"]["secretName"]
    assert serving["spec"]["issuerRef"]["name"] == ca_issuer["metadata"]["name"]
    assert serving["metadata"]["name"] == "opsmanager-webhook"  # what inject-ca-from names
    assert "opsmanager-webhook.opsmanager-system.svc" in serving["spec"]["dnsNames"]
    assert "server auth" in serving["spec"]["usages"]
