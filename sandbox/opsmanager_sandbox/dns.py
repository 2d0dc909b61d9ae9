"""Cluster DNS for sandbox pods, served through each pod's own ``/etc/hosts``.

A real pod resolves ``<hostname>.<subdomain>.<ns>.svc.cluster.local`` and Service names through CoreDNS. The
sandbox has no DNS server: every pod gets a hosts file (bind-mounted on its ``/etc/hosts``, rewritten in place
when pods and Services change) listing the records CoreDNS would serve, in the forms a pod can type:

- a pod with ``hostname`` + ``subdomain``, selected by a Service named ``<subdomain>`` in its namespace, is
  published as ``<h>.<s>.<ns>.svc.<domain>`` (first on its line, so the reverse lookup of its IP — the PTR —
  is this FQDN, as with CoreDNS), ``<h>.<s>.<ns>.svc``, ``<h>.<s>.<ns>`` and, for pods of the same namespace,
  ``<h>.<s>`` (what the search path ``<ns>.svc.<domain>`` would complete);
- a Service is published as ``<svc>.<ns>.svc.<domain>``, ``<svc>.<ns>.svc``, ``<svc>.<ns>`` and (same
  namespace) ``<svc>``, with one line per endpoint pod IP. There are no virtual IPs: a ClusterIP Service
  name resolves to its endpoint pod IPs, so connect to the ``targetPort``;
- endpoints follow the endpoints controller: pods that match the selector, are not terminating and are Ready
  — or any pod with an IP when the Service sets ``publishNotReadyAddresses: true`` (etcd needs that to
  bootstrap, on a real cluster as here);
- the pod's own line carries its FQDN, its hostname and ``localhost`` (a pod's loopback is its own IP here).

Peer connections between sandbox pods arrive from 127.0.0.1: all pods share the host's loopback and Linux
picks 127.0.0.1 as the source address of any connection to 127.0.0.0/8 (``src 127.0.0.1`` on the local
route), so a server cannot see which pod connected. etcd's peer SAN check reverse-resolves the remote address
and compares the names with the client certificate's DNS SANs; so the hosts file maps 127.0.0.1 to the FQDNs
(only the ``.svc.<domain>`` form, what a PTR returns) of the published pods of the pod's own subdomain. A peer
certificate whose SANs cover those FQDNs (``*.<s>.<ns>.svc.<domain>``) passes, one with only the ``.svc``
wildcard fails — as on a real cluster; what the sandbox cannot check is *which* member connected. That line
is written last so that forward lookups of those FQDNs return the pod IP first (Go keeps hosts-file order).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from opsmanager.kube import selectors


@dataclasses.dataclass(frozen=True)
class PodRecord:
    namespace: str
    name: str
    ip: str
    hostname: str = ""
    subdomain: str = ""
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    ready: bool = False
    terminating: bool = False

    @property
    def host(self) -> str:
        return self.hostname or self.name


@dataclasses.dataclass(frozen=True)
class ServiceRecord:
    namespace: str
    name: str
    selector: Mapping[str, str] | None
    publish_not_ready: bool = False


def _selects(svc: ServiceRecord, pod: PodRecord) -> bool:
    if svc.namespace != pod.namespace or not svc.selector:
        return False
    return selectors.matches_set(svc.selector, pod.labels)


def _endpoint(svc: ServiceRecord, pod: PodRecord) -> bool:
    if not pod.ip or not _selects(svc, pod):
        return False
    if svc.publish_not_ready:
        return True
    return pod.ready and not pod.terminating


def published_pods(pods: Iterable[PodRecord], services: Iterable[ServiceRecord]) -> list[PodRecord]:
    """Pods that have a ``<hostname>.<subdomain>`` record (see module docstring)."""
    svcs = {(s.namespace, s.name): s for s in services}
    out = []
    for pod in pods:
        if not pod.subdomain:
            continue
        svc = svcs.get((pod.namespace, pod.subdomain))
        if svc is not None and _endpoint(svc, pod):
            out.append(pod)
    return sorted(out, key=lambda p: (p.namespace, p.name))


def _pod_names(pod: PodRecord, viewer_ns: str, domain: str) -> list[str]:
    base = f"{pod.host}.{pod.subdomain}.{pod.namespace}"
    names = [f"{base}.svc.{domain}", f"{base}.svc", base]
    if pod.namespace == viewer_ns:
        names.append(f"{pod.host}.{pod.subdomain}")
    return names


def _svc_names(svc: ServiceRecord, viewer_ns: str, domain: str) -> list[str]:
    base = f"{svc.name}.{svc.namespace}"
    names = [f"{base}.svc.{domain}", f"{base}.svc", base]
    if svc.namespace == viewer_ns:
        names.append(svc.name)
    return names


class HostsTable:
    """What every pod's hosts file is made of, computed once per pass over the pods and Services; then
    :meth:`for_pod` writes one pod's file from it.

    Why a table: a pass writes every pod's file, and each file lists every Service's endpoints. Computing the
    endpoints per file made a pass cost pods² × Services selector checks — at 90 pods and 60 Services that was
    most of the sandbox's CPU while thirty clusters restarted their members."""

    def __init__(self, pods: Iterable[PodRecord], services: Iterable[ServiceRecord],
                 domain: str = "cluster.local") -> None:
        self.domain = domain
        pods = sorted(pods, key=lambda p: (p.namespace, p.name))
        services = sorted(services, key=lambda s: (s.namespace, s.name))
        self.published = published_pods(pods, services)
        # Pods by (namespace, label): a Service's endpoints are among the pods with the first label it selects
        # (checking every pod of the namespace against every Service was most of a pass at thirty clusters).
        by_label: dict[tuple[str, str, str], list[PodRecord]] = {}
        for pod in pods:
            for k, v in pod.labels.items():
                by_label.setdefault((pod.namespace, k, v), []).append(pod)

        def candidates(svc: ServiceRecord) -> list[PodRecord]:
            if not svc.selector:
                return []
            k, v = next(iter(svc.selector.items()))
            return by_label.get((svc.namespace, k, v), [])

        # (service, its endpoint IPs in pod order): the Services' lines, viewer-independent but for the short form
        self.endpoints = [(svc, [pod.ip for pod in candidates(svc) if _endpoint(svc, pod)]) for svc in services]
        self._published_by_subdomain: dict[tuple[str, str], list[str]] = {}
        for pod in self.published:
            self._published_by_subdomain.setdefault((pod.namespace, pod.subdomain), []).append(
                f"{pod.host}.{pod.subdomain}.{pod.namespace}.svc.{domain}")
        self._by_viewer: dict[str, tuple[list[tuple[str, str, list[str]]], str]] = {}

    def signature(self) -> tuple[object, ...]:
        """Everything :meth:`for_pod` reads besides the viewer itself: equal signatures, equal files."""
        return (self.domain,
                tuple((p.namespace, p.name, p.ip, p.host, p.subdomain) for p in self.published),
                tuple((s.namespace, s.name, tuple(ips)) for s, ips in self.endpoints))

    def _viewer_lines(self, viewer_ns: str) -> tuple[list[tuple[str, str, list[str]]], str]:
        """For viewers in ``viewer_ns``: the published pods' lines in order, each (ip, line, names), and the
        Services' lines (one string) — the parts of a hosts file that do not depend on which pod reads it."""
        cached = self._by_viewer.get(viewer_ns)
        if cached is not None:
            return cached
        by_ip: dict[str, list[str]] = {}
        for pod in self.published:
            names = by_ip.setdefault(pod.ip, [])
            names += _pod_names(pod, viewer_ns, self.domain)
        pod_lines = []
        for ip, names in by_ip.items():
            names = list(dict.fromkeys(names))
            pod_lines.append((ip, f"{ip}\t{' '.join(names)}", names))
        svc_lines: list[str] = []
        for svc, ips in self.endpoints:
            if ips:
                svc_names = " ".join(_svc_names(svc, viewer_ns, self.domain))
                svc_lines += [f"{ip}\t{svc_names}" for ip in ips]
        cached = self._by_viewer[viewer_ns] = (pod_lines, "".join(line + "\n" for line in svc_lines))
        return cached

    def for_pod(self, me: PodRecord) -> str:
        """The ``/etc/hosts`` of pod ``me``.

        Its own line comes first (its FQDN, hostname, ``localhost``, then the names of any published pod with
        its IP), then every other published IP's names, then the Services' endpoints, then the 127.0.0.1 peer
        line; the viewer-independent parts are built once per viewer namespace (:meth:`_viewer_lines`)."""
        domain = self.domain
        own: list[str] = []
        if me.subdomain:
            own += [f"{me.host}.{me.subdomain}.{me.namespace}.svc.{domain}"]
        own += [me.host, "localhost"]
        if me.subdomain:
            own += _pod_names(me, me.namespace, domain)[1:]
        pod_lines, svc_text = self._viewer_lines(me.namespace)
        out = ["# Kubernetes-managed hosts file (opsmanager sandbox): pod and Service DNS records of the cluster.",
               "# Rewritten in place by the sandbox kubelet; see sandbox/opsmanager_sandbox/dns.py."]
        mine: list[str] = []
        others: list[str] = []
        for ip, line, names in pod_lines:
            if ip == me.ip:
                mine = names
            else:
                others.append(line)
        out.append(f"{me.ip}\t{' '.join(dict.fromkeys(own + mine))}")
        out += others
        text = "\n".join(out) + "\n" + svc_text
        peers = self._published_by_subdomain.get((me.namespace, me.subdomain), []) if me.subdomain else []
        if peers:
            text += ("# peer connections between sandbox pods come from 127.0.0.1 (shared loopback): reverse-map it\n"
                     f"127.0.0.1\t{' '.join(peers)}\n")
        return text


