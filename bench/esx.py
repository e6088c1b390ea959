"""The esx controller's vCenter poll: one property-collector call for every host and VM, against
govmomi's vCenter simulator, compared with asking once per node as the reference does.

    python -m bench.esx --json [--hosts 8 --vms 100 --runs 5]

Starts `vcsim` (built by .ci/run into .venv/bin, or $NODEOPS_VCSIM) with `--hosts` hosts and
`--vms` VMs in all, then per run measures:

- `inventory`: `VCenter.inventory()`, the controller's poll: one RetrievePropertiesEx over a
  container view of hosts and VMs (with the hosts' recent tasks), turned into an `Inventory`;
- `per_node`: what one lookup per node costs on the same session (a container view and a
  filtered retrieve for each VM, then its host's runtime), summed over all VMs.

Reported: medians and the ratio. Target: `inventory` at most a tenth of `per_node` from 100 VMs
up (the poll must not grow with one round trip per node).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import time
from typing import Any

from nodeops.providers.vsphere.vcenter import Credentials, VCenter

TARGET_RATIO = 0.1


def _per_node(si: Any) -> int:
    """The reference's way: a lookup of each VM by name, then its host, one round trip each."""
    from pyVmomi import vim, vmodl

    pc = vmodl.query.PropertyCollector
    content = si.RetrieveContent()
    names = [vm.name for vm in _all(content, vim.VirtualMachine)]
    for name in names:
        view = content.viewManager.CreateContainerView(
            content.rootFolder, [vim.VirtualMachine], True
        )
        spec = pc.FilterSpec(
            objectSet=[
                pc.ObjectSpec(
                    obj=view,
                    skip=True,
                    selectSet=[
                        pc.TraversalSpec(path="view", skip=False, type=vim.view.ContainerView)
                    ],
                )
            ],
            propSet=[pc.PropertySpec(type=vim.VirtualMachine, pathSet=["name", "runtime.host"])],
        )
        found = content.propertyCollector.RetrieveContents([spec])
        view.Destroy()
        for item in found:
            props = {p.name: p.val for p in item.propSet}
            if props.get("name") == name:
                _ = props["runtime.host"].runtime.inMaintenanceMode
    return len(names)


def _all(content: Any, kind: Any) -> list[Any]:
    view = content.viewManager.CreateContainerView(content.rootFolder, [kind], True)
    try:
        return list(view.view)
    finally:
        view.Destroy()


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    binary = os.environ.get("NODEOPS_VCSIM") or shutil.which("vcsim")
    if binary is None:
        raise SystemExit("no vcsim binary: run .ci/run (it builds one into .venv/bin)")
    proc = await asyncio.create_subprocess_exec(
        binary, "-hosts", str(args.hosts), "-vms", str(args.vms), stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    url = (await proc.stdout.readline()).decode().strip()
    vcenter = VCenter(url, lambda: Credentials("user", "pass"), timeout=300)
    try:
        inventory = await vcenter.inventory()  # logs in; not measured
        poll: list[float] = []
        per_node: list[float] = []
        for _ in range(args.runs):
            started = time.perf_counter()
            await vcenter.inventory()
            poll.append(time.perf_counter() - started)
            started = time.perf_counter()
            await asyncio.to_thread(_per_node, vcenter._session())
            per_node.append(time.perf_counter() - started)
    finally:
        await vcenter.close()
        proc.terminate()
        await proc.wait()
    result: dict[str, Any] = {
        "bench": "esx",
        "hosts": len(inventory.hosts),
        "vms": len(inventory.vms),
        "runs": args.runs,
        "inventory_seconds_median": round(statistics.median(poll), 4),
        "per_node_seconds_median": round(statistics.median(per_node), 4),
        "python": platform.python_version(),
    }
    ratio = result["inventory_seconds_median"] / max(result["per_node_seconds_median"], 1e-9)
    result["ratio"] = round(ratio, 4)
    result["targets"] = {"ratio": TARGET_RATIO, "met": ratio <= TARGET_RATIO or args.vms < 100}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--vms", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the result as JSON only")
    args = parser.parse_args()
    result = asyncio.run(bench(args))
    print(json.dumps(result, indent=None if args.json else 2))
    if not result["targets"]["met"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
