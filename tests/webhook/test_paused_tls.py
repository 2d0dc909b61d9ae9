"""The webhook keeps ``spec.tls`` of an Etcd that an EtcdOpsRequest holds paused for that request (issue 11, part 7).

We test these aspects, on the pure rule (``validation.validate_etcd``) with the in-memory lookup:
- allowed: an Etcd that is not paused; one paused by someone else (a person); a request-held Etcd whose update
  leaves ``spec.tls`` as it is (another field changes), without even reading the request;
- allowed: exactly what the holding request's ``UpdateDatabase`` writes — add, rotate (nothing), issuer change,
  certificate fields, remove —, computed by the engine's own ``tls_plans.desired_tls``; also spelled without the
  defaults, and folded into the ``spec.tls`` the engine recorded on the request when it started;
- refused with the request named: any other change of ``spec.tls`` while the request holds the Etcd (a change on
  top of the request's, a change during a rotate or a Restart, the engine's write for another request);
- a request that is gone, being deleted or finished holds nothing: allowed; a lookup that fails is a 503 naming
  the request, never a guess;
- the AdmissionReview path hands the lookup to the rule.
The same through the sandbox API server with the real engine: ``test_paused_tls_e2e.py``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from opsmanager.api import conditions, constants, pause
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.ops.operations.reconfigure_tls import plans as tls_plans
from opsmanager.webhook import admission, validation

NS = "demo"
ISSUER_A = {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": "ca-a"}
ISSUER_B = {"apiGroup": "cert-manager.io", "kind": "Issuer", "name": "ca-b"}
TLS_A = {"issuerRef": ISSUER_A}
PREFIX = 'Etcd.opsmanager.dev "db" is invalid: '
Obj = dict[str, Any]


def etcd(tls: Obj | None, *, paused_by: str | None = None, person: bool = False) -> Obj:
    spec: Obj = {"version": "3.5.1", "replicas": 3, "storageType": "Durable", "deletionPolicy": "Delete"}
    if tls is not None:
        spec["tls"] = copy.deepcopy(tls)
    obj: Obj = {"apiVersion": constants.ETCD_API_VERSION, "kind": constants.ETCD_KIND,
                "metadata": {"name": "db", "namespace": NS}, "spec": spec, "status": {}}
    if paused_by is not None:
        obj["status"] = pause.pause({}, paused_by)
    if person:  # a pause somebody set by hand: any reason, any message
        obj["status"] = {"conditions": conditions.set_condition(None, constants.COND_PAUSED, constants.TRUE,
                                                                reason="Backup", message="nightly backup")}
    return obj


def request(name: str, type_: str = "ReconfigureTLS", *, tls: Obj | None = None, phase: str = "Progressing",
            tls_before: Any = ...) -> Obj:
    spec: Obj = {"type": type_, "databaseRef": {"name": "db"}}
    if tls is not None:
        spec["tls"] = tls
    obj: Obj = {"apiVersion": constants.OPS_API_VERSION, "kind": constants.OPS_KIND,
                "metadata": {"name": name, "namespace": NS}, "spec": spec, "status": {"phase": phase}}
    if tls_before is not ...:
        obj["status"]["origin"] = {"observedAt": "2026-12-02T10:00:00Z"}
        if tls_before is not None:
            obj["status"]["origin"]["tls"] = tls_before
    return obj


def with_tls(obj: Obj, tls: Obj | None) -> Obj:
    """``obj`` as a client would send it back with another ``spec.tls`` (None: removed)."""
    new = copy.deepcopy(obj)
    new["spec"].pop("tls", None)
    if tls is not None:
        new["spec"]["tls"] = copy.deepcopy(tls)
    return new


def engine_write(old: Obj, req: Obj) -> Obj | None:
    """What the engine's UpdateDatabase writes: ``tls_plans.desired_tls`` (the engine's name) of the Etcd's TLS."""
    current = etcd_api.Etcd.model_validate(old).spec.tls
    req_tls = ops_api.EtcdOpsRequest.model_validate(req).spec.tls
    assert req_tls is not None
    desired = tls_plans.desired_tls(current, req_tls)
    return desired.to_dict() if desired is not None else None


def update(old: Obj, new: Obj, *objects: Obj) -> validation.Verdict:
    return validation.validate_etcd("UPDATE", new, old, lookup=validation.InMemoryEtcdLookup(objects))


