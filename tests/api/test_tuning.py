"""etcd's tunable flags: what they render to, how a change merges, and etcd's own rules at their edges.

We test these aspects: only the fields set become flags, in a fixed order; a change's fields win over the Etcd's and
the rest stay; the election timeout may be exactly 5 × the heartbeat (etcd's rule) and not one millisecond less,
with etcd's defaults filling the one not given; the quota's bounds; the retention's form per compaction mode.
"""

from __future__ import annotations

import pytest

from opsmanager.api import tuning

T = tuning.TuningConfig


def test_only_the_fields_set_become_flags_in_a_fixed_order() -> None:
    assert tuning.flags(None) == [] and tuning.flags(T()) == []
    assert tuning.flags(T(max_txn_ops=256, quota_backend_bytes=1024, auto_compaction_mode="revision",
                          auto_compaction_retention="1000")) == [
        "--quota-backend-bytes=1024", "--auto-compaction-mode=revision", "--auto-compaction-retention=1000",
        "--max-txn-ops=256"]


def test_a_change_wins_field_by_field() -> None:
    merged = tuning.merge(T(snapshot_count=5000, max_txn_ops=64), T(max_txn_ops=256))
    assert merged == T(snapshot_count=5000, max_txn_ops=256)
    assert tuning.merge(None, T(heartbeat_interval=50)) == T(heartbeat_interval=50)


@pytest.mark.parametrize(("config", "bad"), [
    (T(heartbeat_interval=200, election_timeout=1000), None),  # exactly 5 ×
    (T(heartbeat_interval=200, election_timeout=999), "electionTimeout"),
    (T(heartbeat_interval=201), "electionTimeout"),  # against etcd's default election timeout, 1000
    (T(election_timeout=499), "electionTimeout"),  # against etcd's default heartbeat, 100
    (T(election_timeout=50000, heartbeat_interval=100), None),
    (T(election_timeout=50001), "electionTimeout"),
    (T(quota_backend_bytes=0), None),
    (T(quota_backend_bytes=8 * 1024 ** 3), None),
    (T(quota_backend_bytes=8 * 1024 ** 3 + 1), "quotaBackendBytes"),
    (T(auto_compaction_retention="1h30m"), None),
    (T(auto_compaction_retention="2"), None),
    (T(auto_compaction_retention="2 hours"), "autoCompactionRetention"),
    (T(auto_compaction_mode="revision", auto_compaction_retention="10000"), None),
    (T(auto_compaction_mode="revision", auto_compaction_retention="5m"), "autoCompactionRetention"),
    (T(snapshot_count=0), "snapshotCount"),
])
def test_etcds_rules_at_their_edges(config: tuning.TuningConfig, bad: str | None) -> None:
    found = [field for field, _value, _message in tuning.problems(config, "spec")]
    assert found == ([] if bad is None else [f"spec.{bad}"]), found


def test_a_quota_below_the_largest_database_now_is_refused() -> None:
    mib = 1024 * 1024
    assert tuning.problems(T(quota_backend_bytes=120 * mib), "spec", largest_db_bytes=100 * mib) == []
    found = tuning.problems(T(quota_backend_bytes=110 * mib), "spec", largest_db_bytes=100 * mib)
    assert [f for f, _v, _m in found] == ["spec.quotaBackendBytes"] and "NOSPACE" in found[0][2]
    assert tuning.problems(T(quota_backend_bytes=0), "spec", largest_db_bytes=100 * mib) == []  # etcd's default
