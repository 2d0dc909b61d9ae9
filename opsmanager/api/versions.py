"""etcd version strings, parsed once: ``3.6.16`` → ``(3, 6, 16)``, its minor ``3.6``. A pre-release suffix
(``3.6.0-rc.1``) is ignored; etcd's own messages name versions in full (``3.5.0``) or by minor (``3.5``).

And what the operator knows of each minor, which no catalog object can say: the minors it runs, the path an
UpdateVersion may take between them (:func:`path_problem`, the engine's and the webhook's rule), and the flags each
minor accepts (:func:`accepted_args`, what the StatefulSet renders)."""

from __future__ import annotations

from typing import Final


def parse(version: str) -> tuple[int, int, int]:
    """``(major, minor, patch)``; ValueError for anything else."""
    parts = version.split("-")[0].split(".")
    if len(parts) != 3:
        raise ValueError(f"{version!r} is not an etcd version like 3.5.1")
    major, minor, patch = (int(x) for x in parts)
    return major, minor, patch


def minor(version: str) -> str:
    """``major.minor`` of a full version (``3.5.0`` → ``3.5``); a ``major.minor`` stays as it is."""
    return ".".join(version.split("-")[0].split(".")[:2])


# --- what this operator knows of each minor ---------------------------------------------------------------------

SUPPORTED_MINORS: Final = ("3.5", "3.6", "3.7")
"""The minors whose flags, probes and downgrade protocol the operator knows. Which patches of them a cluster may run
is the catalog's (``EtcdVersion`` objects): adding a patch is adding an object, adding a minor is code (here)."""

DOWNGRADE_SINCE: Final = (3, 6)
"""etcd's downgrade protocol (``etcdctl downgrade enable``) exists from 3.6 on: 3.6 → 3.5 and 3.7 → 3.6."""


def path_problem(start: str, target: str) -> str | None:
    """Why etcd cannot move a cluster from ``start`` to ``target`` in one UpdateVersion, None when it can: up by at
    most one minor (3.5 → 3.7 goes through 3.6), down by exactly one through etcd's downgrade protocol (from 3.6 on),
    any patch within a minor. The engine refuses with it when a request starts, the webhook when one is created."""
    current, wanted = parse(start), parse(target)
    if wanted[:2] < current[:2]:
        if wanted[0] != current[0] or current[1] - wanted[1] != 1 or current[:2] < DOWNGRADE_SINCE:
            return (f"downgrades are not supported from {start} to {target}: only one minor version down, "
                    "from etcd 3.6 on (etcd's own downgrade protocol)")
        return None
    if wanted[0] != current[0] or wanted[1] > current[1] + 1:
        through = f"{current[0]}.{current[1] + 1}"
        return (f"upgrading from {start} to {target} skips a minor version: upgrade one minor at a time, "
                f"through etcd {through} first (an UpdateVersion to the newest {through} patch, then another to "
                f"{target})")
    return None


def supported(version: str) -> bool:
    """Is ``version`` a full etcd version of a minor this operator runs (:data:`SUPPORTED_MINORS`)?"""
    try:
        parse(version)
    except ValueError:
        return False
    return minor(version) in SUPPORTED_MINORS


# --- the flags each minor accepts -------------------------------------------------------------------------------

# Flags etcd 3.7 no longer accepts (etcd exits on an unknown flag), read from the flag set of
# go.etcd.io/etcd/server/v3 v3.7.3 (embed/config.go, etcdmain/config.go) against v3.6.16: each ``--experimental-*``
# flag 3.6 deprecated, with the name 3.6 and 3.7 accept instead (None: a feature gate or nothing), and the v2
# discovery flags.
REMOVED_IN_3_7: Final[dict[str, str | None]] = {
    "--experimental-bootstrap-defrag-threshold-megabytes": "--bootstrap-defrag-threshold-megabytes",
    "--experimental-compact-hash-check-enabled": None,  # --feature-gates=CompactHashCheck=true
    "--experimental-compact-hash-check-time": "--compact-hash-check-time",
    "--experimental-compaction-batch-limit": "--compaction-batch-limit",
    "--experimental-compaction-sleep-interval": "--compaction-sleep-interval",
    "--experimental-corrupt-check-time": "--corrupt-check-time",
    "--experimental-distributed-tracing-address": "--distributed-tracing-address",
    "--experimental-distributed-tracing-instance-id": "--distributed-tracing-instance-id",
    "--experimental-distributed-tracing-sampling-rate": "--distributed-tracing-sampling-rate",
    "--experimental-distributed-tracing-service-name": "--distributed-tracing-service-name",
    "--experimental-downgrade-check-time": "--downgrade-check-time",
    "--experimental-enable-distributed-tracing": "--enable-distributed-tracing",
    "--experimental-enable-lease-checkpoint": None,  # always on
    "--experimental-enable-lease-checkpoint-persist": None,  # always on
    "--experimental-initial-corrupt-check": None,  # --feature-gates=InitialCorruptCheck=true
    "--experimental-memory-mlock": "--memory-mlock",
    "--experimental-peer-skip-client-san-verification": "--peer-skip-client-san-verification",
    "--experimental-snapshot-catchup-entries": "--snapshot-catchup-entries",
    "--experimental-stop-grpc-service-on-defrag": None,  # --feature-gates=StopGRPCServiceOnDefrag=true
    "--experimental-txn-mode-write-with-shared-buffer": None,  # --feature-gates=TxnModeWriteWithSharedBuffer=true
    "--experimental-warning-apply-duration": "--warning-apply-duration",
    "--experimental-warning-unary-request-duration": "--warning-unary-request-duration",
    "--experimental-watch-progress-notify-interval": "--watch-progress-notify-interval",
    "--discovery": None,
    "--discovery-proxy": None,
}


def flag_for(version: str, arg: str) -> str | None:
    """``arg`` (``--flag`` or ``--flag=value``) as etcd ``version`` accepts it: unchanged, under its new name when
    the version renamed the flag, or None when the version has no such flag (it must not be rendered: etcd exits on
    an unknown flag)."""
    flag, sep, value = arg.partition("=")
    if flag not in REMOVED_IN_3_7 or not supported(version) or parse(version)[:2] < (3, 7):
        return arg
    renamed = REMOVED_IN_3_7[flag]
    return None if renamed is None else f"{renamed}{sep}{value}"


def accepted_args(version: str, args: list[str]) -> list[str]:
    """The command line ``args`` with only the flags etcd ``version`` accepts (:func:`flag_for`)."""
    return [kept for arg in args if (kept := flag_for(version, arg)) is not None]