class FailingLookup:
    """A lookup whose API server is unreachable; also proves a rule did not need it (it would raise)."""

    def get_etcd(self, namespace: str, name: str) -> Obj | None:
        raise validation.EtcdLookupError("connection refused")

    def get_opsrequest(self, namespace: str, name: str) -> Obj | None:
        raise validation.EtcdLookupError("connection refused")


def forbidden(request_name: str) -> str:
    return PREFIX + (f"spec.tls: Forbidden: Etcd db is paused by EtcdOpsRequest {request_name}; spec.tls can "
                     f"change only through an EtcdOpsRequest once {request_name} has finished")


# --- allowed ---------------------------------------------------------------------------------------------------


def test_an_etcd_that_is_not_paused_may_change_its_tls() -> None:
    old = etcd(TLS_A)
    assert validation.validate_etcd("UPDATE", with_tls(old, {"issuerRef": ISSUER_B}), old,
                                    lookup=FailingLookup()).allowed


def test_a_pause_held_by_a_person_is_not_this_rules_business() -> None:
    old = etcd(TLS_A, person=True)
    assert validation.validate_etcd("UPDATE", with_tls(old, None), old, lookup=FailingLookup()).allowed


def test_an_update_that_leaves_tls_alone_is_allowed_without_reading_the_request() -> None:
    old = etcd(TLS_A, paused_by="rotate")
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 5
    new["metadata"]["labels"] = {"team": "storage"}
    assert validation.validate_etcd("UPDATE", new, old, lookup=FailingLookup()).allowed
    # the same TLS spelled without the defaults the mutating webhook fills in is the same TLS
    assert validation.validate_etcd("UPDATE", with_tls(old, {"issuerRef": {"name": "ca-a"}}), old,
                                    lookup=FailingLookup()).allowed


CERTS_BEFORE = {"issuerRef": ISSUER_A, "certificates": [{"alias": "server", "dnsNames": ["db.example"]}]}

ENGINE_WRITES = [
    pytest.param(None, {"issuerRef": ISSUER_A}, {"issuerRef": ISSUER_A}, id="add"),
    pytest.param(TLS_A, {"rotateCertificates": True}, TLS_A, id="rotate"),
    pytest.param(TLS_A, {"issuerRef": ISSUER_B}, {"issuerRef": ISSUER_B}, id="issuer-change"),
    pytest.param(CERTS_BEFORE, {"certificates": [{"alias": "client", "subject": {"organizations": ["ops"]}},
                                                 {"alias": "server", "duration": "720h"}]},
                 {"issuerRef": ISSUER_A, "certificates": [
                     {"alias": "server", "dnsNames": ["db.example"], "duration": "720h"},
                     {"alias": "client", "subject": {"organizations": ["ops"]}}]}, id="certificate-fields"),
    pytest.param(TLS_A, {"remove": True}, None, id="remove"),
]


@pytest.mark.parametrize(("before", "req_tls", "written"), ENGINE_WRITES)
def test_the_holding_requests_own_write_is_allowed(before: Obj | None, req_tls: Obj, written: Obj | None) -> None:
    old = etcd(before, paused_by="op")
    req = request("op", tls=req_tls, tls_before=before)
    write = engine_write(old, req)
    assert write == validation.engine_tls_write(old, req)
    if written is not None:  # the literal, read back through the models (defaults filled in)
        assert write == etcd_api.TLSConfig.model_validate(written).to_dict()
    else:
        assert write is None
    assert update(old, with_tls(old, write), req).allowed
    # the engine writes it once; the request still holds the Etcd until it finishes, and the write stays allowed
    assert update(with_tls(old, write), with_tls(old, write), req).allowed


def test_the_write_is_folded_into_the_tls_the_engine_recorded_when_the_request_started() -> None:
    # spec.tls gained a certificate between the request's start and its pause: the engine folds into what it
    # recorded (status.origin.tls), and so does the webhook
    old = etcd(CERTS_BEFORE, paused_by="op")
    req = request("op", tls={"issuerRef": ISSUER_B}, tls_before=TLS_A)
    assert update(old, with_tls(old, {"issuerRef": ISSUER_B}), req).allowed
    assert update(old, with_tls(old, {**CERTS_BEFORE, "issuerRef": ISSUER_B}), req).message == forbidden("op")


# --- refused ---------------------------------------------------------------------------------------------------

