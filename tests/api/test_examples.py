"""The manifests in docs/examples/ (the demo's help points at them) are valid objects of our kinds, and each
request is one the admission webhook accepts against the Etcd example it names (the quorum recovery against an Etcd
that reports QuorumLost, naming the member the example confirms).

We test these aspects: every example parses into its model; every request's Etcd is an example too; the webhook
admits each request; the demo's --help names every example file."""

from __future__ import annotations

import copy
import pathlib
import subprocess
import sys
from typing import Any

import pytest
import yaml

from opsmanager.api import constants
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.webhook import validation

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "docs" / "examples").glob("*.yaml"))


def load(path: pathlib.Path) -> dict[str, Any]:
    return dict(yaml.safe_load(path.read_text()))


def etcds() -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in map(load, EXAMPLES) if o["kind"] == constants.ETCD_KIND}


def test_there_are_examples_and_each_parses_into_its_model() -> None:
    assert len(EXAMPLES) >= 6
    for path in EXAMPLES:
        obj = load(path)
        model = etcd_api.Etcd if obj["kind"] == constants.ETCD_KIND else ops_api.EtcdOpsRequest
        model.model_validate(obj)


@pytest.mark.parametrize("path", [p for p in EXAMPLES if load(p)["kind"] == constants.OPS_KIND], ids=lambda p: p.name)
def test_each_request_is_admitted_against_its_etcd(path: pathlib.Path) -> None:
    request = load(path)
    db = copy.deepcopy(etcds()[request["spec"]["databaseRef"]["name"]])
    if request["spec"]["type"] == constants.OPS_TYPE_RECOVER_FROM_QUORUM_LOSS:
        survivor = request["spec"]["recoverFromQuorumLoss"]["confirmMember"]
        db["status"] = {"conditions": [{"type": "QuorumLost", "status": "True", "reason": "QuorumLost",
                                        "message": "", "lastTransitionTime": "2026-12-02T10:00:00Z"}],
                        "quorumLoss": {"since": "2026-12-02T10:00:00Z", "survivor": survivor,
                                       "answering": {survivor: 7}}}
    verdict = validation.validate_opsrequest("CREATE", request, None, namespace=request["metadata"]["namespace"],
                                             lookup=validation.InMemoryEtcdLookup([db]))
    assert verdict.allowed, verdict.message


def test_the_demo_help_shows_how_to_try_each_example() -> None:
    out = subprocess.run([sys.executable, "-m", "e2e.demo", "--help"], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout
    for path in EXAMPLES:
        assert f"docs/examples/{path.name}" in out, path.name
