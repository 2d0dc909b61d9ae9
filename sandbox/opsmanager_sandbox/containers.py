"""What a container would run: image check, environment (downward API, Secret/ConfigMap refs), argv.

Pure functions, no I/O: the kubelet passes lookups for Secrets and ConfigMaps. The rules follow the real
kubelet:

- ``$(VAR)`` in ``command``, ``args`` and ``env[].value`` is replaced by the variable's value when it is
  defined (earlier in ``env``, from ``envFrom``, or the container defaults); ``$$`` escapes a ``$``; an
  undefined ``$(VAR)`` is left as written.
- ``envFrom`` is applied first, then ``env`` (later wins); ``envFrom`` values are not expanded.
- argv is ``command`` (or the image ENTRYPOINT) followed by ``args`` (or the image CMD only when neither
  ``command`` nor ``args`` is given). The etcd images have no ENTRYPOINT and CMD ``/usr/local/bin/etcd``.
- Pod-local addresses: a pod's ``0.0.0.0``/``[::]`` (all interfaces) and its ``127.0.0.1``/``[::1]``
  (its own loopback) are its own IP in the sandbox, because sandbox pods share the host's loopback; they are
  rewritten to the pod IP in argv and env values. ``localhost`` resolves to the pod IP through the pod's
  hosts file instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

Obj = dict[str, Any]

ETCD_IMAGE_CMD = ["/usr/local/bin/etcd"]
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ContainerConfigError(Exception):
    """The container cannot be configured (the kubelet's ``CreateContainerConfigError``)."""


def is_etcd_image(image: str) -> bool:
    """True for images the sandbox can run: their repository name contains ``etcd``
    (``registry.k8s.io/etcd:3.5.1-0``, ``quay.io/coreos/etcd:v3.5.1``, ``gcr.io/etcd-development/etcd``)."""
    return "etcd" in image_name(image)


# The product's image (``deploy/base/kustomization.yaml`` ``images:``; the Dockerfile's ENTRYPOINT ``opsmanager``,
# CMD ``run``): its repository's last component is ``opsmanager`` (``opsmanager:0.1.0``,
# ``ghcr.io/example/opsmanager@sha256:...``). The sandbox runs it as ``python -m opsmanager`` of this interpreter.
PRODUCT_IMAGE_NAME = "opsmanager"
PRODUCT_IMAGE_CMD = ["run"]


def image_name(image: str) -> str:
    """The last component of an image's repository, without tag or digest (``registry/x/etcd:3.5`` → ``etcd``)."""
    repo = image.split("@", 1)[0]
    last = repo.rsplit("/", 1)[-1]
    return last.split(":", 1)[0]


def is_product_image(image: str) -> bool:
    """True for the operator's own image (see :data:`PRODUCT_IMAGE_NAME`)."""
    return image_name(image) == PRODUCT_IMAGE_NAME


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion (k8s.io/kubernetes third_party/forked/golang/expansion)."""
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "$" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2:end]
                    if name in env:
                        out.append(env[name])
                    else:
                        out.append(text[i:end + 1])
                    i = end + 1
                    continue
                out.append(text[i:])  # unterminated: kept as written
                break
        out.append(ch)
        i += 1
    return "".join(out)


_POD_LOCAL = re.compile(r"(?<![\w.])(?:0\.0\.0\.0|127\.0\.0\.1)(?![\w]|\.\d)|\[::1?\]")


def pod_local(text: str, pod_ip: str) -> str:
    """Rewrite all-interfaces and loopback addresses to the pod's own IP (see module docstring)."""
    return _POD_LOCAL.sub(pod_ip, text)


def _field_ref(pod: Obj, path: str, pod_ip: str, host_ip: str) -> str:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']*)'\]", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName") or "sandbox",
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
    }
    if path not in simple:
        raise ContainerConfigError(f"fieldRef.fieldPath {path!r} is not supported; use one of {sorted(simple)} "
                                   "or metadata.labels['<key>'] / metadata.annotations['<key>']")
    return str(simple[path])


def _resource_ref(container: Obj, ref: Obj) -> str:
    resource = ref.get("resource", "")
    kind, _, what = resource.partition(".")
    resources = container.get("resources") or {}
    value = (resources.get(kind) or {}).get(what)
    if value is None and kind == "requests":
        value = (resources.get("limits") or {}).get(what)
    if value is None:  # node allocatable, as the kubelet reports for unset limits
        if what == "cpu":
            value = str(os.cpu_count() or 1)
        elif what == "memory":
            value = str(_mem_total())
        else:
            value = "0"
    return str(value)


def _mem_total() -> int:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