REFUSED = [
    pytest.param(None, "ReconfigureTLS", {"issuerRef": ISSUER_A}, {"issuerRef": ISSUER_B}, id="add-other-issuer"),
    pytest.param(None, "ReconfigureTLS", {"issuerRef": ISSUER_A},
                 {"issuerRef": ISSUER_A, "certificates": [{"alias": "peer", "duration": "1h"}]},
                 id="add-and-more"),
    pytest.param(TLS_A, "ReconfigureTLS", {"rotateCertificates": True}, {"issuerRef": ISSUER_B},
                 id="issuer-during-rotate"),
    pytest.param(TLS_A, "ReconfigureTLS", {"remove": True}, {"issuerRef": ISSUER_B}, id="other-than-remove"),
    pytest.param(TLS_A, "ReconfigureTLS", {"issuerRef": ISSUER_B}, None, id="remove-during-issuer-change"),
    pytest.param(TLS_A, "Restart", None, None, id="remove-during-restart"),
    pytest.param(None, "Restart", None, TLS_A, id="add-during-restart"),
]


@pytest.mark.parametrize(("before", "type_", "req_tls", "new_tls"), REFUSED)
def test_any_other_tls_change_is_refused_naming_the_request(
        before: Obj | None, type_: str, req_tls: Obj | None, new_tls: Obj | None) -> None:
    old = etcd(before, paused_by="op-1")
    verdict = update(old, with_tls(old, new_tls), request("op-1", type_, tls=req_tls))
    assert not verdict.allowed and verdict.code == 422 and verdict.reason == "Invalid"
    assert verdict.message == forbidden("op-1")
    assert [e.cause() for e in verdict.errors] == [{
        "reason": "FieldValueForbidden", "field": "spec.tls",
        "message": forbidden("op-1").removeprefix(PREFIX + "spec.tls: "),
    }]


def test_the_write_of_another_request_is_refused() -> None:
    old = etcd(TLS_A, paused_by="rotate")
    other = request("change-issuer", tls={"issuerRef": ISSUER_B})
    verdict = update(old, with_tls(old, engine_write(old, other)), request("rotate", tls={"rotateCertificates": True}),
                     other)
    assert verdict.message == forbidden("rotate")


def test_the_denial_comes_with_the_other_errors_of_the_object() -> None:
    old = etcd(TLS_A, paused_by="op")
    new = with_tls(old, {"issuerRef": ISSUER_B})
    new["spec"]["replicas"] = 0
    verdict = update(old, new, request("op", tls={"rotateCertificates": True}))
    assert [e.field for e in verdict.errors] == ["spec.replicas", "spec.tls"]


# --- a request that cannot hold, or cannot be read -------------------------------------------------------------


@pytest.mark.parametrize("gone", ["missing", "Successful", "Failed", "Skipped", "deleting"])
def test_a_request_that_is_gone_or_finished_holds_nothing(gone: str) -> None:
    old = etcd(TLS_A, paused_by="op")
    new = with_tls(old, {"issuerRef": ISSUER_B})
    if gone == "missing":
        assert update(old, new).allowed
        return
    req = request("op", tls={"rotateCertificates": True}, phase="Progressing" if gone == "deleting" else gone)
    if gone == "deleting":
        req["metadata"]["deletionTimestamp"] = "2026-12-01T01:00:00Z"
    assert update(old, new, req).allowed


def test_a_lookup_failure_is_a_503_naming_the_request_not_a_guess() -> None:
    old = etcd(TLS_A, paused_by="op")
    verdict = validation.validate_etcd("UPDATE", with_tls(old, None), old, lookup=FailingLookup())
    assert not verdict.allowed and verdict.code == 503 and verdict.reason == "ServiceUnavailable"
    assert verdict.message == ("could not validate Etcd demo/db: it is paused by EtcdOpsRequest op and looking that "
                               "request up failed: connection refused; retry when the API server is reachable")


def test_the_admission_review_hands_the_lookup_to_the_rule() -> None:
    old = etcd(TLS_A, paused_by="op")
    lookup = validation.InMemoryEtcdLookup([request("op", tls={"rotateCertificates": True})])
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "operation": "UPDATE", "namespace": NS, "name": "db",
        "object": with_tls(old, None), "oldObject": old}}
    answer = admission.review("/validate-etcd", json.dumps(body).encode(), lookup)["response"]
    assert answer["allowed"] is False and answer["status"]["message"] == forbidden("op")
    lookup.delete(NS, "op", kind=constants.OPS_KIND)
    assert admission.review("/validate-etcd", json.dumps(body).encode(), lookup)["response"]["allowed"] is True
