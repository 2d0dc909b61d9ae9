"""The plans of the TLS family (``ReconfigureTLS``: add, remove, issuer change, certificate fields, rotate, CA
rollover, rescue, handover) — pure data, as every plan (:mod:`opsmanager.ops.plan`).

A TLS plan is computed from the Etcd's ``spec.tls`` as it was when the request started (``status.origin.tls``;
the write-back changes ``spec.tls`` near the end), and a rotate's variant from what was observed then
(``status.origin.plan``, :mod:`.observe`), so recomputing it on every reconcile gives the same list.

The TLS plans are the product. Each exists because the naive order fails on a live cluster (measured on etcd
3.5.1, ``shared/reference/etcd-measured-3.5.1.md``):

- **add TLS** — restarting members straight onto https-only URLs breaks a 3-member cluster for good once the
  third member restarts: the registered peer URLs stay ``http://``. So: issue certificates; pass 1 listens on
  both schemes (client http+https on 2379, peer http 2380 + https 2382) with TLS files loaded; then
  ``member update`` each peer URL to https, one member at a time; pass 2 removes the http listeners.
- **remove TLS** — the same in reverse; then the Certificates and Secrets this operator created are deleted.
- **issuer (CA) change** — etcd reads CA files only at start, so a roll onto the new CA alone leaves old- and
  new-CA members unable to talk (quorum lost, 3–8 s write stalls, measured). So: pass 1 trusts old+new; then the
  leaves come from the new issuer (hot-reloaded, and rolled to force fresh connections); pass 3 drops the old CA.
- **rotate** (the CA never changes: same issuer) — re-issue every certificate (cert-manager's ``Issuing=True``),
  wait for a higher revision and complete material, then *no roll*: etcd re-reads its leaf and key on every new
  handshake, so once the kubelet has delivered the new files each member serves them. ``ServedCertificatesVerified``
  checks that with fresh handshakes on the client and the peer port of every member; a member still serving the
  previous leaf after the delivery bound (``--certificate-delivery-timeout``) is restarted alone, leader-aware, and
  only then does ``RestartPods`` appear. A roll here would cost an election-free but needless restart of every
  member (and, done naively, write stalls and elections — measured in ``docs/benchmarks.md``).
- **CA rollover** (a rotate whose sources chain to a CA not every member has loaded — cert-manager renewed the
  CA behind the Issuer, or a user replaced the CA Secret; :func:`rotate_variant`) — a hot reload would partition
  the cluster (etcd loads CA files only at start), so: widen the bundle to old + new CA with a leader-aware roll
  (the leaves released meanwhile only when every member has loaded their CA); re-issue and release the leaves
  through the gate with the CAs every member has now loaded (no restart: etcd re-reads leaves per handshake);
  verify by handshake that every member serves them; then narrow the bundle to the CAs still in use and roll.
  The provisioner files such a request itself (``ops.opsmanager.dev/trigger: ca-rollover``).
- **certificate fields under the same issuer** — one pass.
- **handover** (user-provided Secrets → cert-manager) — the issuer change's widen / new leaves / narrow,
  without the roll in the middle; widen and narrow are skipped when the issuer's CA is the user's CA (no restart).
"""


from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence

from opsmanager.api import common, constants, rules, tlschange
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.cluster import render
from opsmanager.ops import plan


class TLSChange(enum.Enum):
    ADD = "AddTLS"
    REMOVE = "RemoveTLS"
    ROTATE = "RotateCertificates"
    UPDATE = "UpdateCertificates"  # certificate fields change, same issuer(s)
    ISSUER = "ChangeIssuer"  # a different issuer for at least one certificate
    HANDOVER = "HandoverToIssuer"  # user-provided Secrets (externalSecrets) → cert-manager



class RotateVariant(enum.Enum):
    """Which plan a ``rotateCertificates`` request runs (observed once, persisted as ``status.origin.plan``)."""

    HOT_RELOAD = "Rotate"  # same CA: re-issue, release, verify served; no restart
    CA_ROLLOVER = "CARollover"  # a source chains to a CA not every member has loaded: widen, release, narrow
    RESCUE_LEAVES = "RescueLeaves"  # served leaves expired, loaded CA valid: re-issue, release all, verify; no restart
    RESCUE_CA = "RescueCA"  # the members' CA expired: new bundle + leaves, restart every member together, quorum