def hosts_file(me: PodRecord, pods: Iterable[PodRecord], services: Iterable[ServiceRecord],
               domain: str = "cluster.local") -> str:
    """The ``/etc/hosts`` of pod ``me`` (one file; a pass over every pod uses one :class:`HostsTable`)."""
    return HostsTable(pods, services, domain).for_pod(me)


def resolv_conf(namespace: str, domain: str = "cluster.local", nameserver: str = "127.0.0.53") -> str:
    """A pod's resolv.conf: the cluster search path (names not in the hosts file fail fast)."""
    return (f"search {namespace}.svc.{domain} svc.{domain} {domain}\n"
            f"nameserver {nameserver}\noptions ndots:5 timeout:1 attempts:1\n")


NSSWITCH = "hosts: files dns\n"


def write_in_place(path: Path, content: str) -> bool:
    """Replace ``path``'s content keeping its inode (a bind mount pins the inode). False if unchanged."""
    data = content.encode()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size == len(data) and os.pread(fd, size, 0) == data:
            return False
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
        return True
    finally:
        os.close(fd)


def dead_nameserver(ip: str) -> str:
    """A loopback address in the sandbox's own range where nothing listens: DNS misses fail at once."""
    parts = ip.split(".")
    return f"127.{parts[1]}.255.254"
