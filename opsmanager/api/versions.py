"""etcd version strings, parsed once: ``3.6.16`` → ``(3, 6, 16)``, its minor ``3.6``. A pre-release suffix
(``3.6.0-rc.1``) is ignored; etcd's own messages name versions in full (``3.5.0``) or by minor (``3.5``)."""

from __future__ import annotations


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
