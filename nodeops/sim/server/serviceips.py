"""Service addresses the API server allocates on create: cluster IPs and node ports.

kube-apiserver gives every Service but an ExternalName one a cluster IP from the service CIDR
(unless it asks for none, a headless Service) and every port of a NodePort or LoadBalancer
Service a node port from 30000-32767, each unique in the cluster, and fills in the IP family
fields. `kubectl get services` shows what clients see: an address, never `<none>`.
"""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Iterable, Mapping
from typing import Any

SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/12")
NODE_PORTS = range(30000, 32768)
_FIRST_HOST = 2  # .0 is the network, .1 the `kubernetes` Service's


def _used(services: Iterable[Mapping[str, Any]]) -> tuple[set[str], set[int]]:
    ips: set[str] = set()
    ports: set[int] = set()
    for svc in services:
        spec = svc.get("spec") or {}
        ips.update(str(ip) for ip in spec.get("clusterIPs") or [spec.get("clusterIP")] if ip)
        ports.update(int(p["nodePort"]) for p in spec.get("ports") or [] if p.get("nodePort"))
    return ips, ports


def allocate(
    spec: dict[str, Any], existing: Iterable[Mapping[str, Any]], rng: random.Random
) -> None:
    """Fill `spec` as the Service REST storage does on create."""
    svc_type = spec.get("type") or "ClusterIP"
    if svc_type == "ExternalName":
        return
    used_ips, used_ports = _used(existing)
    if not spec.get("clusterIP"):
        size = SERVICE_CIDR.num_addresses - _FIRST_HOST - 1
        while True:
            ip = str(SERVICE_CIDR.network_address + _FIRST_HOST + rng.randrange(size))
            if ip not in used_ips:
                break
        spec["clusterIP"] = ip
    spec.setdefault("clusterIPs", [spec["clusterIP"]])
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    if svc_type in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
        for port in spec.get("ports") or []:
            if not port.get("nodePort"):
                free = [p for p in NODE_PORTS if p not in used_ports]
                port["nodePort"] = rng.choice(free)
            used_ports.add(int(port["nodePort"]))


def keep_allocated(old: Mapping[str, Any], new: dict[str, Any]) -> None:
    """An update that leaves allocated addresses out keeps them (kube's patchAllocatedValues):
    a `kubectl replace` of a manifest without clusterIP must not change or lose it."""
    if new.get("type", "ClusterIP") == "ExternalName":
        return
    for key in ("clusterIP", "clusterIPs"):
        if not new.get(key) and old.get(key):
            new[key] = old[key]
    if new.get("type") in ("NodePort", "LoadBalancer"):
        by_port = {(p.get("port"), p.get("protocol", "TCP")): p for p in old.get("ports") or []}
        for port in new.get("ports") or []:
            prev = by_port.get((port.get("port"), port.get("protocol", "TCP")))
            if not port.get("nodePort") and prev and prev.get("nodePort"):
                port["nodePort"] = prev["nodePort"]
