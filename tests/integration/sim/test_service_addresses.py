"""Conformance: the API server allocates Service cluster IPs and node ports on create, as
kube-apiserver does, and an update that leaves them out keeps them."""

from __future__ import annotations

import ipaddress
from typing import Any

from tests.integration.sim.conftest import Api

SVCS = "/api/v1/namespaces/default/services"


def service(name: str, svc_type: str = "ClusterIP", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"type": svc_type, "ports": [{"port": 80}], "selector": {"app": name}, **spec},
    }


async def test_cluster_ips_are_allocated_unique_and_kept(api: Api) -> None:
    code, a = await api.post(SVCS, service("a"))
    assert code == 201, a
    code, b = await api.post(SVCS, service("b"))
    assert code == 201, b
    ip_a, ip_b = a["spec"]["clusterIP"], b["spec"]["clusterIP"]
    assert ipaddress.ip_address(ip_a) in ipaddress.ip_network("10.96.0.0/12")
    assert ip_a != ip_b
    assert a["spec"]["clusterIPs"] == [ip_a]
    assert a["spec"]["ipFamilies"] == ["IPv4"]
    assert a["spec"]["ipFamilyPolicy"] == "SingleStack"

    edited = service("a")  # a replace from a manifest that never named the address
    edited["metadata"]["resourceVersion"] = a["metadata"]["resourceVersion"]
    code, replaced = await api.put(f"{SVCS}/a", edited)
    assert code == 200, replaced
    assert replaced["spec"]["clusterIP"] == ip_a


async def test_node_ports_headless_and_external_name(api: Api) -> None:
    code, np = await api.post(SVCS, service("np", "NodePort"))
    assert code == 201, np
    node_port = np["spec"]["ports"][0]["nodePort"]
    assert 30000 <= node_port <= 32767
    assert np["spec"]["externalTrafficPolicy"] == "Cluster"
    code, headless = await api.post(SVCS, service("hl", clusterIP="None"))
    assert code == 201 and headless["spec"]["clusterIPs"] == ["None"], headless
    code, ext = await api.post(
        SVCS, {**service("ext", "ExternalName", externalName="db.example.com"), "ports": None}
    )
    assert code == 201, ext
    assert "clusterIP" not in ext["spec"]
