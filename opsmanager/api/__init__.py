"""The API of the operator: pydantic models of ``Etcd`` and ``EtcdOpsRequest`` (the one source of truth).

Modules: ``constants`` (groups, kinds, phases, condition types), ``common`` (shared models, durations),
``etcd`` and ``opsrequest`` (the two kinds), ``conditions`` (condition-list helpers), ``crdgen`` (CRDs from the
models, ``opsmanager crds``), ``apidoc`` (``docs/api.md`` from the models). Import the modules, not names::

    from opsmanager.api import conditions, constants, etcd, opsrequest
"""
