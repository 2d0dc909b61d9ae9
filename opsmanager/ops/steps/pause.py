"""``Running``: pause the Etcd so the provisioner keeps off while a request owns it — and the pause contract.

A pause is the ``Paused=True`` condition on the Etcd's status, with the request's name as ``reason``; while it is
there the provisioner changes nothing it owns. Failure prevented: the provisioner "repairing" a template mid-roll.

KubeDB leaked pauses in its live tests (a request deleted mid-flight left the database frozen, and every later
``IfReady`` request stuck in Pending), so here: a request resumes the Etcd on success, on failure, on timeout and
when it is deleted; and :func:`heal` removes any pause whose request is gone or finished — the operator runs it
on start-up and on every terminal reconcile.
"""

from __future__ import annotations

from typing import Any

from opsmanager import kube
from opsmanager.api import conditions, constants
from opsmanager.ops import context, plan

PAUSE_MESSAGE = "EtcdOpsRequest {} is in process"


def paused_by(db_obj: dict[str, Any]) -> str | None:
    """The name of the request holding the pause, or None when not paused by a request. A pause someone set by
    hand (any other message) is theirs: the operator never heals it away."""
    cond = conditions.get_condition((db_obj.get("status") or {}).get("conditions"), constants.COND_PAUSED)
    if cond is None or cond.get("status") != constants.TRUE:
        return None
    holder = str(cond.get("reason") or "")
    if not holder or cond.get("message") != PAUSE_MESSAGE.format(holder):
        return None
    return holder


async def pause(ctx: context.OpsContext) -> None:
    message = PAUSE_MESSAGE.format(ctx.name)

    def mutate(st: dict[str, Any]) -> dict[str, Any]:
        st = dict(st)
        st["conditions"] = conditions.set_condition(st.get("conditions"), constants.COND_PAUSED, constants.TRUE,
                                                    reason=ctx.name, message=message)
        return st

    updated = await ctx.kube.transact_status(constants.ETCD_API_VERSION, constants.ETCD_KIND, ctx.namespace,
                                             ctx.db_name, mutate)
    if updated is not None:
        ctx.db_obj = updated
    await ctx.event("PauseDatabase", f"Pausing Etcd {ctx.namespace}/{ctx.db_name}")


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    await pause(ctx)
    return context.Done()


async def resume(client: kube.Kube, namespace: str, db_name: str, request_name: str) -> bool:
    """Remove the pause if ``request_name`` holds it. True when it removed one."""
    removed = False

    def mutate(st: dict[str, Any]) -> dict[str, Any]:
        nonlocal removed
        cond = conditions.get_condition(st.get("conditions"), constants.COND_PAUSED)
        if cond is None or cond.get("reason") != request_name:
            return st
        removed = True
        st = dict(st)
        st["conditions"] = conditions.remove_condition(st.get("conditions"), constants.COND_PAUSED)
        return st

    await client.transact_status(constants.ETCD_API_VERSION, constants.ETCD_KIND, namespace, db_name, mutate)
    return removed


async def heal(client: kube.Kube, namespace: str | None = None, *, only: str | None = None) -> list[str]:
    """Resume every Etcd (or only the one named ``only``) paused by a request that no longer exists or has
    finished. Returns what it healed."""
    healed = []
    namespaces = [namespace] if namespace else [
        n["metadata"]["name"] for n in await client.list("v1", "Namespace", None)]
    for ns in namespaces:
        for db in await client.list(constants.ETCD_API_VERSION, constants.ETCD_KIND, ns):
            if only is not None and db["metadata"]["name"] != only:
                continue
            holder = paused_by(db)
            if holder is None:
                continue
            req = await client.get(constants.OPS_API_VERSION, constants.OPS_KIND, ns, holder) if holder else None
            phase = ((req or {}).get("status") or {}).get("phase")
            if req is None or phase in constants.TERMINAL_OPS_PHASES or req["metadata"].get("deletionTimestamp"):
                if await resume(client, ns, db["metadata"]["name"], holder):
                    healed.append(f"{ns}/{db['metadata']['name']}")
    return healed
