"""Kubelet version drift labels, both ways, as the API server's version changes."""

from __future__ import annotations

from nodeops.kube.metrics import REGISTRY
from nodeops.kube.resources import NODES

from .conftest import NEW, OLD, Env

LABEL = "nodeops.dev/kubelet-needs-update"
OUTDATED = "nodeops_kubernikus_nodes_outdated"


def reconciles() -> float:
    return sum(
        REGISTRY.get_sample_value(
            "controller_runtime_reconcile_total", {"controller": "kubernikus", "result": result}
        )
        or 0.0
        for result in ("success", "requeue", "requeue_after", "error")
    )


async def test_labels_follow_the_api_server_version(env: Env) -> None:
    await env.start()

    async def labels() -> dict[str, str | None]:
        return {
            n: node["metadata"].get("labels", {}).get(LABEL)
            for n, node in (await env.nodes()).items()
        }

    async def all_outdated() -> bool:
        return set((await labels()).values()) == {"true"}

    # Every kubelet runs OLD against a NEW API server: an upgrade is due.
    await env.wait(all_outdated, "every node labelled for an upgrade")

    async def outdated_counted(count: float) -> bool:
        return REGISTRY.get_sample_value(OUTDATED) == count

    await env.wait(lambda: outdated_counted(3), "three outdated nodes in the metrics")

    # Looking at the nodes again writes nothing: the labels are already right.
    labelled = env.sim.server.stats.snapshot()["by_agent"]["nodeops"]["by_verb_resource"]
    assert labelled["patch/nodes"]["requests"] >= 3  # the labels were written by this agent
    env.sim.server.stats.reset()
    before = reconciles()
    for name in await env.nodes():
        await env.client.patch(NODES, name, {"metadata": {"annotations": {"poke": "1"}}})

    async def looked_again() -> bool:
        return reconciles() >= before + 3

    await env.wait(looked_again, "three more reconciles")
    ours = env.sim.server.stats.snapshot()["by_agent"].get("nodeops", {})
    assert "patch/nodes" not in ours.get("by_verb_resource", {})

    # The control plane is rolled back to the kubelets' version: nothing to do.
    env.sim.server.set_kube_version(OLD)

    async def none_outdated() -> bool:
        return set((await labels()).values()) == {None}

    await env.wait(none_outdated, "labels removed once the versions match")
    await env.wait(lambda: outdated_counted(0), "no outdated node in the metrics")

    # Rolled back further: the kubelets are now newer than the API server (a downgrade).
    env.sim.server.set_kube_version("v1.30.9")
    await env.wait(all_outdated, "every node labelled for a downgrade")

    # A node whose kubelet reports the API server's version is left unlabelled.
    env.sim.server.set_kube_version(NEW)
    name = next(iter(await env.nodes()))
    await env.client.patch(
        NODES, name, {"status": {"nodeInfo": {"kubeletVersion": NEW}}}, subresource="status"
    )

    async def only_that_one_clear() -> bool:
        current = await labels()
        return current[name] is None and all(v == "true" for n, v in current.items() if n != name)

    await env.wait(only_that_one_clear, "the up-to-date node unlabelled")
