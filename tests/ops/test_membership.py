"""The membership changes both scaling and quorum recovery make (:mod:`opsmanager.ops.membership`), on the fake etcd.

We test these aspects: a learner is added with its pod's peer URL, ``EtcdMemberAdded--<pod>`` True naming the new
member and its Event (the recovery's wording says "back"); a learner found in the list but not on record is put on
record once; a learner this request did not add is a failure naming it; promotion writes
``EtcdLearnerPromoted--<pod>`` True and its Event, and a learner that has not caught up is left a learner with the
condition False saying how far it is and what comes next; a remove is on record (False, flushed) before MemberRemove
goes out. The steps' own tests (``test_engine_scale.py``, ``test_engine_quorum.py``) run them inside the engine.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from opsmanager.api import constants
from opsmanager.cluster import naming
from opsmanager.etcd import access
from opsmanager.ops import context, membership
from tests.fakes import etcd as fake_etcd

NAMES = ["db-0", "db-1", "db-2"]
ADDED, PROMOTED, REMOVED = (constants.STEP_ETCD_MEMBER_ADDED, constants.STEP_ETCD_LEARNER_PROMOTED,
                            constants.STEP_ETCD_MEMBER_REMOVED)


@dataclasses.dataclass
class Ctx:
    """The part of an :class:`~opsmanager.ops.context.OpsContext` membership changes use: conditions in memory,
    Events; a ``flush`` (what is set goes on record) is logged among the calls to etcd, in order."""

    cluster: fake_etcd.FakeCluster
    conditions: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    events: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def fqdn(self, pod: str) -> str:
        return f"{pod}.db.ns.svc"

    def set_condition(self, type_: str, status: str, message: str | None = None, *,
                      reason: str | None = None) -> None:
        self.conditions[type_] = (status, message or "")

    def is_true(self, type_: str) -> bool:
        return self.conditions.get(type_, ("", ""))[0] == constants.TRUE

    def announce(self, reason: str, message: str, type_: str = "Normal") -> None:
        self.events.append((reason, message))

    async def flush(self) -> None:
        self.cluster.calls.append(f"flush {' '.join(sorted(self.conditions))}")

    def of(self, step: str, pod: str) -> tuple[str, str]:
        return self.conditions[constants.per_pod_type(step, pod)]


def world(names: list[str] = NAMES) -> tuple[Ctx, fake_etcd.FakeAdmin]:
    cluster = fake_etcd.FakeCluster(names, peer_urls=[f"http://{n}.db.ns.svc:2380" for n in names])
    admin = cluster.admin([access.Endpoint(name=n, host=f"10.0.0.{i + 1}", schemes=("http",))
                           for i, n in enumerate(names)], None)
    return Ctx(cluster), admin


def ops(ctx: Ctx) -> Any:
    return cast(context.OpsContext, ctx)


async def test_a_learner_is_added_with_its_peer_url_on_record_with_its_event() -> None:
    ctx, admin = world()
    new, listed = await membership.add_learner(ops(ctx), admin, "db-3", "http")
    assert new.is_learner and new.peer_urls == ("http://db-3.db.ns.svc:2380",)
    assert membership.member_of(listed, ops(ctx), "db-3") == new, "found by its peer URL before it has a name"
    assert ctx.of(ADDED, "db-3") == (constants.TRUE, f"added db-3 to the cluster as a learner (member {new.id_hex})")
    assert ctx.events == [("EtcdMemberAdded", "Added db-3 to the cluster as a learner")]
    assert membership.learners(listed) == [new.id_hex], "by ID until it starts"
    ctx.cluster.start("db-3")
    assert membership.learners(await admin.members()) == ["db-3"]


async def test_a_recovery_adds_a_member_back_in_its_own_words() -> None:
    ctx, admin = world(["db-0"])
    new, _ = await membership.add_learner(ops(ctx), admin, "db-1", "https", back=True)
    assert new.peer_urls == (f"https://db-1.db.ns.svc:{naming.peer_port('https')}",)
    assert ctx.of(ADDED, "db-1")[1] == f"added db-1 back to the cluster as a learner (member {new.id_hex})"
    assert ctx.events == [("EtcdMemberAdded", "Added db-1 back to the cluster as a learner")]


async def test_a_learner_added_before_a_crash_is_put_on_record_once() -> None:
    ctx, admin = world()
    new, _ = await membership.add_learner(ops(ctx), admin, "db-3", "http")
    ctx.conditions.clear()  # the operator stopped before the condition was written
    assert membership.record_added(ops(ctx), "db-3", new) is True
    assert ctx.of(ADDED, "db-3") == (constants.TRUE, f"added db-3 to the cluster as a learner (member {new.id_hex})")
    assert membership.record_added(ops(ctx), "db-3", new) is False
    assert [c for c in ctx.cluster.calls if c.startswith("member_add")] == ["member_add db-3"]


async def test_a_learner_this_request_did_not_add_fails_it_naming_the_learner() -> None:
    ctx, admin = world()
    assert membership.unexpected_learner(await admin.members()) is None
    new, listed = await membership.add_learner(ops(ctx), admin, "db-3", "http")
    failed = membership.unexpected_learner(listed, "; remove it")
    assert failed is not None and failed.reason == "UnexpectedLearner"
    assert failed.message == f"the cluster has a learner this request did not add ({new.id_hex}); remove it"


async def test_a_caught_up_learner_is_promoted_and_one_behind_stays_a_learner() -> None:
    ctx, admin = world()
    ctx.cluster.lagging.add("db-3")
    behind, _ = await membership.add_learner(ops(ctx), admin, "db-3", "http")
    ctx.cluster.start("db-3")
    assert await membership.promote(ops(ctx), admin, behind, "db-3") is None
    waiting = membership.not_caught_up(ops(ctx), "db-3", "applied index 0", "; removed again in 5s")
    assert waiting.message == "waiting for learner db-3 to catch up (applied index 0)" and waiting.delay == 1.0
    assert ctx.of(PROMOTED, "db-3") == (
        constants.FALSE, "db-3 is a learner that has not caught up with the leader yet (applied index 0); removed "
                         "again in 5s")
    assert membership.not_caught_up(ops(ctx), "db-3").message == "waiting for learner db-3 to catch up"
    assert ctx.of(PROMOTED, "db-3")[1] == "db-3 is a learner that has not caught up with the leader yet"
    ctx.cluster.lagging.clear()
    ctx.cluster.start("db-3")
    done = await membership.promote(ops(ctx), admin, behind, "db-3")
    assert done is not None and done.message == "promoted db-3" and done.delay == 0.0
    assert ctx.of(PROMOTED, "db-3") == (constants.TRUE, "promoted db-3 to a voting member")
    assert ctx.events[-1] == ("EtcdLearnerPromoted", "Promoted db-3 to a voting member")
    assert not ctx.cluster.members["db-3"].is_learner


async def test_a_remove_is_on_record_before_member_remove_goes_out() -> None:
    ctx, admin = world()
    (member,) = [m for m in await admin.members() if m.name == "db-2"]
    await membership.remove(ops(ctx), admin, member, "db-2")
    assert ctx.of(REMOVED, "db-2") == (constants.FALSE, "removing db-2 from the cluster")
    assert ctx.cluster.calls == [f"flush {constants.per_pod_type(REMOVED, 'db-2')}", "member_remove db-2"]
    assert ctx.events == [("EtcdMemberRemoved", "Removed db-2 from the cluster")]