RESCUE_VARIANTS = (RotateVariant.RESCUE_LEAVES, RotateVariant.RESCUE_CA)


@dataclasses.dataclass(frozen=True)
class RotateObservation:
    """What the engine saw when a rotate request started. ``untrusted``: the sources (``ns/name``) the gate holds
    as ``UntrustedCA`` against the CAs every member has loaded; ``issuer_ca_unloaded``: a CA Issuer of the Etcd
    signs with a CA not every member has loaded (its leaves would be held)."""

    untrusted: tuple[str, ...] = ()
    issuer_ca_unloaded: bool = False
    # Rescue — EXPIRY, never reachability: ``expired_leaves``: the leaves members serve whose notAfter is
    # past ("<member> <port> notAfter <time>", read by a handshake that does not verify, or from status.tls when a
    # member does not answer); ``expired_cas``: the CAs every member has loaded whose notAfter is past, when *all*
    # of them are (the members then trust nothing valid).
    expired_leaves: tuple[str, ...] = ()
    expired_cas: tuple[str, ...] = ()


def rotate_variant(seen: RotateObservation) -> RotateVariant:
    """The plan of a rotate request, from what was observed when it started — the one place the rotate variants
    are chosen. Decided by expiry, never by reachability (an unreachable member adds nothing here):

    - the members' loaded CA has expired → ``RESCUE_CA`` (whatever the issuer signs with now);
    - a served leaf has expired and the issuer's CA is not loaded → ``RESCUE_CA`` too (a rollover's leader-aware
      rolls need health checks that cannot handshake with an expired leaf);
    - a served leaf has expired, the CA is valid and loaded → ``RESCUE_LEAVES``;
    - a source or the issuer on a CA not loaded by every member → ``CA_ROLLOVER``; otherwise ``HOT_RELOAD``."""
    if seen.expired_cas:
        return RotateVariant.RESCUE_CA
    if seen.expired_leaves:
        return RotateVariant.RESCUE_CA if seen.issuer_ca_unloaded else RotateVariant.RESCUE_LEAVES
    if seen.untrusted or seen.issuer_ca_unloaded:
        return RotateVariant.CA_ROLLOVER
    return RotateVariant.HOT_RELOAD


def rescue_reason(seen: RotateObservation) -> str:
    """Why the rescue plan was chosen (the ``RescuePlanChosen`` message): what expired, naming member, port and
    notAfter; empty when :func:`rotate_variant` chooses no rescue."""
    variant = rotate_variant(seen)
    if variant not in RESCUE_VARIANTS:
        return ""
    parts = []
    if seen.expired_cas:
        parts.append(f"the CA every member loaded has expired ({'; '.join(seen.expired_cas)})")
    if seen.expired_leaves:
        shown = "; ".join(seen.expired_leaves[:4]) + (f"; and {len(seen.expired_leaves) - 4} more"
                                                        if len(seen.expired_leaves) > 4 else "")
        parts.append(f"served certificates have expired ({shown})")
    if seen.issuer_ca_unloaded:
        parts.append("the issuer signs with a CA the members have not loaded")
    how = ("re-issue and release every certificate at once, no restart" if variant is RotateVariant.RESCUE_LEAVES
           else "new trust bundle and certificates, then every member restarted together")
    return f"{variant.value}: {', '.join(parts)}; {how}"




# --- folding the request into the Etcd (KubeDB's altDB) --------------------------------------------------------


def _issuer_key(ref: common.IssuerRef | None) -> tuple[str, str, str] | None:
    return None if ref is None else (ref.api_group, ref.kind, ref.name)


def effective_issuer(tls: etcd_api.TLSConfig, alias: str) -> tuple[str, str, str] | None:
    """The issuer of an alias as a comparable key (the renderer's rule: certificate's issuerRef, else the TLS's)."""
    return _issuer_key(render.issuer_of(tls, alias))


# The fold itself is the API's one rule (the webhook needs it too, and may not import the engine).
desired_tls = tlschange.desired_tls


def classify(current: etcd_api.TLSConfig | None, req: ops_api.ReconfigureTLSSpec) -> TLSChange:
    """Which of the TLS operations a (valid) request is, given the Etcd's current ``spec.tls``."""
    if req.remove:
        return TLSChange.REMOVE
    if req.rotate_certificates:
        return TLSChange.ROTATE
    if current is None:
        return TLSChange.ADD
    desired = desired_tls(current, req)
    assert desired is not None
    if current.external_secrets is not None and desired.external_secrets is None:
        return TLSChange.HANDOVER
    for alias in constants.CERT_ALIASES:
        if effective_issuer(current, alias) != effective_issuer(desired, alias):
            return TLSChange.ISSUER
    return TLSChange.UPDATE