# Where a container's environment names a Secret or ConfigMap, in the order the kubelet checks them.
_ENV_FROM_REFS: tuple[tuple[str, str], ...] = (("secretRef", "Secret"), ("configMapRef", "ConfigMap"))
_VALUE_FROM_REFS: tuple[tuple[str, str], ...] = (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap"))


def _named_ref(obj: Obj, refs: tuple[tuple[str, str], ...]) -> tuple[Obj, str] | None:
    """The first of ``refs`` that ``obj`` holds, as (the reference, the kind it names); None when it holds none."""
    for ref_key, kind in refs:
        if ref_key in obj:
            return obj[ref_key], kind
    return None


SecretLookup = Callable[[str, str], Mapping[str, bytes] | None]
ConfigMapLookup = Callable[[str, str], Mapping[str, str] | None]


def resolve_env(container: Obj, pod: Obj, *, pod_ip: str, host_ip: str = "127.0.0.1",
                secrets: SecretLookup, configmaps: ConfigMapLookup) -> dict[str, str]:
    """The container's environment, in definition order, as the kubelet builds it.

    ``secrets(namespace, name)`` returns decoded Secret data (or None when missing); ``configmaps`` likewise.
    Raises :class:`ContainerConfigError` with the kubelet's wording for a missing required reference.
    """
    ns = (pod.get("metadata") or {}).get("namespace") or "default"
    spec = pod.get("spec") or {}
    hostname = spec.get("hostname") or (pod.get("metadata") or {}).get("name", "")
    # What the container runtime sets: PATH, HOSTNAME, and HOME (``/``: the sandbox's container roots have no
    # passwd entry for the user, as containerd defaults then).
    env: dict[str, str] = {"PATH": DEFAULT_PATH, "HOSTNAME": hostname, "HOME": "/"}

    def text_data(kind: str, ref: Obj) -> Mapping[str, str] | None:
        """The Secret's (values decoded as text) or ConfigMap's data ``ref`` names; None when it is missing."""
        if kind == "ConfigMap":
            return configmaps(ns, ref.get("name", ""))
        data = secrets(ns, ref.get("name", ""))
        return None if data is None else {k: v.decode(errors="replace") for k, v in data.items()}

    for src in container.get("envFrom") or []:
        prefix = src.get("prefix") or ""
        named = _named_ref(src, _ENV_FROM_REFS)
        if named is None:
            continue
        ref, kind = named
        found = text_data(kind, ref)
        if found is None:
            if ref.get("optional"):
                continue
            raise ContainerConfigError(f'{kind.lower()} "{ref.get("name", "")}" not found')
        for key, text in found.items():
            env[prefix + key] = text
    for item in container.get("env") or []:
        name = item.get("name", "")
        if "value" in item or "valueFrom" not in item:
            env[name] = expand(str(item.get("value") or ""), env)
            continue
        vf = item["valueFrom"]
        if "fieldRef" in vf:
            env[name] = _field_ref(pod, vf["fieldRef"].get("fieldPath", ""), pod_ip, host_ip)
        elif "resourceFieldRef" in vf:
            env[name] = _resource_ref(container, vf["resourceFieldRef"])
        elif (named := _named_ref(vf, _VALUE_FROM_REFS)) is not None:
            ref, kind = named
            found = text_data(kind, ref)
            if found is None or ref.get("key") not in found:
                if ref.get("optional"):
                    continue
                if found is None:
                    raise ContainerConfigError(f'{kind.lower()} "{ref.get("name", "")}" not found')
                raise ContainerConfigError(f'couldn\'t find key {ref.get("key")} in {kind} {ns}/{ref.get("name")}')
            env[name] = found[ref["key"]]
        else:
            raise ContainerConfigError(f"env {name!r}: valueFrom needs fieldRef, resourceFieldRef, secretKeyRef "
                                       "or configMapKeyRef")
    return {k: pod_local(v, pod_ip) for k, v in env.items()}


def build_argv(container: Obj, env: Mapping[str, str], *, pod_ip: str,
               image_entrypoint: list[str] | None = None, image_cmd: list[str] | None = None) -> list[str]:
    """argv of the container's process (before mapping it into the pod's filesystem)."""
    entrypoint = [] if image_entrypoint is None else image_entrypoint
    cmd = ETCD_IMAGE_CMD if image_cmd is None else image_cmd
    command = container.get("command")
    args = container.get("args")
    if command:
        argv = [expand(str(a), env) for a in command] + [expand(str(a), env) for a in args or []]
    elif args:
        argv = list(entrypoint) + [expand(str(a), env) for a in args]
    else:
        argv = list(entrypoint) + list(cmd)
    if not argv:
        raise ContainerConfigError("no command specified")
    return [pod_local(a, pod_ip) for a in argv]


def container_port(container: Obj, port: int | str) -> int:
    """Resolve a probe's ``port`` (a number or the name of one of the container's ports)."""
    if isinstance(port, int):
        return port
    if isinstance(port, str) and port.isdigit():
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ContainerConfigError(f"port {port!r} is not the name of a port of container {container.get('name')!r}")
