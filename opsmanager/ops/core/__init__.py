"""The engine's core: what runs a request of any kind, knowing nothing of etcd, TLS or backups.

- :mod:`.lifecycle`: the phase machine (``Pending → Progressing → Successful | Failed``, ``Skipped``);
- :mod:`.status`: the request's status buffer (conditions, phase, records), written in one transaction per flush,
  with the Events and metric observations that ride on the write;
- :mod:`.queue`: which request of a database runs, waits or is skipped;
- :mod:`.loop`: the step loop — the first step not done runs, its timeout is its condition's age, a crash point
  after a chosen step;
- :mod:`.results`: what a step answers (``Done``, ``Progress``, ``Fail``).

The etcd engine (:mod:`opsmanager.ops.engine`, :mod:`opsmanager.ops.context`) builds on it: it adds the Etcd, its
plan, its members and the etcd client. The import contract ``engine-core`` (pyproject.toml) forbids this package
to import ``opsmanager.etcd``, ``opsmanager.tls``, ``opsmanager.backup`` or the rest of ``opsmanager.ops``.
"""
