"""The sandbox: a local Kubernetes for opsmanager's tests, demo and benchmarks — never part of the product.

Two control planes behind one :class:`~opsmanager_sandbox.cluster.Sandbox`: the embedded one (:mod:`.apiserver`,
an emulated API server with the controllers the tests need) and the real one (:mod:`.realcp`, kube-apiserver,
kube-controller-manager and kube-scheduler built from their Go modules). Both share the node agent
(:mod:`.kubelet` and the modules it is made of), which runs pods as local processes on loopback addresses, and
cert-manager's issuance (:mod:`.certmanager`). Installed as its own distribution (``sandbox/pyproject.toml``); it
adds the ``opsmanager sandbox`` command through an entry point and imports the product's public layers only.
"""
