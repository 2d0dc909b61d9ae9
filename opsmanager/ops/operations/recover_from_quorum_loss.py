"""``RecoverFromQuorumLoss``: a cluster that lost quorum rebuilt from its survivor. Runs on an Etcd that cannot be
Ready — its apply policy is ``Always``, whatever the request says: waiting for Ready would wait for ever."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from opsmanager.api import constants, rules
from opsmanager.api import etcd as etcd_api
from opsmanager.api import opsrequest as ops_api
from opsmanager.cluster import naming, render, statefulset
from opsmanager.ops import context, plan
from opsmanager.ops.operations import base


def _survivor(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest) -> str:
    """The member to rebuild from, confirmed by the request; ValueError when it is not one of the Etcd's."""
    recover = request.spec.recover_from_quorum_loss
    rules.enforce(rules.confirm_member(recover))
    assert recover is not None and recover.confirm_member  # the rule holds
    if recover.member and recover.member != recover.confirm_member:
        raise ValueError(f"spec.recoverFromQuorumLoss.confirmMember {recover.confirm_member} is not "
                         f"spec.recoverFromQuorumLoss.member {recover.member}")
    pods = naming.pods(db.metadata.name or "", db.spec.replicas)
    if recover.confirm_member not in pods:
        raise ValueError(f"spec.recoverFromQuorumLoss.confirmMember {recover.confirm_member} is not a member of "
                         f"{db.metadata.name}: one of {', '.join(pods)}")
    return recover.confirm_member


def plan_recovery(db: etcd_api.Etcd, request: ops_api.EtcdOpsRequest, seen: enum.Enum | None = None) -> plan.Plan:
    """The loss and the survivor checked again; the survivor restarted alone with ``--force-new-cluster`` (the
    others' pods gone and their volumes wiped), then once more without it (a later restart must never force again);
    the others added back one at a time as learners and promoted; the StatefulSet back to every replica. No
    MoveLeader: the survivor leads throughout."""
    survivor = _survivor(db, request)
    steps = (
        plan.running(f"Etcd ops request is recovering the cluster from {survivor}"),
        plan.ConfirmQuorumLoss(constants.COND_QUORUM_LOSS_CONFIRMED,
                               f"Quorum is lost and {survivor} has the highest committed index of the members that "
                               "answer", survivor=survivor),
        plan.ForceNewCluster(constants.COND_SURVIVOR_FORCED,
                             f"{survivor} runs alone as a new cluster of one with its data (--force-new-cluster, "
                             "then restarted without it); the other members were wiped", survivor=survivor),
        plan.RejoinMembers(constants.COND_MEMBERS_REJOINED,
                           "Every other member was added back as a learner and promoted", survivor=survivor),
        plan.update_database(f"Successfully recovered the cluster from {survivor}"),
    )
    return plan.Plan(request.spec.type, None, db.spec.tls, steps)


async def write_back(ctx: context.OpsContext, step: plan.Step) -> context.StepResult:
    """Every replica again (the members rejoined have data: nothing restarts)."""
    sts = await statefulset.apply_statefulset(ctx.kube, ctx.db, render.Wiring.steady(ctx.db.spec.tls),
                                           restarted_at=f"{ctx.name}/{step.condition}")
    if (sts.get("status") or {}).get("observedGeneration", 0) < sts["metadata"].get("generation", 0):
        return context.Progress("waiting for the StatefulSet controller to observe the template",
                                delay=ctx.until_watched(0.2))
    return context.Done(step.message)


def always(spec: Mapping[str, Any]) -> str:
    return constants.APPLY_ALWAYS


OPERATION = base.Operation(constants.OPS_TYPE_RECOVER_FROM_QUORUM_LOSS, plan_recovery,
                           "Successfully recovered the etcd cluster from quorum loss", write_back=write_back,
                           apply=always)
