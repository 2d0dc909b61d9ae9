"""Plans: which TLS operation a request is, how it folds into the Etcd, and the ordered steps of each."""

from __future__ import annotations

from typing import Any

import pytest

from opsmanager.api import constants
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.ops import operations, plan
from opsmanager.ops.operations.reconfigure_tls import plans as tls_plans


def db(tls: dict[str, Any] | None = None) -> etcd_api.Etcd:
    spec: dict[str, Any] = {"version": "3.5.1"}
    if tls is not None:
        spec["tls"] = tls
    return etcd_api.Etcd.model_validate({"metadata": {"name": "db", "namespace": "ns"}, "spec": spec})


def req(**tls: Any) -> ops_api.EtcdOpsRequest:
    return ops_api.EtcdOpsRequest.model_validate(
        {"metadata": {"name": "r"}, "spec": {"type": "ReconfigureTLS", "databaseRef": {"name": "db"}, "tls": tls}}
    )


CA = {"issuerRef": {"name": "ca", "kind": "Issuer"}}


def conditions(p: plan.Plan) -> list[str]:
    return [s.condition for s in p.steps]


def test_add_tls_dual_listeners_then_peer_urls_then_https_only() -> None:
    p = operations.plan_for(db(), req(issuerRef={"name": "ca"}))
    assert p.change is tls_plans.TLSChange.ADD
    assert conditions(p) == ["Running", "CertificateSynced", "TLSListenersAdded", "PeerURLsUpdated",
                             "UpdateStatefulSet", "RestartPods", "UpdateDatabase"]
    dual = p.steps[2].wiring
    assert dual is not None and dual.client_schemes == ("http", "https") and dual.advertised_peer_scheme == "http"
    assert p.steps[3].peer_scheme == "https"
    final = p.steps[4].wiring
    assert final is not None and final.peer_schemes == ("https",)
    assert p.steps[5].verify_served_certificates


def test_remove_tls_is_the_reverse() -> None:
    p = operations.plan_for(db(CA), req(remove=True))
    assert p.change is tls_plans.TLSChange.REMOVE and p.desired_tls is None
    assert conditions(p) == ["Running", "PlaintextListenersAdded", "PeerURLsUpdated", "UpdateStatefulSet",
                             "RestartPods", "UpdateDatabase"]
    assert p.steps[1].wiring is not None and p.steps[1].wiring.advertised_peer_scheme == "https"
    assert p.steps[2].peer_scheme == "http"
    assert p.steps[3].wiring is not None and p.steps[3].wiring.tls is None


def test_rotate_issues_first_then_verifies_what_is_served_without_a_roll() -> None:
    p = operations.plan_for(db(CA), req(rotateCertificates=True))
    assert conditions(p) == ["Running", "IssueCertificatesSucceeded", "CertificateSynced",
                             "ServedCertificatesVerified", "UpdateDatabase"]
    assert [s.kind for s in p.steps if s.kind in (plan.StepKind.ROLL, plan.StepKind.ROLL_PASS,
                                                   plan.StepKind.APPLY_STATEFULSET)] == []
    verify = p.steps[3]
    assert verify.kind is plan.StepKind.VERIFY_SERVED and verify.verify_served_certificates
    assert verify.tls == p.desired_tls  # the same issuer: rotate never changes the CA


def test_issuer_change_widens_then_swaps_leaves_then_narrows() -> None:
    p = operations.plan_for(db(CA), req(issuerRef={"name": "new-ca", "kind": "ClusterIssuer"}))
    assert p.change is tls_plans.TLSChange.ISSUER
    assert conditions(p) == ["Running", "TrustBundleWidened", "CertificateSynced", "UpdateStatefulSet",
                             "RestartPods", "TrustBundleNarrowed", "UpdateDatabase"]
    assert p.steps[1].trust is plan.Trust.CURRENT_AND_DESIRED
    assert p.steps[5].trust is plan.Trust.DESIRED
    assert p.desired_tls is not None and p.desired_tls.issuer_ref is not None
    assert p.desired_tls.issuer_ref.name == "new-ca"


def test_per_certificate_issuer_override_counts_as_issuer_change() -> None:
    p = operations.plan_for(db(CA), req(certificates=[{"alias": "peer", "issuerRef": {"name": "other"}}]))
    assert p.change is tls_plans.TLSChange.ISSUER


def test_certificate_fields_under_the_same_issuer_is_one_pass_and_merges_by_alias() -> None:
    current = {**CA, "certificates": [{"alias": "server", "dnsNames": ["a.example"], "duration": "720h"}]}
    p = operations.plan_for(db(current), req(certificates=[{"alias": "server", "subject": {"organizations": ["acme"]}}]))
    assert p.change is tls_plans.TLSChange.UPDATE
    assert conditions(p) == ["Running", "CertificateSynced", "UpdateStatefulSet", "RestartPods", "UpdateDatabase"]
    server = p.desired_tls.certificate("server") if p.desired_tls else None
    assert server is not None
    assert server.dns_names == ["a.example"] and server.duration == "720h"
    assert server.subject is not None and server.subject.organizations == ["acme"]


