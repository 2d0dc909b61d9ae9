"""End-to-end scenarios, the demo and the benchmarks — run from the checkout, never installed.

``python -m e2e.demo`` and ``python -m e2e.bench`` do not go through the ``opsmanager`` CLI, so the one setting it
makes for the whole process is made here, before any submodule imports grpc: gRPC's C core logs every failed TLS
handshake at INFO, and during a TLS transition (or a naive strategy breaking one) probing both schemes is normal.
"""

import os

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
