"""The request rules are written once (:mod:`opsmanager.api.rules`): the webhook refuses with them and the plan
builders refuse with them, so a request created without the webhook fails with the webhook's words.

We test these aspects: every ``raise ValueError`` left in a plan builder is one of a short, documented list of the
engine's own rules (what needs the live Etcd or the version it ran when the request started), so a rule the
webhook has cannot come back as a second copy in a planner; for each rule both use, the engine's failure message is
one of the webhook's errors for the same request on the same Etcd; and the webhook's message constants are the
rules' texts, not copies.
"""

from __future__ import annotations

import ast
import copy
import pathlib
from typing import Any

import pytest

from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.api import rules
from opsmanager.ops import operations
from opsmanager.webhook import validation
from opsmanager.webhook.validation import messages

ROOT = pathlib.Path(__file__).resolve().parents[2] / "opsmanager"
# The plan builders: the plan vocabulary and one module per operation type (the TLS family a package).
PLANNERS = [ROOT / "ops" / "plan.py", *sorted((ROOT / "ops" / "operations").rglob("*.py"))]

# The engine's own rules, each (module, function, the message's leading text): why each is not the webhook's.
# docs/architecture.md ("The rules of a request") lists the same.
PLANNER_ONLY: dict[tuple[str, str, str], str] = {
    ("ops/operations/__init__.py", "of", "unsupported EtcdOpsRequest type "):
        "the engine's registry, not the API's list of types: a type the API admits may have no module yet",
    ("ops/operations/reconfigure_tls/plans.py", "reconfigure_tls_plan", "tls."):
        "reads the Etcd's spec.tls when the request runs (KubeDB's rule admits remove on a plaintext Etcd)",
    ("ops/operations/vertical_scaling.py", "plan_scaling",
     "spec.verticalScaling.etcd.resources must be specified: the exporter is inert"):
        "the engine runs no exporter; KubeDB's rule admits the exporter alone",
    ("ops/operations/update_version.py", "plan_update", "spec.updateVersion.targetVersion "):
        "a minor the engine knows how to run, checked when the request runs; the webhook checks the catalog's "
        "EtcdVersion objects instead (which the engine does not read)",
    ("ops/operations/recover_from_quorum_loss.py", "_survivor", "spec.recoverFromQuorumLoss.confirmMember "):
        "member and confirmMember must agree, and name a member of the Etcd as it is when the request runs; the "
        "webhook's rule weighs the survivor the Etcd's status reports, which the plan does not read (the "
        "ConfirmQuorumLoss step checks it when it runs)",
}


