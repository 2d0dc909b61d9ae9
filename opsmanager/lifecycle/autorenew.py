"""Auto-renew: after each scan, file a rotate request when the earliest served leaf is due.

The decision is :func:`opsmanager.lifecycle.verdict.auto_renew` (pure). This shell gathers its inputs and carries
it out:

- **in flight**: any EtcdOpsRequest of this Etcd (``spec.databaseRef.name``) whose phase is not terminal — one
  list of the namespace's requests per scan (scans are minutes apart);
- **memory** (``status.lifecycle`` of the Etcd, written through :func:`opsmanager.cluster.etcdstatus.write`:
  the latest request in ``filed``, and ``autoRenew`` — the expiry (notAfter) it was filed for, when it was found
  ``Failed`` (or ``Skipped``, or gone before the expiry moved), and the members of the current hold; an Etcd an
  older operator annotated keeps that memory once, :func:`legacy_memory`);
- **file** through :mod:`opsmanager.cluster.filer`: ``<etcd>-auto-renew-<expiry>`` (:func:`verdict.request_name`;
  a retry after a failure adds the failure time; the episode is :func:`verdict.request_episode`),
  ``ReconfigureTLS`` with ``rotateCertificates: true``, label ``ops.opsmanager.dev/trigger: auto-renew``, owned by
  the Etcd, ``spec.timeout`` = clamp(before / 4, 1m, 10m) (:func:`verdict.request_timeout`). The request is created
  first and remembered second (the filing and ``autoRenew`` in one write): a crash in between re-decides the same
  name on the next scan, gets AlreadyExists, and remembers it then — one request per expiry across restarts;
- **Events** on the Etcd: ``AutoRenewRequested`` (Normal, names the request), ``AutoRenewFailed`` (Warning, names
  the request and the earliest retry), ``AutoRenewHeld`` (Warning, names the members not scanned; once per hold).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from opsmanager import kube
from opsmanager.api import conditions, constants, durations, lifecycle
from opsmanager.api import etcd as etcd_api
from opsmanager.cluster import etcdstatus, filer
from opsmanager.lifecycle import scan as scan_shell
from opsmanager.lifecycle import triggers, verdict

log = logging.getLogger(__name__)

# Legacy: where an older operator kept auto-renew's memory, now status.lifecycle. Read only by legacy_memory(),
# never written; removal note: delete it with that function.
ANNOTATION_AUTO_RENEW: Final = "opsmanager.dev/tls-auto-renew"  # verdict.AutoRenewState, JSON


def _requests_of(requests: Sequence[Mapping[str, Any]], etcd: str) -> list[Mapping[str, Any]]:
    return [r for r in requests if ((r.get("spec") or {}).get("databaseRef") or {}).get("name") == etcd]


def _phase(request: Mapping[str, Any]) -> str:
    return str((request.get("status") or {}).get("phase") or constants.PHASE_PENDING)


def earliest_leaf(scan: verdict.Scan) -> tuple[datetime.datetime, datetime.datetime] | None:
    """``(notBefore, notAfter)`` of the earliest-expiring served leaf, or None when none was served."""
    served = [o.served for o in scan.observations if o.served is not None]
    if not served:
        return None
    first = min(served, key=lambda c: c.not_after)
    return first.not_before, first.not_after


def unscanned(scan: verdict.Scan) -> list[str]:
    return list(dict.fromkeys(o.member for o in scan.observations if o.served is None))


def settle(state: verdict.AutoRenewState, requests: Sequence[Mapping[str, Any]],
           not_after: datetime.datetime | None, now: datetime.datetime) -> verdict.AutoRenewState:
    """The memory updated with how the remembered request ended: ``Failed``/``Skipped`` → failed at its end;
    gone while the expiry it was for is still the earliest → failed now (it was deleted before it renewed)."""
    if state.request is None or state.failed_at is not None:
        return state
    mine = next((r for r in requests if (r.get("metadata") or {}).get("name") == state.request), None)
    if mine is None:
        renewed = state.requested_for is None or not_after is None or \
            conditions.rfc3339(not_after) != conditions.rfc3339(state.requested_for)
        return state if renewed else verdict.AutoRenewState(state.request, state.requested_for, now, state.held)
    if _phase(mine) in (constants.PHASE_FAILED, constants.PHASE_SKIPPED):
        ended = triggers.request_ended_at(mine) or now
        return verdict.AutoRenewState(state.request, state.requested_for, ended, state.held)
    return state


async def after_scan(k: kube.Kube, obj: Mapping[str, Any], scan: verdict.Scan) -> verdict.Decision | None:
    """Decide and act on auto-renew for the Etcd ``obj`` just scanned; returns the decision (None: disabled)."""
    db = etcd_api.Etcd.model_validate(obj)
    policy = db.tls_lifecycle.auto_renew
    ns, name = db.metadata.namespace or "default", db.metadata.name or ""
    remembered = memory(obj)
    if not policy.enabled or (db.spec.tls is not None and db.spec.tls.external_secrets is not None):
        return None  # user-provided Secrets: renewing them is the user's, a rotate request is refused
    now = scan.now
    leaf = earliest_leaf(scan)
    not_before, not_after = leaf if leaf is not None else (None, None)
    requests = _requests_of(await k.list(constants.OPS_API_VERSION, constants.OPS_KIND, ns), name)
    in_flight = [r for r in requests if _phase(r) not in constants.TERMINAL_OPS_PHASES]
    state = settle(remembered, requests, not_after, now)
    if state.failed_at is not None and remembered.failed_at is None:
        retry_at = state.failed_at + policy.retry_after_failure_delta
        await k.event(dict(obj), reason=constants.EVENT_AUTO_RENEW_FAILED, type_=verdict.EVENT_TYPE_WARNING,
                      message=f"auto-renew request {state.request} did not renew the certificates; the next "
                      f"attempt not before {conditions.rfc3339(retry_at)} (autoRenew.retryAfterFailure "
                      f"{policy.retry_after_failure})")
    before = None if policy.before is None else durations.parse(policy.before)
    decision = verdict.auto_renew(
        etcd=name, not_before=not_before, not_after=not_after, enabled=True, before=before,
        retry_after_failure=policy.retry_after_failure_delta, in_flight=bool(in_flight),
        last_failure_at=state.failed_at, unscanned_members=unscanned(scan), requested_for=state.requested_for,
        now=now, ca_blocks=ca.not_after if (ca := verdict.ca_blocks_renewal(scan)) is not None else None)
    if decision.verdict is verdict.Verdict.HOLD:
        if state.held != decision.held_members:
            state = verdict.AutoRenewState(state.request, state.requested_for, state.failed_at,
                                           decision.held_members)
            await _remember(k, ns, name, state)
            await k.event(dict(obj), reason=constants.EVENT_AUTO_RENEW_HELD, type_=verdict.EVENT_TYPE_WARNING,
                          message=f"auto-renew is due but held: members not scanned: "
                          f"{', '.join(decision.held_members)}")
        return decision
    if state.held:
        state = verdict.AutoRenewState(state.request, state.requested_for, state.failed_at)
    if decision.verdict is verdict.Verdict.CREATE:
        assert decision.request_name is not None and not_after is not None and not_before is not None
        await _file(k, obj, decision, not_before, not_after, before, now)
        return decision
    if state != remembered:
        await _remember(k, ns, name, state)
    return decision


async def _file(k: kube.Kube, obj: Mapping[str, Any], decision: verdict.Decision, not_before: datetime.datetime,
                not_after: datetime.datetime, before: datetime.timedelta | None, now: datetime.datetime) -> None:
    """File the request ``decision`` names through the one filer, remembering its expiry in the same write."""
    assert decision.request_name is not None and decision.episode is not None
    meta = obj.get("metadata") or {}
    ns, name = meta.get("namespace") or "default", meta.get("name") or ""
    timeout = verdict.request_timeout(verdict.renew_before(not_before, not_after, before))
    body = verdict.request_body(etcd=name, namespace=ns, etcd_uid=meta.get("uid"), name=decision.request_name,
                                not_after=not_after, timeout=timeout, now=now)
    filing = filer.Filing(constants.TRIGGER_AUTO_RENEW, decision.episode, body)
    state = verdict.AutoRenewState(decision.request_name, not_after, None)
    if await filer.file(k, obj, filing, Remembered(state), now=now):
        log.info("auto-renew %s/%s: created %s (%s)", ns, name, decision.request_name, decision.reason)
        await k.event(dict(obj), reason=constants.EVENT_AUTO_RENEW_REQUESTED, type_=verdict.EVENT_TYPE_NORMAL,
                      message=f"created EtcdOpsRequest {decision.request_name} (ReconfigureTLS, "
                      f"rotateCertificates, timeout {verdict.go_duration(timeout)}): {decision.reason}")


def memory(obj: Mapping[str, Any]) -> verdict.AutoRenewState:
    """Auto-renew's memory of ``obj``: ``status.lifecycle`` (its latest filing and ``autoRenew``), else what an
    older operator annotated (:func:`legacy_memory`)."""
    mem = lifecycle.LifecycleMemory.of(obj.get("status"))
    if mem.auto_renew is None:
        return legacy_memory(obj)
    filed = mem.filed_by(constants.TRIGGER_AUTO_RENEW)
    return verdict.AutoRenewState(filed.request if filed is not None else None,
                                  scan_shell.parse_time(mem.auto_renew.requested_for),
                                  scan_shell.parse_time(mem.auto_renew.failed_at), tuple(mem.auto_renew.held or ()))


def legacy_memory(obj: Mapping[str, Any]) -> verdict.AutoRenewState:
    """The memory an older operator kept in the annotation :data:`ANNOTATION_AUTO_RENEW`, read until auto-renew
    first writes ``status.lifecycle.autoRenew``. Removal note: delete with that constant once no supported upgrade
    starts from an operator that wrote it."""
    return verdict.AutoRenewState.decode(((obj.get("metadata") or {}).get("annotations") or {}).get(
        ANNOTATION_AUTO_RENEW))


@dataclasses.dataclass(frozen=True)
class Remembered:
    """Auto-renew's memory set to ``state``: ``status.lifecycle.autoRenew`` and, for a request the filer did not
    record (an older operator's), its filing."""

    state: verdict.AutoRenewState

    def apply(self, status: etcdstatus.Status) -> etcdstatus.Status:
        st, mem = self.state, lifecycle.LifecycleMemory.of(status)
        if st.request is not None and mem.filed_by(constants.TRIGGER_AUTO_RENEW) is None:
            episode = verdict.request_episode(st.requested_for, None) if st.requested_for else st.request
            status = filer.Remember(lifecycle.FiledRequest(trigger=constants.TRIGGER_AUTO_RENEW, episode=episode,
                                                           request=st.request)).apply(status)
            mem = lifecycle.LifecycleMemory.of(status)
        rfc = conditions.rfc3339
        memory = lifecycle.AutoRenewMemory(
            requested_for=rfc(st.requested_for) if st.requested_for else None,
            failed_at=rfc(st.failed_at) if st.failed_at else None, held=list(st.held) or None)
        return mem.model_copy(update={"auto_renew": memory}).into(status)


async def _remember(k: kube.Kube, ns: str, name: str, state: verdict.AutoRenewState) -> None:
    await etcdstatus.write(k, ns, name, Remembered(state))  # a write that changes nothing is skipped


__all__ = ["ANNOTATION_AUTO_RENEW", "Remembered", "after_scan", "earliest_leaf", "legacy_memory", "memory", "settle",
           "unscanned"]
