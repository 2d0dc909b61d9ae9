"""``Running``: pause the Etcd so the provisioner keeps off while a request owns it; resume and heal.

The contract (what a pause is, who holds it, that nobody removes another's) is :mod:`opsmanager.api.pause`, shared
with the provisioner; this module does the writes. Failure prevented: the provisioner "repairing" a template mid-roll.

KubeDB leaked pauses in its live tests (a request deleted mid-flight left the database frozen, and every later
``IfReady`` request stuck in Pending), so here: a request resumes the Etcd on success, on failure, on timeout and
when it is deleted; and :func:`heal` removes any pause whose request is gone or finished — the operator runs it
on start-up and on every terminal reconcile.
"""

from __future__ import annotations

import dataclasses

from opsmanager import kube
from opsmanager.api import constants
from opsmanager.api import pause as pause_api
from opsmanager.cluster import etcdstatus
from opsmanager.ops import context, plan

# The condition(s) this step owns: no other step module sets them (tests/ops/test_step_table.py).
CONDITIONS: tuple[str, ...] = (constants.COND_RUNNING,)

# Events on the Etcd (the request's own Event for the pause is its ``Running`` transition).
EVENT_PAUSED = "Paused"
EVENT_RESUMED = "Resumed"


async def pause(ctx: context.OpsContext) -> None:
    """Pause the Etcd for this request — after the request's queued record (its ``Progressing`` phase) is written:
    a request killed in between would otherwise find the Etcd paused while it is still ``Pending``."""
    await ctx.flush()
    updated = await etcdstatus.write(ctx.kube, ctx.namespace, ctx.db_name, pause_api.Pause(ctx.name))
    if updated is not None:
        ctx.db_obj = updated
    await ctx.etcd_event(EVENT_PAUSED, f"Paused by EtcdOpsRequest {ctx.name} ({ctx.spec.type})")


async def run(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    await pause(ctx)
    return context.Done()


async def resume(client: kube.Kube, namespace: str, db_name: str, request_name: str) -> bool:
    """Remove the pause if ``request_name`` holds it. True when it removed one."""
    release = _Noting(pause_api.Release(request_name))
    await etcdstatus.write(client, namespace, db_name, release)
    return release.changed


@dataclasses.dataclass
class _Noting:
    """A change that notes whether its last application changed the status: the writer may apply it again on a
    conflict, and only the attempt that was written counts."""

    change: etcdstatus.Change
    changed: bool = False

    def apply(self, status: etcdstatus.Status) -> etcdstatus.Status:
        out = self.change.apply(status)
        self.changed = out != status
        return out


async def heal(client: kube.Kube, namespace: str | None = None, *, only: str | None = None) -> list[str]:
    """Resume every Etcd (or only the one named ``only``) paused by a request that no longer exists or has
    finished. Returns what it healed."""
    healed = []
    namespaces = [namespace] if namespace else [
        n["metadata"]["name"] for n in await client.list("v1", "Namespace", None)]
    for ns in namespaces:
        if only is not None:  # a timer per paused Etcd: read that one, not every Etcd of the namespace
            one = await client.get(constants.ETCD_API_VERSION, constants.ETCD_KIND, ns, only)
            dbs = [one] if one is not None else []
        else:
            dbs = await client.list(constants.ETCD_API_VERSION, constants.ETCD_KIND, ns)
        for db in dbs:
            holder = pause_api.held_by_request(db.get("status"))
            if holder is None:
                continue
            req = await client.get(constants.OPS_API_VERSION, constants.OPS_KIND, ns, holder) if holder else None
            if not pause_api.request_holds(req):
                if await resume(client, ns, db["metadata"]["name"], holder):
                    healed.append(f"{ns}/{db['metadata']['name']}")
    return healed
