"""The ``opsmanager`` command: one entry point, each subcommand implemented (and parsed) in its own module.

The table below maps a subcommand to ``module:function``; the function receives the remaining argv and returns
an exit code. Modules are imported only when their command runs, so ``opsmanager crds`` does not import grpc.
Only product commands live here. Another installed distribution may add a command through the entry-point group
``opsmanager.commands`` (the sandbox distribution adds ``opsmanager sandbox``): the product names no such module,
so it runs, and its image builds, without them. The demo and the benchmarks run from the checkout
(``python -m e2e.demo``, ``python -m e2e.bench``, or ``make demo`` / ``make bench``).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
from collections.abc import Callable, Sequence

COMMANDS: dict[str, tuple[str, str]] = {
    "crds": ("opsmanager.api.crdgen:main", "generate CRDs from the API models (--out DIR, --check)"),
    "webhook": ("opsmanager.webhook.server:main", "admission webhook server (webhook serve --port P --tls-cert F --tls-key F)"),
    "run": ("opsmanager.operator:main", "run the operator (kopf) against a kubeconfig"),
    "restore-member": ("opsmanager.backup.restore:main",
                       "init container: restore this member's data dir from a snapshot (restore-member --plan F)"),
    "install-etcdstop": ("opsmanager.cluster.etcdstop:main",
                         "init container: copy etcdstop, which the member's etcd runs under (install-etcdstop --to DIR)"),
}


PLUGIN_GROUP = "opsmanager.commands"


def _commands() -> dict[str, tuple[str, str]]:
    """The product's commands, then those other installed distributions add (a product command wins a clash).
    A plugin's help names the distribution that adds it."""
    out = dict(COMMANDS)
    for ep in importlib.metadata.entry_points(group=PLUGIN_GROUP):
        out.setdefault(ep.name, (ep.value, f"added by {ep.dist.name if ep.dist else 'a plugin'}: {ep.name} --help"))
    return out


def _usage() -> str:
    lines = ["usage: opsmanager COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in _commands().items()]
    return "\n".join(lines)


def _load(target: str) -> Callable[[Sequence[str]], int]:
    module_name, func_name = target.split(":")
    module = importlib.import_module(module_name)
    func: Callable[[Sequence[str]], int] = getattr(module, func_name)
    return func


def main(argv: Sequence[str] | None = None) -> int:
    # gRPC's C core logs every failed TLS handshake at INFO; during a TLS transition probing both schemes is normal.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if args else 2
    command, rest = args[0], args[1:]
    commands = _commands()
    if command not in commands:
        print(f"opsmanager: unknown command {command!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    return int(_load(commands[command][0])(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