def _final_roll(tls: etcd_api.TLSConfig | None, *, verify: bool, what: str) -> tuple[plan.Step, plan.Step]:
    wiring = render.Wiring.steady(tls)
    return (
        plan.ApplyStatefulSet(constants.COND_UPDATE_STATEFULSET, f"Successfully re-rendered the StatefulSet {what}",
                              wiring=wiring, tls=tls),
        plan.Roll(constants.COND_RESTART_PODS, f"Successfully restarted the etcd members {what}", wiring=wiring,
                  verify_served_certificates=verify, tls=tls),
    )


def _sync_certificates(tls: etcd_api.TLSConfig | None, *, source: str = "",
                       trust: plan.Trust = plan.Trust.KEEP) -> plan.Step:
    return plan.SyncCertificates(constants.COND_CERTIFICATE_SYNCED,
                                 f"Successfully synced all the etcd certificates{source}", trust=trust, tls=tls)


def _ca_rollover_steps(current: etcd_api.TLSConfig) -> list[plan.Step]:
    wiring = render.Wiring.steady(current)
    return [
        plan.running("Etcd ops request is rolling the etcd CA over"),
        plan.RollPass(constants.COND_TRUST_BUNDLE_WIDENED, "Every member trusts the old and the renewed CA",
                      wiring=wiring, trust=plan.Trust.CURRENT_AND_RENEWED, tls=current, release_loaded=True),
        plan.Issue(constants.COND_ISSUE_CERTIFICATES_SUCCEEDED,
                   "Successfully re-issued every certificate from the renewed CA", tls=current),
        plan.SyncCertificates(constants.COND_CERTIFICATE_SYNCED,
                              "Released the certificates of the renewed CA (every member has loaded it)",
                              tls=current, release_loaded=True),
        plan.VerifyServed(constants.COND_SERVED_CERTIFICATES_VERIFIED,
                          "Every member serves its certificate of the renewed CA on the client and the peer port",
                          tls=current),
        plan.RollPass(constants.COND_TRUST_BUNDLE_NARROWED, "Every member trusts only the CAs still in use",
                      wiring=wiring, trust=plan.Trust.IN_USE, tls=current, release_loaded=True),
        plan.update_database("Successfully rolled the etcd CA over"),
    ]


def _rescue_steps(current: etcd_api.TLSConfig, variant: RotateVariant) -> list[plan.Step]:
    """The rescue plans. Leaves: every certificate re-issued at once, every leaf released at once
    through the gate against the trust bundle (the gate judges the *source*: a fresh valid leaf passes whatever
    the mounted one is), verified by handshake on both ports; etcd re-reads leaves per handshake, so no restart.
    CA: the leaves released against any CA and the bundle rewritten from the released CAs, then every member
    restarted together (members cannot talk across CAs: a rolling restart only loses members), quorum awaited
    (bounded by the step timeout), the served leaves verified."""
    chosen = plan.RescueChosen(constants.COND_RESCUE_PLAN_CHOSEN,
                               "The certificates have expired: the rescue plan runs")
    issue = plan.Issue(constants.COND_ISSUE_CERTIFICATES_SUCCEEDED, "Successfully re-issued every certificate",
                       tls=current)
    verify = plan.VerifyServed(constants.COND_SERVED_CERTIFICATES_VERIFIED,
                               "Every member serves a valid certificate on the client and the peer port",
                               tls=current)
    if variant is RotateVariant.RESCUE_LEAVES:
        return [
            plan.running("Etcd ops request is rescuing expired certificates (no restart)"),
            chosen, issue,
            _sync_certificates(current, source=" (every leaf released at once)"),
            verify,
            plan.update_database("Successfully rescued the expired etcd certificates"),
        ]
    return [
        plan.running("Etcd ops request is rescuing an expired etcd CA"),
        chosen, issue,
        _sync_certificates(current, source=" and wrote the new trust bundle", trust=plan.Trust.DESIRED),
        plan.RestartAll(constants.COND_RESTART_PODS,
                        "Restarted every member together onto the new CA; quorum is back"),
        verify,
        plan.update_database("Successfully rescued the etcd cluster from an expired CA"),
    ]