def test_same_issuer_named_again_is_not_an_issuer_change() -> None:
    assert operations.plan_for(db(CA), req(issuerRef={"name": "ca"})).change is tls_plans.TLSChange.UPDATE


def test_restart_and_move_leader_plans() -> None:
    restart = ops_api.EtcdOpsRequest.model_validate(
        {"metadata": {"name": "r"}, "spec": {"type": "Restart", "databaseRef": {"name": "db"}}})
    assert conditions(operations.plan_for(db(), restart)) == ["Running", "RestartPods"]
    move = ops_api.EtcdOpsRequest.model_validate(
        {"metadata": {"name": "m"}, "spec": {"type": "MoveLeader", "databaseRef": {"name": "db"}}})
    p = operations.plan_for(db(), move)
    assert conditions(p) == [constants.COND_ETCD_LEADER_MOVED] and not p.pauses


def test_condition_types_are_unique_in_every_plan() -> None:
    for p in (
        operations.plan_for(db(), req(issuerRef={"name": "ca"})),
        operations.plan_for(db(CA), req(remove=True)),
        operations.plan_for(db(CA), req(rotateCertificates=True)),
        operations.plan_for(db(CA), req(issuerRef={"name": "x"})),
    ):
        assert len(set(conditions(p))) == len(p.steps)


def test_reconfigure_tls_without_tls_is_rejected() -> None:
    bad = ops_api.EtcdOpsRequest.model_validate(
        {"metadata": {"name": "r"}, "spec": {"type": "ReconfigureTLS", "databaseRef": {"name": "db"}}})
    with pytest.raises(ValueError, match="spec.tls is nil"):
        operations.plan_for(db(), bad)


def test_remove_or_rotate_without_tls_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="tls.remove needs TLS enabled"):
        operations.plan_for(db(), req(remove=True))
    with pytest.raises(ValueError, match="tls.rotateCertificates needs TLS enabled"):
        operations.plan_for(db(), req(rotateCertificates=True))


BYO = {"externalSecrets": {"server": "u-server", "peer": "u-peer", "client": "u-client"}}


def test_handover_from_user_secrets_widens_releases_verifies_narrows_without_a_middle_roll() -> None:
    p = operations.plan_for(db(BYO), req(issuerRef={"name": "new-ca", "kind": "Issuer"}))
    assert p.change is tls_plans.TLSChange.HANDOVER
    assert conditions(p) == ["Running", "TrustBundleWidened", "CertificateSynced", "ServedCertificatesVerified",
                             "TrustBundleNarrowed", "UpdateDatabase"]
    widen, narrow = p.steps[1], p.steps[4]
    assert widen.trust is plan.Trust.CURRENT_AND_DESIRED and narrow.trust is plan.Trust.DESIRED
    # Both passes know what they hand over: skipped at run time when the issuer's CA is the user's CA.
    assert widen.handover_from is not None and widen.handover_from.external_secrets is not None
    assert narrow.handover_from == widen.handover_from
    assert not any(s.kind is plan.StepKind.ROLL for s in p.steps), "no roll between the passes"
    assert p.desired_tls is not None and p.desired_tls.external_secrets is None
    assert p.desired_tls.issuer_ref is not None and p.desired_tls.issuer_ref.name == "new-ca"


def test_an_issuer_change_carries_no_handover() -> None:
    p = operations.plan_for(db(CA), req(issuerRef={"name": "new-ca", "kind": "Issuer"}))
    assert all(getattr(s, "handover_from", None) is None for s in p.steps)
def test_the_rotate_variant_is_chosen_in_one_pure_function_from_what_was_observed() -> None:
    assert tls_plans.rotate_variant(tls_plans.RotateObservation()) is tls_plans.RotateVariant.HOT_RELOAD
    assert tls_plans.rotate_variant(tls_plans.RotateObservation(untrusted=("ns/db-peer-issued",))) is \
        tls_plans.RotateVariant.CA_ROLLOVER
    assert tls_plans.rotate_variant(tls_plans.RotateObservation(issuer_ca_unloaded=True)) is tls_plans.RotateVariant.CA_ROLLOVER


