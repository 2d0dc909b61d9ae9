# Two commands are all a fresh machine needs: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test test-fast tools lint demo bench chaos crds venv clean controlplane

# The product (editable, with its test tools) and the sandbox, a distribution of its own (sandbox/pyproject.toml).
$(STAMP): pyproject.toml sandbox/pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]' -e ./sandbox
	touch $(STAMP)

venv: $(STAMP)

# Parallel by default (pytest-xdist): TEST_WORKERS processes, one module per unit of work (`--dist loadfile`: a
# module's sandbox or etcd cluster stays in one worker), longest modules first (tests/conftest.py). The slow modules
# mostly wait (certificate lifetimes, etcd restarts), so more workers than cores pay off. One file, serially, for
# debugging (-s, --pdb): make test PYTEST_ARGS="-n0 tests/e2e/test_rescue.py" (or PYTEST_PARALLEL= to drop xdist).
TEST_WORKERS ?= 3
PYTEST_PARALLEL ?= -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
PYTEST_ARGS ?=

# promtool (tests/deploy/test_alert_rules.py, never skipped) comes from Debian's prometheus package, shellcheck
# (tests/deploy/test_kind_scripts.py, never skipped) from Debian's shellcheck package. kubectl (tests/deploy/
# test_bundle.py renders deploy/ with `kubectl kustomize`, offline) must be on the machine.
# The real control plane (kube-apiserver, kube-controller-manager, kube-scheduler, etcd 3.5 and 3.6) built from Go
# modules into a cache keyed by version (~/.cache/opsmanager/controlplane): nothing present is rebuilt. Needs Go; a
# cold build takes about 15 minutes on 2 cores (sandbox/controlplane/build.py, docs/sandbox.md).
controlplane:
	$(PY) sandbox/controlplane/build.py build

# The real nodes' host tools, Debian's packages: runc (containerd's runtime), nftables and iptables (kube-proxy, the
# tests' partitions), conntrack, umoci (the OCI images), mmdebstrap (the operator image's root filesystem), gcc
# (the pause image); binutils for strip; xfsprogs and mount (losetup) for the CSI driver's volumes (D37.4).
NODE_PACKAGES := runc nftables iptables conntrack umoci mmdebstrap gcc libc6-dev binutils xfsprogs mount
tools:
	@missing=$$(for p in $(NODE_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; fi
	@command -v promtool >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null)
	@command -v shellcheck >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends shellcheck >/dev/null)

test: $(STAMP) controlplane tools
	$(BIN)/opsmanager crds --check
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL) $(PYTEST_ARGS)

# Every test not marked slow (no etcd process, no sandbox, no control plane): under a minute, for the edit-test loop.
# `make test` runs these too, beside the slow ones.
test-fast: $(STAMP) tools
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist load -m "not slow" $(PYTEST_ARGS)

# ruff on everything; mypy (strict for api, ops, provisioner, webhook, pki: see [tool.mypy] in pyproject.toml);
# the import contracts ([tool.importlinter]: pure modules import no I/O, no harness imports, layers).
lint: $(STAMP)
	$(BIN)/ruff check opsmanager tests e2e sandbox
	$(BIN)/mypy opsmanager sandbox/opsmanager_sandbox
	$(BIN)/lint-imports

crds: $(STAMP)
	$(BIN)/opsmanager crds --out crds/
	$(BIN)/python -m opsmanager.api.catalog --out deploy/catalog

# `make demo CONTROL_PLANE=kubernetes`: the same four operations on the real control plane and NODES real nodes
# (kubelet, containerd, runc, a pod network, CoreDNS; builds and installs what they need first; the operator and
# the webhook then run as child processes, not from the bundle). NODES=0: the node agent instead of real nodes.
CONTROL_PLANE ?= embedded
NODES ?= 3
demo: $(STAMP)
ifeq ($(CONTROL_PLANE),kubernetes)
	$(MAKE) controlplane tools
	$(BIN)/python -m e2e.demo --control-plane kubernetes --nodes $(NODES) --no-install --dir .sandbox/demo-kubernetes
else
	$(BIN)/python -m e2e.demo
endif

# `make bench REPEAT=3`: each operation's strategies 3 times, "median (worst)" per figure (scale/webhook/soak once).
REPEAT ?= 1
bench: $(STAMP)
	$(MAKE) controlplane
	$(BIN)/python -m e2e.bench --json docs/benchmarks.json --repeat $(REPEAT)

# The fault matrix (e2e/chaos.py, docs/reliability.md): every operation with every fault injected in the middle of a
# step, on three real nodes, judged by read-back, HashKV, linearizability and the watch guarantees; not part of
# `make test` (which runs one row: tests/e2e/test_chaos_row.py). A random seed, printed; `CHAOS_SEED=N` reproduces
# it, `CHAOS_CELLS=add-tls:peer-cut,rotate:*` runs a subset. Needs root, like the real nodes.
CHAOS_CELLS ?=
CHAOS_SEED ?=
chaos: $(STAMP) controlplane tools
	CHAOS_CELLS='$(CHAOS_CELLS)' CHAOS_SEED='$(CHAOS_SEED)' $(BIN)/python -m e2e.chaos

clean:
	rm -rf $(VENV) .sandbox .pytest_cache