# Each TLS change's steps, from the TLS the Etcd had when the request started (``current``), the TLS it ends with
# (``desired``) and, for a rotate, the variant observed then.
StepsOf = Callable[[etcd_api.TLSConfig | None, etcd_api.TLSConfig | None, RotateVariant], Sequence[plan.Step]]


def _switch_scheme(listeners: plan.Step, scheme: str, final: etcd_api.TLSConfig | None, *, verify: bool,
                   what: str) -> tuple[plan.Step, ...]:
    """What adding and removing TLS share: every member listens on both schemes (``listeners``), then each peer URL
    is registered as ``scheme``, then the last roll leaves one scheme only."""
    return (
        listeners,
        plan.UpdatePeerURLs(constants.COND_PEER_URLS_UPDATED, f"Every member's peer URL is registered as {scheme}",
                            peer_scheme=scheme),
        *_final_roll(final, verify=verify, what=what),
    )


def _add_steps(current: etcd_api.TLSConfig | None, desired: etcd_api.TLSConfig | None,
               variant: RotateVariant) -> Sequence[plan.Step]:
    assert desired is not None
    listeners = plan.RollPass(constants.COND_TLS_LISTENERS_ADDED,
                              "Every member listens on http and https (peer https on 2382); peer URLs still http",
                              wiring=render.Wiring.dual(desired, advertised_peer_scheme="http"),
                              trust=plan.Trust.DESIRED, tls=desired)
    return (
        plan.running("Etcd ops request is adding TLS"),
        _sync_certificates(desired, trust=plan.Trust.DESIRED),
        *_switch_scheme(listeners, "https", desired, verify=True, what="with TLS only"),
        plan.update_database("Successfully updated the Etcd TLS configuration"),
    )


def _remove_steps(current: etcd_api.TLSConfig | None, desired: etcd_api.TLSConfig | None,
                  variant: RotateVariant) -> Sequence[plan.Step]:
    assert current is not None
    listeners = plan.RollPass(constants.COND_PLAINTEXT_LISTENERS_ADDED,
                              "Every member listens on https and http (peer http on 2380); peer URLs still https",
                              wiring=render.Wiring.dual(current, advertised_peer_scheme="https"), tls=current)
    return (
        plan.running("Etcd ops request is removing TLS"),
        *_switch_scheme(listeners, "http", None, verify=False, what="without TLS"),
        plan.update_database("Successfully removed TLS from the Etcd and deleted its certificates"),
    )


def _rotate_steps(current: etcd_api.TLSConfig | None, desired: etcd_api.TLSConfig | None,
                  variant: RotateVariant) -> Sequence[plan.Step]:
    assert current is not None
    if variant in RESCUE_VARIANTS:
        return _rescue_steps(current, variant)
    if variant is RotateVariant.CA_ROLLOVER:
        return _ca_rollover_steps(current)
    return (
        plan.running("Etcd ops request is rotating the certificates"),
        plan.Issue(constants.COND_ISSUE_CERTIFICATES_SUCCEEDED, "Successfully re-issued every certificate",
                   tls=current),
        _sync_certificates(current),
        plan.VerifyServed(constants.COND_SERVED_CERTIFICATES_VERIFIED,
                          "Every member serves its re-issued certificates on the client and the peer port",
                          tls=current),
        plan.update_database("Successfully updated the Etcd TLS configuration"),
    )


def _update_steps(current: etcd_api.TLSConfig | None, desired: etcd_api.TLSConfig | None,
                  variant: RotateVariant) -> Sequence[plan.Step]:
    return (
        plan.running("Etcd ops request is updating the certificates"),
        _sync_certificates(desired),
        *_final_roll(desired, verify=True, what="with the updated certificates"),
        plan.update_database("Successfully updated the Etcd TLS configuration"),
    )


def _issuer_steps(current: etcd_api.TLSConfig | None, desired: etcd_api.TLSConfig | None,
                  variant: RotateVariant) -> Sequence[plan.Step]:
    assert current is not None and desired is not None
    return (
        plan.running("Etcd ops request is changing the issuer"),
        plan.RollPass(constants.COND_TRUST_BUNDLE_WIDENED, "Every member trusts the old and the new CA",
                      wiring=render.Wiring.steady(current), trust=plan.Trust.CURRENT_AND_DESIRED, tls=desired),
        _sync_certificates(desired, source=" from the new issuer"),
        *_final_roll(desired, verify=True, what="with certificates from the new issuer"),
        plan.RollPass(constants.COND_TRUST_BUNDLE_NARROWED, "Every member trusts the new CA only",
                      wiring=render.Wiring.steady(desired), trust=plan.Trust.DESIRED, tls=desired),
        plan.update_database("Successfully updated the Etcd TLS configuration"),
    )


