"""Suite-wide fixtures and hygiene.

Fixture modules live in ``tests/fixtures/`` and are loaded as plugins, one per concern:
``etcd_cluster`` (real etcd members on loopback), ``sandbox`` (the local Kubernetes API server),
``sandbox_controllers`` (the whole sandbox: API server, StatefulSet controller, kubelet, cert-manager).

Parallel runs: ``make test`` runs pytest-xdist with ``--dist loadfile --no-loadscope-reorder``: a module is one unit
of work (its module-scoped sandbox or etcd cluster stays in one worker) and workers take modules in collection
order. :func:`pytest_collection_modifyitems` puts the longest modules first so that no long module starts last and
becomes the tail: :data:`LONGEST_FIRST` (measured), then every other module with a ``slow`` test, then :data:`LAST`,
then the fast modules.
:func:`pytest_xdist_make_scheduler` hands a worker its next module only when its current one is down to its last
test (xdist's own ``loadfile`` does at two, which queues a long module behind another long one's last two tests
while another worker may be about to go idle). A plain ``pytest`` (no ``-n``) keeps the usual file order.
"""

from __future__ import annotations

from typing import Any, Final

import pytest

pytest_plugins = [
    "tests.fixtures.etcd_cluster",
    "tests.fixtures.sandbox",
    "tests.fixtures.sandbox_controllers",
    "tests.fixtures.objectstore",
]

# The modules that take longest, longest first (serial wall time measured 2026-12-05 in a full make test on the 2-core
# machine). Keep it short and roughly right: a module missing here still starts early if it has a ``slow`` test.
LONGEST_FIRST = (
    "tests/e2e/test_ops_engine.py",  # 7.5 min (the leak scan of its whole run last)
    "tests/e2e/test_rescue.py",  # 7.5 min
    "tests/e2e/test_csi_storage.py",  # 5 min
    "tests/e2e/test_soak.py",  # 4.5 min
    "tests/e2e/test_auto_renew.py",  # 4.5 min
    "tests/e2e/test_install.py",  # 4.5 min
    "tests/e2e/test_version.py",  # 4 min
    "tests/e2e/test_faults.py",  # 3 min
    "tests/e2e/test_backup.py",
    "tests/e2e/test_quorum_recovery.py",
    "tests/e2e/test_api_budget.py",
    "tests/e2e/test_byo_handover.py",
    "tests/e2e/test_ca_rollover.py",
    "tests/e2e/test_lifecycle.py",
)
# The three-node sandboxes (three kubelets, containerds and CoreDNS: about 14 % of a core idle) go last, when the
# long modules are done: started with them, their load made other modules' writers lose a write to its try deadline
# in each of three make test runs (test_auth, test_install, test_faults; test_soak and test_maintenance too).
LAST: Final = (
    "tests/e2e/test_real_nodes.py",  # 5 min
    "tests/e2e/test_real_nodes_install.py",  # 2-4 min (the operator image once per change: 2 min)
    "tests/e2e/test_chaos_row.py",  # the fault matrix's row on three nodes
)


def _rank(module: str, items: list[pytest.Item]) -> tuple[int, int]:
    if module in LAST:
        return 3, LAST.index(module)
    if module in LONGEST_FIRST:
        return 0, LONGEST_FIRST.index(module)
    # The fast modules come last: they fill the workers the three-node modules leave free, instead of delaying them.
    return (1, 0) if any(item.get_closest_marker("slow") for item in items) else (4, 0)


@pytest.hookimpl(optionalhook=True)  # only a hook when pytest-xdist is loaded
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, but a worker gets its next module only when one test of its queue is left."""
    if config.getvalue("dist") != "loadfile":
        return None  # xdist's own scheduler
    from xdist.scheduler import LoadFileScheduling

    class LastTestFileScheduling(LoadFileScheduling):
        def _reschedule(self, node: Any) -> None:
            # xdist's LoadScopeScheduling._reschedule with a threshold of 1 instead of 2: the worker runs a test
            # only once it knows the next one (module teardown), so it needs the next module before its last test.
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) > 1:
                return
            self._assign_work_unit(node)

    return LastTestFileScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, order modules longest first; a module's tests stay together and in their order."""
    if not hasattr(config, "workerinput"):  # not an xdist worker: the usual order
        return
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    ordered = sorted(modules.items(), key=lambda entry: _rank(*entry))  # stable: collection order within a rank
    items[:] = [item for _, module_items in ordered for item in module_items]