def _leading_text(node: ast.expr) -> str | None:
    """The literal text a message starts with (an f-string's up to its first field), None when it has none."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        text = ""
        for part in node.values:
            if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                break
            text += part.value
        return text or None
    return None


def _raises(path: pathlib.Path) -> list[tuple[str, str, str | None]]:
    """Every ``raise ValueError(...)`` (or a ValueError of the rules, raised by hand) in a module: (module,
    enclosing function, the message's leading text)."""
    found: list[tuple[str, str, str | None]] = []

    def walk(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                walk(child, child.name)
                continue
            if isinstance(child, ast.Raise) and isinstance(child.exc, ast.Call):
                func = child.exc.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in ("ValueError", "Refused"):
                    arg = child.exc.args[0] if child.exc.args else None
                    text = _leading_text(arg) if isinstance(arg, ast.expr) else None
                    found.append((str(path.relative_to(ROOT)), function, text))
            walk(child, function)

    walk(ast.parse(path.read_text()), "<module>")
    return found


def test_every_refusal_left_in_a_plan_builder_is_a_listed_engine_only_rule() -> None:
    found = [r for path in PLANNERS for r in _raises(path)]
    unlisted = [r for r in found if r not in PLANNER_ONLY]
    assert not unlisted, (
        f"plan builders raise ValueErrors that are not the engine's own rules: {unlisted}. A rule the webhook has "
        "belongs in opsmanager/api/rules.py (the planner calls rules.enforce(rules.<rule>(...))); a rule that needs "
        "the live Etcd goes in PLANNER_ONLY here and in docs/architecture.md, with why")
    stale = sorted(set(PLANNER_ONLY) - set(found))
    assert not stale, f"PLANNER_ONLY lists refusals no plan builder raises any more: {stale}"


# --- the same request, refused by the webhook and by the engine -------------------------------------------------

NS = "demo"
PLAIN = {"apiVersion": "opsmanager.dev/v1alpha1", "kind": "Etcd", "metadata": {"name": "db", "namespace": NS},
         "spec": {"version": "3.5.1", "replicas": 3, "storageType": "Durable", "deletionPolicy": "Delete"}}
ON_37 = copy.deepcopy(PLAIN)
ON_37["spec"]["version"] = "3.7.3"
BACKED = copy.deepcopy(PLAIN)
BACKED["spec"]["backup"] = {"schedule": "0 * * * *", "destination": {
    "endpoint": "https://s3.example", "bucket": "backups", "credentialsSecret": {"name": "s3"}}}


@pytest.mark.parametrize(("db", "spec"), [
    (PLAIN, {"type": "ReconfigureTLS"}),
    (PLAIN, {"type": "UpdateVersion"}),
    (PLAIN, {"type": "UpdateVersion", "updateVersion": {}}),
    (PLAIN, {"type": "VerticalScaling"}),
    (PLAIN, {"type": "VerticalScaling", "verticalScaling": {}}),
    (PLAIN, {"type": "Reconfigure"}),
    (PLAIN, {"type": "Reconfigure", "configuration": {}}),
    (PLAIN, {"type": "HorizontalScaling"}),
    (PLAIN, {"type": "HorizontalScaling", "horizontalScaling": {}}),
    (PLAIN, {"type": "HorizontalScaling", "horizontalScaling": {"replicas": 0}}),
    (PLAIN, {"type": "RotateAuth", "authentication": {"secretRef": {}}}),
    (PLAIN, {"type": "RecoverFromQuorumLoss", "recoverFromQuorumLoss": {}, "timeout": "10m"}),
    (PLAIN, {"type": "Backup"}),
    (BACKED, {"type": "Restore", "timeout": "30m"}),
    (BACKED, {"type": "Restore", "restore": {}, "timeout": "30m"}),
    (PLAIN, {"type": "Restore", "restore": {"source": "latest"}, "timeout": "30m"}),
    (PLAIN, {"type": "UpdateVersion", "updateVersion": {"targetVersion": "3.7.3"}}),  # through 3.6 first
    (ON_37, {"type": "UpdateVersion", "updateVersion": {"targetVersion": "3.5.35"}}),  # one minor down at most
], ids=lambda v: v["type"] + str(sorted(k for k in v if k != "type")) + str(v.get("updateVersion", ""))
    if "type" in v else v["spec"]["version"])
def test_the_engine_refuses_with_the_webhooks_words(db: dict[str, Any], spec: dict[str, Any]) -> None:
    obj = {"apiVersion": "ops.opsmanager.dev/v1alpha1", "kind": "EtcdOpsRequest",
           "metadata": {"name": "op", "namespace": NS}, "spec": {**spec, "databaseRef": {"name": "db"}}}
    webhook = [e.detail for e in validation.opsrequest_errors(obj, NS, validation.InMemoryEtcdLookup([db]))]
    with pytest.raises(ValueError) as refused:
        operations.plan_for(etcd_api.Etcd.model_validate(db), ops_api.EtcdOpsRequest.model_validate(obj))
    assert str(refused.value) in webhook, (str(refused.value), webhook)


def test_the_engine_names_each_flag_etcd_would_refuse_as_the_webhook_does() -> None:
    tuning = {"heartbeatInterval": 300, "maxTxnOps": 0}
    obj = {"apiVersion": "ops.opsmanager.dev/v1alpha1", "kind": "EtcdOpsRequest",
           "metadata": {"name": "op", "namespace": NS},
           "spec": {"type": "Reconfigure", "databaseRef": {"name": "db"}, "configuration": {"tuning": tuning}}}
    webhook = validation.opsrequest_errors(obj, NS, validation.InMemoryEtcdLookup([PLAIN]))
    assert len(webhook) == 2
    with pytest.raises(rules.Refused) as refused:
        operations.plan_for(etcd_api.Etcd.model_validate(PLAIN), ops_api.EtcdOpsRequest.model_validate(obj))
    assert str(refused.value) == "; ".join(f"{e.field}: {e.detail}" for e in webhook)


def test_the_webhooks_messages_are_the_rules_texts() -> None:
    shared = [name for name in dir(rules) if name.startswith("MSG_")]
    assert shared
    for name in shared:
        assert getattr(messages, name) is getattr(rules, name), name
