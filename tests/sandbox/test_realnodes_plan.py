"""The cluster network's plan (pure): every slice inside 198.18.0.0/15, slices disjoint, every range of a slice
inside it and apart from the others, names within the kernel's interface-name limit."""

from __future__ import annotations

import ipaddress
import itertools

import pytest

from opsmanager_sandbox.realnodes import netplan

IFNAMSIZ = 15  # the kernel's limit on an interface name, without its NUL


def plans() -> list[netplan.NetPlan]:
    return [netplan.NetPlan(i, netplan.MAX_NODES) for i in range(netplan.SLICES)]


def test_every_slice_is_inside_the_benchmarking_range_and_apart_from_the_others() -> None:
    slices = [p.slice for p in plans()]
    assert len(slices) == 32
    sites = [ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "127.0.0.0/8")]
    for s in slices:
        assert s.subnet_of(netplan.SUPERNET)
        assert not any(s.overlaps(site) for site in sites)
    for a, b in itertools.combinations(slices, 2):
        assert not a.overlaps(b)


@pytest.mark.parametrize("index", [0, 7, 31])
def test_the_ranges_of_a_slice_are_inside_it_and_disjoint(index: int) -> None:
    p = netplan.NetPlan(index, netplan.MAX_NODES)
    ranges = [p.segment, p.services, *(p.pod_cidr(n) for n in range(1, p.nodes + 1))]
    for r in ranges:
        assert r.subnet_of(p.slice)
    for a, b in itertools.combinations(ranges, 2):
        assert not a.overlaps(b), (a, b)
    assert all(p.pod_cidr(n).subnet_of(p.pods) for n in range(1, p.nodes + 1))
    on_segment = [p.gateway, p.host_ip, *(p.node_ip(n) for n in range(1, p.nodes + 1))]
    assert len(set(on_segment)) == len(on_segment)
    assert all(ipaddress.ip_address(a) in p.segment for a in on_segment)
    assert ipaddress.ip_address(p.kubernetes_service_ip) in p.services
    assert ipaddress.ip_address(p.dns_ip) in p.services


def test_names_fit_the_kernel_and_say_which_slice_they_belong_to() -> None:
    p = netplan.NetPlan(31, netplan.MAX_NODES)
    names = [p.cluster_netns, p.host_veth, *(p.node_veth(n) for n in range(1, 9)),
             *(p.node_netns(n) for n in range(1, 9))]
    assert all(len(n) <= IFNAMSIZ for n in names)
    assert all(netplan.owns(n, 31) for n in names)
    assert not any(netplan.owns(n, 3) for n in names)
    assert not netplan.owns("omsb310", 31) and not netplan.owns("eth0", 31)
    assert p.cgroup_root(2) == "/omsb31n2"


def test_out_of_range_inputs_are_refused_naming_the_limit() -> None:
    with pytest.raises(ValueError, match="slice index 32 is outside 0..31"):
        netplan.NetPlan(32, 1)
    with pytest.raises(ValueError, match="nodes must be 1..8"):
        netplan.NetPlan(0, 9)
    with pytest.raises(ValueError, match="node 4 is outside 1..3"):
        netplan.NetPlan(0, 3).node_ip(4)
