"""The `nodeops` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from nodeops import __version__
from nodeops.controllers.cycling import command as cycle_command
from nodeops.controllers.maintenance import command as maintenance_command
from nodeops.demo import command as demo_command
from nodeops.drain import command as drain_command
from nodeops.kube.logging import configure as configure_logging


def _count(text: str) -> int:
    """A number of things: an empty cluster served by mistake helps nobody."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number above 0, got {text}")
    return value


def _sim_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sim = sub.add_parser("sim", help="the simulated cluster")
    sim_sub = sim.add_subparsers(dest="sim_command", required=True)
    serve = sim_sub.add_parser(
        "serve",
        help="serve a simulated Kubernetes cluster on loopback until SIGINT/SIGTERM",
        description="Serve a simulated Kubernetes API server with simulated kubelet, "
        "scheduler, workload controllers and cloud, and write a kubeconfig for it.",
    )
    serve.add_argument("--nodes", type=_count, default=3, help="nodes outside any scenario group")
    serve.add_argument(
        "--pods-per-node", type=_count, default=0, help="pods on each of those nodes"
    )
    serve.add_argument(
        "--node-groups",
        type=_count,
        default=0,
        help="without --scenario: this many cloud node groups of --nodes nodes each",
    )
    serve.add_argument("--scenario", help="a scenario YAML file describing the cluster")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=0, help="0 picks a free port")
    serve.add_argument("--kubeconfig-out", default="sim.kubeconfig", help="where to write it")
    serve.add_argument("--time-scale", type=_positive, default=None, help="simulated s per wall s")
    serve.add_argument("--faults", default=None, help="fault injection spec")
    serve.add_argument("--seed", type=int, default=0)
    serve.add_argument("--auth", action="store_true", help="require bearer tokens")
    serve.add_argument("--rbac", action="store_true", help="enforce RBAC (implies --auth)")
    serve.add_argument(
        "--tls",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="serve HTTPS with a self-signed CA written into the kubeconfig "
        "(default: on with --auth/--rbac, since kubectl sends tokens only over TLS)",
    )
    serve.add_argument(
        "--instant", action="store_true", help="kubelet starts and stops pods at once"
    )
    serve.add_argument("--no-controllers", action="store_true", help="serve the API only")
    serve.add_argument("--kube-version", help="what /version reports, e.g. v1.32.1")
    serve.add_argument(
        "--openstack-pool",
        action="append",
        default=[],
        metavar="NAME:SIZE[:VERSION]",
        help="a Kubernikus-style node pool behind a simulated Keystone + Nova; its first "
        "servers run VERSION, new ones --kube-version (repeatable)",
    )
    from nodeops.sim.attach.command import add_arguments as add_attach_arguments

    add_attach_arguments(sim_sub)


