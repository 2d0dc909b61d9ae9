"""``opsmanager run``: argument checks (peering flags included), kopf credentials from a given kubeconfig, the
ops-engine import guard, the quiet timer log filter, the peering object the operator creates. (The process itself
runs in test_operator_apiserver.py and the e2e tests.)"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

import kopf
import kubernetes.client
import pytest
import yaml

from opsmanager import kube, operator

REPO = Path(__file__).resolve().parents[2]
UNUSED_CLIENT = kube.CachedKube(kubernetes.client.ApiClient())  # the operator's client, never called in these tests


def write_kubeconfig(path: Path, server: str, *, token: str | None = None) -> Path:
    user: dict[str, str] = {"token": token} if token else {}
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "s", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "s", "user": "u", "namespace": "x"}}],
    }))
    return path


def test_connection_info_uses_the_given_kubeconfig_with_a_plain_http_server(tmp_path: Path) -> None:
    info = operator.connection_info(str(write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:34567", token="t0k")))
    assert info.server == "http://127.0.0.1:34567"
    assert info.token == "t0k" and info.scheme == "Bearer"
    assert info.certificate_path is None and info.private_key_path is None


def test_connection_info_without_a_token(tmp_path: Path) -> None:
    info = operator.connection_info(str(write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:1")))
    assert info.server == "http://127.0.0.1:1" and info.token is None


def test_a_missing_kubeconfig_is_a_login_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(kopf.LoginError, match="nope"):
        operator.connection_info(str(tmp_path / "nope"))


def test_parse_args_defaults_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = operator.parse_args([])
    assert args.namespace == [] and args.interval == 5.0 and not args.standalone and args.metrics_port == 8081
    assert operator.parse_args(["--metrics-port", "0"]).metrics_port == 0
    kc = write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:1")
    args = operator.parse_args(["--kubeconfig", str(kc), "-n", "a", "-n", "b", "--standalone", "--interval", "1"])
    assert args.namespace == ["a", "b"] and args.standalone and args.interval == 1.0
    for bad, message in ((["--interval", "0"], "--interval must be greater than 0"),
                         (["--kubeconfig", str(tmp_path / "missing")], "no such file"),
                         (["-n", "a", "-A"], "not allowed with"),
                         (["--metrics-port", "-1"], "--metrics-port must be a port number"),
                         (["--metrics-port", "65536"], "--metrics-port must be a port number")):
        with pytest.raises(SystemExit):
            operator.parse_args(bad)
        assert message in capsys.readouterr().err


def test_peering_flags_reach_kopf_with_a_seniority_priority(capsys: pytest.CaptureFixture[str]) -> None:
    args = operator.parse_args(["--peering", "opsmanager", "--namespace", "team-a"])
    assert args.peering == "opsmanager" and not args.standalone and args.priority is None
    options = operator.peering_options(standalone=args.standalone, peering_name=args.peering, priority=args.priority)
    assert options["standalone"] is False and options["peering_name"] == "opsmanager"
    assert isinstance(options["priority"], int) and options["priority"] > 0
    assert operator.parse_args(["--peering", "p", "--priority", "7"]).priority == 7
    assert operator.peering_options(standalone=False, peering_name="p", priority=7)["priority"] == 7
    # --standalone keeps working (the sandbox, the tests); neither flag leaves kopf's own detection
    assert operator.peering_options(standalone=True, peering_name=None, priority=None) == {"standalone": True}
    assert operator.peering_options(standalone=False, peering_name=None, priority=None) == {"standalone": False}
    args = operator.parse_args(["--peering", "p", "--peering-lifetime", "20"])
    options = operator.peering_options(standalone=False, peering_name="p", priority=None, lifetime=args.peering_lifetime)
    assert options["settings"].peering.lifetime == 20
    assert "settings" not in operator.peering_options(standalone=False, peering_name="p", priority=None)
    with pytest.raises(ValueError, match="exclude each other"):
        operator.peering_options(standalone=True, peering_name="p", priority=None)
    for bad, message in ((["--standalone", "--peering", "p"], "not allowed with"),
                         (["--priority", "3"], "--priority needs --peering NAME"),
                         (["--peering", " "], "--peering needs the name"),
                         (["--peering-lifetime", "20"], "--peering-lifetime needs --peering"),
                         (["--peering", "p", "--peering-lifetime", "5"], "at least 10 seconds")):
        with pytest.raises(SystemExit):
            operator.parse_args(bad)
        assert message in capsys.readouterr().err


def test_seniority_priority_ranks_the_earlier_started_replica_first() -> None:
    rng = random.Random(1)
    older = operator.seniority_priority(1_800_000_000.0, rng=rng)
    newer = operator.seniority_priority(1_800_000_001.0, rng=rng)
    assert older > newer > 0
    # two replicas started in the same second still rank by age, whatever the tie-breaker draws
    assert all(operator.seniority_priority(1_800_000_000.000, rng=rng)
               > operator.seniority_priority(1_800_000_000.002, rng=rng) for _ in range(200))
    same_ms = {operator.seniority_priority(1_800_000_000.0, rng=rng) for _ in range(50)}
    assert len(same_ms) > 1  # a tie-breaker: kopf pauses every peer of equal priority
    assert operator.seniority_priority(0.0, rng=rng) < 2**53  # an exact integer in the JSON, for any start time


def test_kopf_settings_keep_everything_under_our_prefix() -> None:
    settings = kopf.OperatorSettings()
    operator.configure(settings)
    assert settings.persistence.finalizer == "opsmanager.dev/finalizer"
    assert isinstance(settings.persistence.progress_storage, kopf.AnnotationsProgressStorage)
    assert settings.posting.level == logging.WARNING


def test_ops_handlers_are_optional(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(operator, "OPS_HANDLERS_MODULE", "opsmanager.no_such_engine.handlers")
    assert operator.load_ops_handlers(kopf.OperatorRegistry(), UNUSED_CLIENT) is False


def test_the_registry_holds_both_halves_and_kopfs_global_registry_stays_empty() -> None:
    registry = operator.build_registry(None, UNUSED_CLIENT, interval=5.0)
    spawning = [h.id for h in registry._spawning.get_all_handlers()]
    changing = [h.id for h in registry._changing.get_all_handlers()]
    assert "drive_ops_request" in spawning and "heal-pause" in spawning and "status" in spawning
    assert "provision" in changing and "release_on_delete" in changing
    assert not kopf.get_default_registry()._spawning.get_all_handlers()
    assert not kopf.get_default_registry()._changing.get_all_handlers()
    assert operator.build_registry(None, UNUSED_CLIENT, interval=5.0) is not registry  # no process-wide state


def test_a_broken_ops_engine_is_not_hidden(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "broken_engine_pkg").mkdir()
    (tmp_path / "broken_engine_pkg" / "__init__.py").write_text("")
    (tmp_path / "broken_engine_pkg" / "handlers.py").write_text("import opsmanager_missing_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(operator, "OPS_HANDLERS_MODULE", "broken_engine_pkg.handlers")
    with pytest.raises(ModuleNotFoundError, match="opsmanager_missing_dependency_xyz"):
        operator.load_ops_handlers(kopf.OperatorRegistry(), UNUSED_CLIENT)


def test_routine_timer_lines_are_dropped_but_failures_kept() -> None:
    f = operator.RoutineTimerFilter()

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("kopf.objects", logging.INFO, __file__, 1, msg, None, None)
    assert not f.filter(record("Timer 'status' succeeded."))
    assert not f.filter(record("Timer 'status' is invoked."))
    assert f.filter(record("Timer 'status' failed with an exception. Will retry."))
    assert f.filter(record("Handler 'provision' succeeded."))
    assert not f.filter(record("Timer 'tls-scan' succeeded."))
    assert f.filter(record("Timer 'tls-scan' failed with an exception. Will retry."))


async def test_the_operator_creates_its_peering_objects_once(apiserver_async: Any) -> None:
    """kopf's mandatory peering pauses for good while its object is missing; the operator creates it (on the
    sandbox API server, with the peering CRDs of the install bundle)."""
    crds = [d for d in yaml.safe_load_all((REPO / "deploy" / "base" / "peering" / "crds.yaml").read_text()) if d]
    await apiserver_async.apply_objects([*crds, {"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": "team-a"}}])
    async with kube.Kube.for_url(apiserver_async.url) as client:
        ensure = operator.ensure_peering_objects
        assert await ensure(client, "opsmanager", namespaces=(), clusterwide=True) == [
            "ClusterKopfPeering opsmanager"]
        assert await ensure(client, "opsmanager", namespaces=["team-a"], clusterwide=False) == [
            "KopfPeering team-a/opsmanager"]
        # already there: nothing to do, no error
        assert await ensure(client, "opsmanager", namespaces=(), clusterwide=True) == []
        assert await ensure(client, "opsmanager", namespaces=["team-a"], clusterwide=False) == []
        found = await client.request("GET", "/apis/kopf.dev/v1/namespaces/team-a/kopfpeerings/opsmanager")
        assert found["kind"] == "KopfPeering"