def _handover_steps(current: etcd_api.TLSConfig | None, desired: etcd_api.TLSConfig | None,
                    variant: RotateVariant) -> Sequence[plan.Step]:
    assert current is not None and desired is not None
    return handover_steps(current, desired)


def handover_steps(current: etcd_api.TLSConfig, desired: etcd_api.TLSConfig) -> tuple[plan.Step, ...]:
    """User-provided Secrets → cert-manager. The issuer change's three phases, with no roll between them (leaves are
    hot-reloaded; ``ServedCertificatesVerified`` restarts only a member that still serves the user's leaf after the
    delivery bound). Widen and narrow carry ``handover_from``: when the issuer's CA is the user's CA, both are
    no-ops, so a same-CA handover restarts nothing. The widen pass first checks the Certificates the handover will
    create (fail closed on a foreign one, before any member restarts)."""
    return (
        plan.running("Etcd ops request is handing the TLS over to cert-manager"),
        plan.RollPass(constants.COND_TRUST_BUNDLE_WIDENED,
                      "Every member trusts the user's CA and the issuer's CA (skipped when they are the same)",
                      wiring=render.Wiring.steady(current), trust=plan.Trust.CURRENT_AND_DESIRED, tls=desired,
                      handover_from=current),
        _sync_certificates(desired, source=" from the issuer (handover)"),
        plan.VerifyServed(constants.COND_SERVED_CERTIFICATES_VERIFIED,
                          "Every member serves the certificates from the issuer on the client and the peer port",
                          tls=desired),
        plan.RollPass(constants.COND_TRUST_BUNDLE_NARROWED,
                      "Every member trusts the issuer's CA only (skipped when it is the user's CA)",
                      wiring=render.Wiring.steady(desired), trust=plan.Trust.DESIRED, tls=desired,
                      handover_from=current),
        plan.update_database("Successfully handed the Etcd TLS over to cert-manager"),
    )


STEPS: dict[TLSChange, StepsOf] = {
    TLSChange.ADD: _add_steps,
    TLSChange.REMOVE: _remove_steps,
    TLSChange.ROTATE: _rotate_steps,
    TLSChange.UPDATE: _update_steps,
    TLSChange.ISSUER: _issuer_steps,
    TLSChange.HANDOVER: _handover_steps,
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class TLSPlan(plan.Plan):
    variant: RotateVariant | None = None  # rotate only: which of the rotate plans

    @property
    def summary(self) -> str:
        if self.variant is not None and self.variant in (RotateVariant.CA_ROLLOVER, *RESCUE_VARIANTS):
            return str(self.variant.value)
        return super().summary


def reconfigure_tls_plan(db: etcd_api.Etcd, req: ops_api.ReconfigureTLSSpec,
                         variant: RotateVariant = RotateVariant.HOT_RELOAD) -> TLSPlan:
    current = db.spec.tls
    change = classify(current, req)
    if change in (TLSChange.REMOVE, TLSChange.ROTATE) and current is None:
        what = "remove" if change is TLSChange.REMOVE else "rotateCertificates"
        raise ValueError(f"tls.{what} needs TLS enabled on Etcd {db.metadata.name}, and spec.tls is not set")
    desired = desired_tls(current, req)
    steps = STEPS[change](current, desired, variant)
    return TLSPlan(constants.OPS_TYPE_RECONFIGURE_TLS, change, desired, tuple(steps),
                   variant=variant if change is TLSChange.ROTATE else None)


def plan_tls(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest, seen: enum.Enum | None = None) -> plan.Plan:
    """The plan of a ``ReconfigureTLS`` request; ``seen``: the rotate variant observed when it started (none: a
    hot reload)."""
    rules.enforce(rules.tls_given(request.spec.tls))
    assert request.spec.tls is not None  # the rule holds
    variant = seen if isinstance(seen, RotateVariant) else RotateVariant.HOT_RELOAD
    return reconfigure_tls_plan(db, request.spec.tls, variant)