class _JoinCommaLists(argparse.Action):
    """`--controllers a,b --controllers c` means `a,b,c`: each kustomize component of the
    manifests appends its own flag to the Deployment's arguments."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        before = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, f"{before},{values}" if before else str(values))


def _run_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from nodeops.run import add_plugin_arguments, run_flag_help

    run = sub.add_parser(
        "run",
        help="run the operator",
        description="Run the nodeops controllers. Every flag can also be set with an "
        "environment variable NODEOPS_<FLAG> (e.g. NODEOPS_LEADER_ELECT=true).",
    )
    run.add_argument(
        "--kubeconfig",
        help="kubeconfig file (default: in-cluster, then ~/.kube); an exec plugin (aws eks "
        "get-token, gke-gcloud-auth-plugin) runs again as its token expires or is refused",
    )
    run.add_argument("--context", help="kubeconfig context")
    run.add_argument("--namespace", help="namespace of the operator's own objects")
    run.add_argument(
        "--controllers",
        action=_JoinCommaLists,
        help="comma-separated controllers to run; may be repeated",
    )
    run.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="elect a leader through a Lease before running controllers",
    )
    run.add_argument("--leader-election-id", help="name of the Lease")
    run.add_argument("--leader-election-namespace", help="namespace of the Lease")
    run.add_argument("--leader-election-identity", help="this replica's identity")
    run.add_argument(
        "--lease-duration",
        help=run_flag_help("lease_duration", "how long a lease not renewed is kept from others"),
    )
    run.add_argument(
        "--renew-deadline",
        help=run_flag_help("renew_deadline", "how long the leader tries to renew before it stops"),
    )
    run.add_argument(
        "--retry-period", help=run_flag_help("retry_period", "between lease acquire/renew tries")
    )
    run.add_argument(
        "--leader-election-watch",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="while waiting for the Lease, also watch it (on by default; off: poll only)",
    )
    run.add_argument("--metrics-addr", help="metrics listen address, 0 to disable")
    run.add_argument("--health-addr", help="probe listen address, 0 to disable")
    run.add_argument("--log-level", help="debug, info, warning or error")
    run.add_argument("--log-format", help="auto, json or console")
    run.add_argument(
        "--drain-timeout", help=run_flag_help("drain_timeout", "to finish work on stop")
    )
    run.add_argument("--provider", help="the default cloud provider's name (aws, openstack, sim)")
    run.add_argument(
        "--provider-config", help="YAML file with a providers: block of provider settings"
    )
    add_plugin_arguments(run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nodeops", description="Node operations for Kubernetes.")
    parser.add_argument("--version", action="version", version=f"nodeops {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _run_parser(sub)
    drain_command.add_arguments(sub)
    crds = sub.add_parser("crds", help="print the nodeops CustomResourceDefinitions")
    crds.add_argument(
        "--output-dir",
        help="write one <group>_<plural>.yaml per CRD and a kustomization.yaml listing them",
    )
    _sim_parser(sub)
    demo_command.add_arguments(sub)
    cycle_command.add_arguments(sub)
    maintenance_command.add_arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in drain_command.COMMANDS:
        # Commands talk to the user on stdout/stderr; the runtime's logs only when they warn.
        configure_logging("warning", "console")
        return drain_command.main(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in ("demo", "sim"):
        from nodeops.common.extras import MissingExtra, require

        try:
            require("sim")
        except MissingExtra as exc:
            print(f"nodeops {args.command}: {exc}", file=sys.stderr)
            return 2
    if args.command == "crds":
        from nodeops.api import render_crds_yaml, write_all_crd_files

        if args.output_dir:
            for path in write_all_crd_files(args.output_dir):
                print(path)
        else:
            sys.stdout.write(render_crds_yaml())
        return 0
    if args.command == "run":
        from nodeops.run import run_from_args

        return run_from_args(args)
    if args.command == "demo":
        return demo_command.run(args)
    if args.command == "cycle":
        return cycle_command.run(args, _rehearse)
    if args.command == "maintenance":
        configure_logging("warning", "console")
        return maintenance_command.run(args)
    if args.command == "sim" and args.sim_command == "serve":
        from nodeops.sim.serve import serve_from_args

        return serve_from_args(args)
    if args.command == "sim" and args.sim_command in ("attach", "detach"):
        from nodeops.sim.attach import command as attach_command

        if args.sim_command == "attach":
            return attach_command.attach_from_args(args)
        return attach_command.detach_from_args(args)
    parser.error("unknown command")
    return 2


def _rehearse(args: argparse.Namespace) -> int:
    """`cycle --rehearse`: on the simulator, which the cycle command itself may not import."""
    from nodeops.common.extras import MissingExtra, require

    try:
        require("sim")
    except MissingExtra as exc:
        print(f"nodeops cycle --rehearse: {exc}", file=sys.stderr)
        return 2
    from nodeops.rehearse.command import run

    return run(args)


def kubectl_cycle(argv: Sequence[str] | None = None) -> int:
    """`kubectl cycle ...`, `--rehearse` included."""
    return cycle_command.kubectl_main(argv, _rehearse)


if __name__ == "__main__":
    sys.exit(main())
