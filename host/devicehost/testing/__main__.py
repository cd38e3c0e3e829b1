"""``python -m devicehost.testing``: the kit's two checks from a shell, outside pytest.

- ``check NAME``: the conformance battery (``check_driver``) on the installed driver.
- ``serve NAME``: serve it to the kubelet stand-in and print its registration, devices and
  an Allocate answer (``serve_driver``); ``--keep-running`` keeps serving.

Both build the driver's simulated hardware unless ``--root`` names a tree to read.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml


def _section(text: str | None) -> dict[str, Any]:
    """``--driver-config``: the driver's section as YAML (``'{simulatedCount: 2}'``)."""
    if not text:
        return {}
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SystemExit(f"--driver-config: not valid YAML: {exc}") from None
    if not isinstance(value, dict):
        raise SystemExit(f"--driver-config: expected a mapping, got {value!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m devicehost.testing",
        description="Check an installed driver, or serve it to a kubelet stand-in, outside pytest.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    check = commands.add_parser("check", help="run the conformance battery (check_driver)")
    serve = commands.add_parser(
        "serve", help="serve it to a kubelet stand-in: registration, devices, an Allocate"
    )
    for sub in (check, serve):
        sub.add_argument("name", help="the driver's entry-point name")
        sub.add_argument(
            "--node", default="", metavar="NAME", help="the simulated machine to build"
        )
        sub.add_argument(
            "--root",
            type=Path,
            metavar="DIR",
            help="read this tree instead of simulating (e.g. / on a node with the hardware)",
        )
        sub.add_argument(
            "--driver-config", metavar="YAML", help="the driver's config section, as YAML"
        )
        sub.add_argument(
            "--timeout", type=float, default=30.0, metavar="SECONDS", help="per wait or hook"
        )
    serve.add_argument(
        "--allocate", metavar="ID,ID", help="the devices to allocate (default: the first healthy)"
    )
    serve.add_argument(
        "--keep-running",
        action="store_true",
        help="keep serving after the answer, printing each new device list (Ctrl-C to stop)",
    )
    return parser


def _check(args: argparse.Namespace) -> int:
    from devicehost.testing.conformance import ConformanceError, check_driver

    simulated = args.root is None
    with tempfile.TemporaryDirectory(prefix="dh-check-") as scratch:
        root = args.root or Path(scratch) / "root"
        try:
            report = check_driver(
                args.name,
                root,
                config=_section(args.driver_config),
                simulated=simulated,
                node=args.node,
                timeout=args.timeout,
            )
        except ConformanceError as exc:
            print(_nothing_to_check(args, exc) if exc.unavailable else exc)
            return 1
    print(f"driver {report.driver}: every conformance check passed")
    for resource, count in report.devices.items():
        print(f"  {resource}: {count} devices, {report.healthy.get(resource, 0)} healthy")
    hook, seconds = report.slowest_hook
    print(f"  slowest hook: {hook} ({seconds * 1000:.0f} ms)")
    return 0


def _nothing_to_check(args: argparse.Namespace, exc: Any) -> str:
    """The driver found none of its hardware: say where it looked and what to type instead."""
    where = (
        f"under {args.root}"
        if args.root is not None
        else f"on the simulated machine {args.node!r}"
        if args.node
        else "on its default simulated machine"
    )
    return (
        f"driver {exc.driver!r} has nothing to check {where}: {exc.unavailable}\n"
        f"  simulate a machine that has its hardware: python -m devicehost.testing check "
        f"{args.name} --node NAME (devicehost demo --list-nodes lists them)\n"
        f"  or read a node's own tree, on a node with the hardware: --root /"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "check":
        return _check(args)
    from devicehost.testing.serve import serve_driver

    return serve_driver(
        args.name,
        config=_section(args.driver_config),
        simulated=args.root is None,
        node=args.node,
        root=args.root,
        allocate=args.allocate.split(",") if args.allocate else None,
        keep_running=args.keep_running,
        timeout=args.timeout,
    )


if __name__ == "__main__":
    sys.exit(main())
