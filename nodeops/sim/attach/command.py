"""`nodeops sim attach` and `nodeops sim detach`: the command line of `Attachment`.

Bad input ends in one line on stderr and a non-zero exit before anything is created. A signal
(SIGINT, SIGTERM) stops the attached loops and removes what they created; `detach` does the same
from the cluster alone, for an attach that cannot do it any more.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections import Counter
from typing import Any

from nodeops.sim.attach.attachment import CONTROLLERS, Attachment, AttachOptions, parse_controllers
from nodeops.sim.attach.cleanup import remove_labelled
from nodeops.sim.attach.kubeconfig import AttachError, load_target
from nodeops.sim.attach.labels import ATTACH_LABEL
from nodeops.sim.attach.preflight import check_reachable
from nodeops.sim.cluster.apiclient import ApiClient, ApiError

__all__ = ["add_arguments", "attach_from_args", "describe_removed", "detach_from_args"]

DEFAULT_PROVIDER_CONFIG = "sim-providers.yaml"


def add_arguments(sim_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    attach = sim_sub.add_parser(
        "attach",
        help="attach simulated nodes and clouds to another API server until SIGINT/SIGTERM",
        description="Register simulated nodes (their kubelets, leases and pods' status) and "
        "simulated cloud node groups, load balancers and OpenStack pools with an existing API "
        "server, serve the clouds' APIs on loopback, and remove everything created on exit. "
        f"Every object created is labelled {ATTACH_LABEL}=<id>.",
    )
    _target_arguments(attach)
    attach.add_argument("--nodes", type=int, default=3, help="standalone nodes <id>-node-<i>, "
                        "or with --node-groups nodes per group (default 3)")  # fmt: skip
    attach.add_argument(
        "--node-groups", type=int, default=0, help="cloud node groups group-<i> (default 0)"
    )
    attach.add_argument("--scenario", help="a scenario YAML file describing what to create")
    attach.add_argument(
        "--openstack-pool",
        action="append",
        default=[],
        metavar="NAME:SIZE[:VERSION]",
        help="a Kubernikus-style node pool behind a simulated Keystone + Nova (repeatable)",
    )
    attach.add_argument("--kube-version", help="the kubelet version of new OpenStack servers")
    attach.add_argument("--time-scale", type=float, default=None, help="simulated s per wall s")
    attach.add_argument("--seed", type=int, default=0)
    attach.add_argument(
        "--instant", action="store_true", help="kubelets start and stop pods at once"
    )
    attach.add_argument(
        "--controllers",
        default="",
        metavar="LIST",
        help="control-plane loops to run too, comma-separated from "
        f"{','.join(CONTROLLERS)}, or all (default: none; a bare kube-apiserver needs all, a "
        "cluster with kube-controller-manager and kube-scheduler none)",
    )
    attach.add_argument(
        "--no-controllers",
        action="store_true",
        help="run the kubelets and clouds only (the default)",
    )
    attach.add_argument("--cloud-port", type=int, default=0, help="loopback port of the clouds")
    attach.add_argument(
        "--provider-config-out",
        default=DEFAULT_PROVIDER_CONFIG,
        help="where to write the providers: block for `nodeops run --provider-config` "
        f"(default {DEFAULT_PROVIDER_CONFIG})",
    )
    detach = sim_sub.add_parser(
        "detach",
        help="remove everything a `sim attach` created, found by its label",
        description=f"Delete every object labelled {ATTACH_LABEL}=<id> (nodes, leases, pods, "
        "workloads, namespaces, CustomResourceDefinitions it installed), also after the "
        "attach was killed.",
    )
    _target_arguments(detach)
    detach.add_argument(
        "--all", action="store_true", help="every attach's objects, whatever their id"
    )


def _target_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", required=True, help="kubeconfig of the API server")
    parser.add_argument("--context", help="kubeconfig context (default: its current one)")
    parser.add_argument(
        "--id", default="sim", help=f"the attach's id, the value of {ATTACH_LABEL} (default sim)"
    )


def options_from_args(args: argparse.Namespace) -> AttachOptions:
    from nodeops.sim.serve import _openstack_pools

    if args.no_controllers and args.controllers:
        raise AttachError("--controllers and --no-controllers exclude each other")
    for name in ("nodes", "node_groups"):
        if getattr(args, name) < 0:
            raise AttachError(f"--{name.replace('_', '-')} must not be negative")
    if args.time_scale is not None and args.time_scale <= 0:
        raise AttachError("--time-scale must be positive")
    try:
        pools = _openstack_pools(args.openstack_pool, args.kube_version)
    except ValueError as exc:
        raise AttachError(f"--openstack-pool: {exc}") from None
    return AttachOptions(
        kubeconfig=args.kubeconfig,
        context=args.context,
        instance=args.id,
        nodes=args.nodes,
        node_groups=args.node_groups,
        scenario=args.scenario,
        openstack_pools=pools,
        time_scale=args.time_scale,
        seed=args.seed,
        instant=args.instant,
        controllers=parse_controllers(args.controllers),
        cloud_port=args.cloud_port,
        provider_config_out=args.provider_config_out or None,
    )


def describe_removed(removed: Counter[str]) -> str:
    if not removed:
        return "nothing to remove"
    parts = ", ".join(f"{n} {key}" for key, n in sorted(removed.items()))
    return f"removed {sum(removed.values())} objects ({parts})"


def _fail(command: str, message: Any) -> int:
    print(f"nodeops sim {command}: {message}", file=sys.stderr, flush=True)
    return 1


def attach_from_args(args: argparse.Namespace) -> int:
    try:
        options = options_from_args(args)
        return asyncio.run(_attach(options, args.kubeconfig))
    except AttachError as exc:
        return _fail("attach", exc)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        from nodeops.sim.scenario import ScenarioError

        if isinstance(exc, ScenarioError | OSError | ApiError):
            return _fail("attach", exc)
        raise


async def _attach(options: AttachOptions, kubeconfig: str) -> int:
    attachment = Attachment(options)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await attachment.start()
    except BaseException:
        # Whatever was created before the failure goes again; a refusal created nothing.
        await attachment.stop()
        raise
    print(
        f"attached to {attachment.target.server} as {options.instance!r} "
        f"({ATTACH_LABEL}={options.instance})",
        flush=True,
    )
    print(f"simulated cloud serving at {attachment.cloud_url}", flush=True)
    if attachment.provider_config is not None:
        print(
            f"provider config written to {attachment.provider_config}: nodeops run "
            f"--kubeconfig {kubeconfig} --provider sim --provider-config "
            f"{attachment.provider_config}",
            flush=True,
        )
    if not options.controllers:
        print(
            "no control-plane loops run here (--controllers): the cluster's own scheduler "
            "and controller manager schedule and manage pods",
            flush=True,
        )
    await stop.wait()
    removed = await attachment.stop()
    print(f"detached: {describe_removed(removed)}", flush=True)
    return 0


def detach_from_args(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_detach(args))
    except AttachError as exc:
        return _fail("detach", exc)
    except ApiError as exc:
        return _fail("detach", exc)


async def _detach(args: argparse.Namespace) -> int:
    target = load_target(args.kubeconfig, args.context)
    async with ApiClient(
        target.server, target.token, component="detach", ssl_context=target.ssl_context
    ) as client:
        await check_reachable(client)
        removed = await remove_labelled(client, None if args.all else args.id)
    print(describe_removed(removed), flush=True)
    return 0
