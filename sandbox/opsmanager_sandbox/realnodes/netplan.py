"""The addresses and names of one sandbox's cluster network: pure arithmetic, no I/O.

Every sandbox on real nodes owns a slice of ``198.18.0.0/15`` (RFC 2544's benchmarking range: never routed on the
internet, never a real site's private range), a /20 that exists only inside the network namespaces it creates. The
slice's index is reserved by a lock file (:mod:`.network`), so test workers running side by side never share one.

Within the slice (``S`` its first address)::

    S+0.0/24     the cluster's L2 segment: the bridge in the cluster namespace (.1), the nodes (.11, .12, …),
                 the host's end of its one veth (.254: kube-apiserver advertises and binds it)
    S+1.0/24     Services (ClusterIPs): .1 the ``kubernetes`` Service, .10 cluster DNS
    S+8.0/21     pods: node i gets S+(7+i).0/24

The host has one route, for the whole slice, through the cluster namespace; the cluster namespace routes each node's
pod range to that node. No namespace has a default route, so a packet for any address outside the slice is dropped
where it is, and the host forwards nothing that arrives from the slice (``forwarding=0`` on its veth).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import Final

SUPERNET: Final = ipaddress.IPv4Network("198.18.0.0/15")
SLICE_PREFIX: Final = 20
SLICES: Final = 2 ** (SLICE_PREFIX - SUPERNET.prefixlen)
MAX_NODES: Final = 8
PREFIX: Final = "omsb"
"""Every network namespace, interface and cgroup of a sandbox on real nodes starts with this, then the slice's
index in two digits: a sweep finds what a killed sandbox left by name."""


@dataclasses.dataclass(frozen=True)
class NetPlan:
    index: int
    nodes: int

    def __post_init__(self) -> None:
        if not 0 <= self.index < SLICES:
            raise ValueError(f"slice index {self.index} is outside 0..{SLICES - 1}")
        if not 1 <= self.nodes <= MAX_NODES:
            raise ValueError(f"nodes must be 1..{MAX_NODES}, not {self.nodes}")

    # -- ranges --------------------------------------------------------------------------------------------------

    @property
    def slice(self) -> ipaddress.IPv4Network:
        return list(SUPERNET.subnets(new_prefix=SLICE_PREFIX))[self.index]

    def _subnet(self, offset: int, prefix: int) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network((int(self.slice.network_address) + offset * 256, prefix))

    @property
    def segment(self) -> ipaddress.IPv4Network:
        return self._subnet(0, 24)

    @property
    def services(self) -> ipaddress.IPv4Network:
        return self._subnet(1, 24)

    @property
    def pods(self) -> ipaddress.IPv4Network:
        return self._subnet(8, 21)

    def pod_cidr(self, node: int) -> ipaddress.IPv4Network:
        self._check(node)
        return self._subnet(7 + node, 24)

    # -- addresses -----------------------------------------------------------------------------------------------

    @property
    def gateway(self) -> str:
        """The bridge's address in the cluster namespace: the next hop for the whole slice."""
        return str(self.segment[1])

    @property
    def host_ip(self) -> str:
        """The host's end of its veth: kube-apiserver binds and advertises it."""
        return str(self.segment[254])

    def node_ip(self, node: int) -> str:
        self._check(node)
        return str(self.segment[10 + node])

    @property
    def kubernetes_service_ip(self) -> str:
        return str(self.services[1])

    @property
    def dns_ip(self) -> str:
        return str(self.services[10])

    # -- names ---------------------------------------------------------------------------------------------------

    @property
    def tag(self) -> str:
        return f"{PREFIX}{self.index:02d}"

    @property
    def cluster_netns(self) -> str:
        return self.tag

    def node_netns(self, node: int) -> str:
        self._check(node)
        return f"{self.tag}n{node}"

    @property
    def host_veth(self) -> str:
        return f"{self.tag}h"

    def node_veth(self, node: int) -> str:
        """The cluster namespace's end of node ``node``'s veth (the node's end is its ``eth0``)."""
        self._check(node)
        return f"{self.tag}v{node}"

    def node_name(self, node: int) -> str:
        self._check(node)
        return f"node-{node}"

    def cgroup_root(self, node: int) -> str:
        """The kubelet's ``cgroupRoot``: two nodes (or two sandboxes) never share ``/kubepods``."""
        return f"/{self.node_netns(node)}"

    def _check(self, node: int) -> None:
        if not 1 <= node <= self.nodes:
            raise ValueError(f"node {node} is outside 1..{self.nodes}")


def owns(tag_or_name: str, index: int) -> bool:
    """Whether a namespace, interface or cgroup name belongs to slice ``index`` (``omsb07``, ``omsb07n2`` …)."""
    tag = f"{PREFIX}{index:02d}"
    return tag_or_name == tag or (tag_or_name.startswith(tag) and tag_or_name[len(tag):][:1] in ("n", "h", "v"))