def test_the_ca_rollover_plan_widens_reissues_releases_verifies_narrows_and_never_changes_the_spec() -> None:
    p = operations.plan_for(db(CA), req(rotateCertificates=True), tls_plans.RotateVariant.CA_ROLLOVER)
    assert [s.condition for s in p.steps] == [
        "Running", "TrustBundleWidened", "IssueCertificatesSucceeded", "CertificateSynced",
        "ServedCertificatesVerified", "TrustBundleNarrowed", "UpdateDatabase"]
    assert p.summary == "CARollover" and p.change is tls_plans.TLSChange.ROTATE and p.desired_tls == db(CA).spec.tls
    widen, narrow = p.steps[1], p.steps[5]
    assert (widen.trust, narrow.trust) == (plan.Trust.CURRENT_AND_RENEWED, plan.Trust.IN_USE)
    assert widen.release_loaded and narrow.release_loaded and p.steps[3].release_loaded
    assert widen.wiring == narrow.wiring  # the same template: a pass is a roll onto a new bundle, nothing else
    same = operations.plan_for(db(CA), req(rotateCertificates=True))
    assert same.variant is tls_plans.RotateVariant.HOT_RELOAD and "TrustBundleWidened" not in [
        s.condition for s in same.steps]
    other = operations.plan_for(db(CA), req(remove=True), tls_plans.RotateVariant.CA_ROLLOVER)
    assert other.variant is None and other.change is tls_plans.TLSChange.REMOVE  # only rotates have variants


def test_rescue_is_chosen_by_expiry_never_by_reachability() -> None:
    leaf = ("db-0 client notAfter 2026-01-01T00:00:00Z",)
    ca = ("CN=ca notAfter 2026-01-01T00:00:00Z",)
    table = [
        (tls_plans.RotateObservation(), tls_plans.RotateVariant.HOT_RELOAD),  # valid, however unreachable (nothing observed)
        (tls_plans.RotateObservation(expired_leaves=leaf), tls_plans.RotateVariant.RESCUE_LEAVES),
        (tls_plans.RotateObservation(expired_leaves=leaf, untrusted=("ns/s",)), tls_plans.RotateVariant.RESCUE_LEAVES),
        (tls_plans.RotateObservation(expired_leaves=leaf, issuer_ca_unloaded=True), tls_plans.RotateVariant.RESCUE_CA),
        (tls_plans.RotateObservation(expired_cas=ca), tls_plans.RotateVariant.RESCUE_CA),
        (tls_plans.RotateObservation(expired_cas=ca, expired_leaves=leaf, issuer_ca_unloaded=True),
         tls_plans.RotateVariant.RESCUE_CA),
        (tls_plans.RotateObservation(issuer_ca_unloaded=True), tls_plans.RotateVariant.CA_ROLLOVER),
    ]
    for seen, want in table:
        assert tls_plans.rotate_variant(seen) is want, seen
    assert tls_plans.rescue_reason(tls_plans.RotateObservation()) == ""
    assert tls_plans.rescue_reason(tls_plans.RotateObservation(issuer_ca_unloaded=True)) == ""
    why = tls_plans.rescue_reason(tls_plans.RotateObservation(expired_leaves=leaf))
    assert why.startswith("RescueLeaves:") and leaf[0] in why and "no restart" in why
    many = tls_plans.rescue_reason(tls_plans.RotateObservation(expired_leaves=tuple(f"db-{i} peer" for i in range(6))))
    assert "and 2 more" in many and "db-5" not in many
    assert "CA every member loaded has expired" in tls_plans.rescue_reason(tls_plans.RotateObservation(expired_cas=ca))


def test_the_rescue_plans_reissue_release_and_restart_only_for_an_expired_ca() -> None:
    leaves = operations.plan_for(db(CA), req(rotateCertificates=True), tls_plans.RotateVariant.RESCUE_LEAVES)
    assert conditions(leaves) == ["Running", "RescuePlanChosen", "IssueCertificatesSucceeded", "CertificateSynced",
                                  "ServedCertificatesVerified", "UpdateDatabase"]
    assert leaves.summary == "RescueLeaves" and leaves.desired_tls == db(CA).spec.tls
    assert not any(s.kind in (plan.StepKind.ROLL, plan.StepKind.ROLL_PASS, plan.StepKind.RESTART_ALL)
                   for s in leaves.steps)
    assert leaves.steps[3].trust is plan.Trust.KEEP  # released against the bundle the members loaded
    ca = operations.plan_for(db(CA), req(rotateCertificates=True), tls_plans.RotateVariant.RESCUE_CA)
    assert conditions(ca) == ["Running", "RescuePlanChosen", "IssueCertificatesSucceeded", "CertificateSynced",
                              "RestartPods", "ServedCertificatesVerified", "UpdateDatabase"]
    assert ca.steps[3].trust is plan.Trust.DESIRED  # any CA; the bundle rewritten from the released CAs
    assert ca.steps[4].kind is plan.StepKind.RESTART_ALL and ca.summary == "RescueCA"
    assert [s.kind for s in ca.steps].count(plan.StepKind.RESTART_ALL) == 1


# --- RotateAuth: where the password is staged and which Secret the Etcd names at the end --------------------------

def _rotate(secret_ref: str | None = None, origin: dict[str, Any] | None = None) -> ops_api.EtcdOpsRequest:
    spec: dict[str, Any] = {"type": "RotateAuth", "databaseRef": {"name": "db"}}
    if secret_ref is not None:
        spec["authentication"] = {"secretRef": {"name": secret_ref}}
    obj: dict[str, Any] = {"metadata": {"name": "r"}, "spec": spec}
    if origin is not None:
        obj["status"] = {"origin": {"observedAt": "2026-12-02T10:00:00Z", **origin}}
    return ops_api.EtcdOpsRequest.model_validate(obj)


def _with_auth(secret: str | None) -> etcd_api.Etcd:
    d = db()
    return d if secret is None else d.model_copy(update={"spec": d.spec.model_copy(
        update={"auth_secret": etcd_api.AuthSecret(name=secret)})})


@pytest.mark.parametrize(("current", "ref", "staging", "final", "running"), [
    (None, None, "db-auth", "db-auth", "turning authentication on"),  # generated into <etcd>-auth
    (None, "mine", "mine", "mine", "turning authentication on"),  # the user's Secret already holds it
    ("db-auth", None, "db-auth", "db-auth", "rotating the root password"),
    ("db-auth", "mine", "db-auth", "mine", "rotating the root password"),  # staged where clients read, then moved
])
def test_rotate_auth_stages_where_clients_read_and_ends_on_the_named_secret(
        current: str | None, ref: str | None, staging: str, final: str, running: str) -> None:
    p = operations.plan_for(_with_auth(current), _rotate(ref))
    assert conditions(p) == ["Running", "UpdateCredential", "EtcdCredentialApplied", "UpdateDatabase"]
    assert running in p.steps[0].message
    assert p.auth_secrets == (staging, final)
    step = p.steps[1]
    assert isinstance(step, plan.UpdateCredential) and step.staging_secret == staging and step.source_secret == ref
    assert not any(isinstance(s, (plan.Roll, plan.RollPass, plan.Restart)) for s in p.steps)  # no member restarts


def test_rotate_auth_plans_from_the_secret_recorded_when_it_started() -> None:
    # its own UpdateDatabase renamed spec.authSecret to "mine": the plan still stages where it started
    p = operations.plan_for(_with_auth("mine"), _rotate("mine", origin={"authSecret": "db-auth"}))
    assert p.auth_secrets == ("db-auth", "mine")
    # authentication was off when it started (no authSecret recorded), though spec.authSecret is set by now
    p = operations.plan_for(_with_auth("db-auth"), _rotate(origin={}))
    assert p.auth_secrets == ("db-auth", "db-auth") and "turning authentication on" in p.steps[0].message


def test_members_rejoin_upwards_then_downwards_so_the_ordinal_range_never_has_a_gap() -> None:
    from opsmanager.ops.steps import recover_quorum

    names = [f"db-{i}" for i in range(5)]
    assert recover_quorum.rejoin_order(names, "db-2") == ["db-3", "db-4", "db-1", "db-0"]
    assert recover_quorum.rejoin_order(names, "db-0") == ["db-1", "db-2", "db-3", "db-4"]
    assert recover_quorum.rejoin_order(names, "db-4") == ["db-3", "db-2", "db-1", "db-0"]


@pytest.mark.parametrize(("recover", "fragment"), [
    (None, "confirmMember can not be empty"),
    ({"confirmMember": "db-9"}, "is not a member of db"),
    ({"member": "db-1", "confirmMember": "db-0"}, "is not spec.recoverFromQuorumLoss.member db-1"),
])
def test_a_recovery_plan_needs_a_confirmed_member_of_the_cluster(recover: dict[str, Any] | None,
                                                                 fragment: str) -> None:
    spec: dict[str, Any] = {"type": "RecoverFromQuorumLoss", "databaseRef": {"name": "db"}}
    if recover is not None:
        spec["recoverFromQuorumLoss"] = recover
    with pytest.raises(ValueError, match=fragment):
        operations.plan_for(db(), ops_api.EtcdOpsRequest.model_validate({"metadata": {"name": "r"}, "spec": spec}))
    ok = operations.plan_for(db(), ops_api.EtcdOpsRequest.model_validate({"metadata": {"name": "r"}, "spec": {
        **spec, "recoverFromQuorumLoss": {"confirmMember": "db-1"}}}))
    assert conditions(ok) == ["Running", "QuorumLossConfirmed", "SurvivorForcedNewCluster", "MembersRejoined",
                              "UpdateDatabase"]
