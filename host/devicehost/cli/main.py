"""The ``devicehost`` command: a thin layer over config, lifecycle and the demo."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devicehost.config.host_config import SETTINGS, HostConfig, load_config
from devicehost.errors import ConfigError

if TYPE_CHECKING:
    from devicehost.drivers.zygote import Plan, Zygote
    from devicehost.host import Host

log = logging.getLogger("devicehost")

SWITCH_INTERVAL_SECONDS = 0.0005

DESCRIPTION = """\
One Kubernetes device-plugin host for every accelerator and NIC vendor. Drivers are
Python packages found through the 'devicehost.drivers' entry point; each resource they
report is served to the kubelet on its own socket (Device Plugin API v1beta1).
Settings come from flags, then DEVICEHOST_* env vars, then the --config file."""

EPILOG = """\
examples:
  devicehost demo                         a simulated node and kubelet, in a few seconds
  devicehost demo --list-nodes            the published machines a demo can simulate
  devicehost run --root /host             the DaemonSet's command
  devicehost run --simulate               serve simulated hardware to a real kubelet
  devicehost drivers                      which drivers are installed and why any is off
  devicehost devices --json               what the drivers see on this node now
  devicehost config --config host.yaml    check a config file; print the effective config
  devicehost mounts --output kustomize    the host paths the pod must mount, as a patch
  devicehost new-driver acme              write a standalone driver project to start from
  devicehost trace my-pod -n team-a       that pod's start from Jaeger, as a waterfall

After `make setup` the command is .venv/bin/devicehost (or `.tools/bin/uv run devicehost`).
"""

# Flags for the settings an operator sets on the command line; the rest are file/env only.
_FLAGS: dict[str, tuple[str, dict[str, Any]]] = {
    "plugin_dir": ("--plugin-dir", {"metavar": "DIR"}),
    "root": ("--root", {"metavar": "DIR"}),
    "pod_resources_socket": ("--pod-resources-socket", {"metavar": "PATH"}),
    "node_name": ("--node-name", {"metavar": "NAME"}),
    "enabled_drivers": ("--drivers", {"metavar": "A,B"}),
    "disabled_drivers": ("--disable-drivers", {"metavar": "A,B"}),
    "scan_interval": ("--scan-interval", {"metavar": "SECONDS"}),
    "hook_timeout": ("--hook-timeout", {"metavar": "SECONDS"}),
    "simulate": ("--simulate", {"action": "store_const", "const": True}),
    "simulate_node": ("--node", {"metavar": "NAME"}),
    "log_format": ("--log-format", {"choices": ["text", "json"]}),
    "log_level": ("--log-level", {"choices": ["debug", "info", "warning", "error"]}),
    "metrics_address": ("--metrics-address", {"metavar": "HOST:PORT"}),
    "otlp_endpoint": ("--otlp-endpoint", {"metavar": "URL"}),
    "kubeconfig": ("--kubeconfig", {"metavar": "PATH"}),
}

# Which settings each command reads: a flag a command would ignore is not offered to it
# (``demo`` makes its own plugin directory, so ``demo --plugin-dir`` is an error).
_SELECTION = ("enabled_drivers", "disabled_drivers")
_LOGS = ("log_format", "log_level")
_COMMAND_FLAGS: dict[str, tuple[str, ...]] = {
    "run": tuple(_FLAGS),
    "config": tuple(_FLAGS),
    # The host's own paths and the drivers' declarations (asked without configure).
    "mounts": ("plugin_dir", "pod_resources_socket", *_SELECTION, "hook_timeout", *_LOGS),
    # ``drivers`` reads a running daemon's state: its plugin directory and status address.
    "drivers": (
        "root",
        "plugin_dir",
        "metrics_address",
        *_SELECTION,
        "hook_timeout",
        "simulate",
        "simulate_node",
        *_LOGS,
    ),
    "devices": ("root", *_SELECTION, "hook_timeout", "simulate", "simulate_node", *_LOGS),
    "demo": (*_SELECTION, "hook_timeout", "simulate_node", "node_name", "otlp_endpoint", *_LOGS),
}


def _default_text(value: Any) -> str:
    if value is None or value == "" or value == ():
        return "unset"
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _flag_helps() -> dict[str, str]:
    """Each flag's help, with its env var and default (one HostConfig for all)."""
    defaults, helps = HostConfig(), {}
    settings = {s.attr: s for s in SETTINGS}
    for attr in _FLAGS:
        text, env = settings[attr].help, settings[attr].env
        where = f"env {env}, " if env else ""
        default = "" if "default" in text else f"default: {_default_text(getattr(defaults, attr))}"
        helps[attr] = f"{text} ({where}{default})".replace(", )", ")")
    return helps


def _add_config_flags(
    parser: argparse.ArgumentParser,
    attrs: Sequence[str],
    helps: dict[str, str],
    top_level: bool = False,
) -> None:
    """The configuration flags of one command: those in ``attrs`` shown in its help, the
    others accepted but hidden, so ``main`` can say "'demo' does not take --plugin-dir"
    instead of argparse's bare "unrecognized arguments". Defaults are SUPPRESSed so a flag
    given before the command (``devicehost --simulate drivers``) is not overwritten by the
    command's own default. Added to each parser itself: parent parsers cost every start
    ~5 ms of argparse (one more parser and a copy of every flag per command)."""
    group = parser.add_argument_group("configuration (flags > DEVICEHOST_* env > file)")
    group.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS if top_level else "HostConfig YAML file (env DEVICEHOST_CONFIG)",
    )
    for attr, (flag, extra) in _FLAGS.items():
        group.add_argument(
            flag,
            dest=attr,
            default=argparse.SUPPRESS,
            help=helps[attr] if attr in attrs and not top_level else argparse.SUPPRESS,
            **extra,
        )


def build_parser() -> argparse.ArgumentParser:
    helps = _flag_helps()
    parser = argparse.ArgumentParser(
        prog="devicehost",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_config_flags(parser, tuple(_FLAGS), helps, top_level=True)
    parser.add_argument("--version", action=_Version, help="show the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        _add_config_flags(sub, _COMMAND_FLAGS[name], helps)
        return sub

    command("run", "serve every driver's resources to the kubelet until SIGTERM (the daemon)")
    drivers = command(
        "drivers",
        "list installed drivers: distribution, version, status, reason; exit 1 when one "
        "could not be started (failed, restarting, crash-looping), 0 otherwise",
    )
    drivers.add_argument("--json", action="store_true", help="print JSON")
    devices = command(
        "devices", "enumerate once and print each resource's devices, health and NUMA nodes"
    )
    devices.add_argument("--json", action="store_true", help="print JSON")
    config = command("config", "validate the configuration and print the effective HostConfig")
    config.add_argument(
        "--node-facts",
        type=Path,
        metavar="FILE",
        help="node name and labels (YAML; or a Node from kubectl get node -o yaml): "
        "print the config with the profile that node gets",
    )
    mounts = command(
        "mounts",
        "list the host paths the pod must mount: every driver's declared paths and the host's own",
    )
    mounts.add_argument(
        "--output",
        choices=["table", "json", "kustomize"],
        default="table",
        help="table for people, json for generators, kustomize for a strategic-merge patch",
    )
    mounts.add_argument(
        "--drivers-only",
        action="store_true",
        help="leave out the host's own paths (for a vendor component's patch)",
    )
    demo = command(
        "demo", "run a simulated node against a built-in kubelet stand-in and narrate it"
    )
    demo.add_argument(
        "--keep-running", action="store_true", help="keep serving after the tour (Ctrl-C to stop)"
    )
    demo.add_argument(
        "--list-nodes", action="store_true", help="list the machines --node can simulate, and exit"
    )
    new = commands.add_parser(
        "new-driver",
        help="write a standalone driver project (package, simulation, tests, README)",
        description="Write a standalone driver distribution that installs with pip, passes "
        "its own tests and serves in `devicehost demo` as written.",
    )
    _add_config_flags(new, (), helps, top_level=True)
    new.add_argument("name", help="the driver's entry-point name, e.g. acme (lower case)")
    new.add_argument(
        "--dest", type=Path, metavar="DIR", help="where to write it (default: ./devicehost-NAME)"
    )
    new.add_argument(
        "--resource", metavar="DOMAIN/NAME", help="resource name (default: NAME.example.com/widget)"
    )
    from devicehost.cli import trace

    _add_config_flags(trace.add_parser(commands), (), helps, top_level=True)
    return parser


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[command]
            return found
    return parser


class _Version(argparse.Action):
    """``--version``: the installed version is read only when asked, as reading package
    metadata would cost every start (and the zygote forked from this process) its import."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.update(nargs=0, default=argparse.SUPPRESS)
        super().__init__(option_strings, argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        from devicehost import __version__

        print(f"devicehost {__version__}")
        parser.exit()


def _misplaced_flags(args: argparse.Namespace) -> list[str]:
    """Flags given (before or after the command) that the command does not read."""
    allowed = set(_COMMAND_FLAGS.get(args.command, ()))
    given = [attr for attr in _FLAGS if hasattr(args, attr) and attr not in allowed]
    if hasattr(args, "config") and args.command not in _COMMAND_FLAGS:
        given.insert(0, "config")
    return ["--config" if a == "config" else _FLAGS[a][0] for a in given]


def _load(args: argparse.Namespace) -> HostConfig:
    flags = {attr: getattr(args, attr, None) for attr in _FLAGS}
    names = {attr: flag for attr, (flag, _) in _FLAGS.items()}
    return load_config(getattr(args, "config", None), flags=flags, flag_names=names)


def _sourced(exc: ConfigError, config: HostConfig) -> ConfigError:
    """An error about an effective setting (source ``config``, found after loading: a
    driver name no installed driver has) with the source that set it: ``flag --drivers``,
    ``env DEVICEHOST_DRIVERS`` or the file."""
    if exc.source != "config" or not exc.key:
        return exc
    return ConfigError(config.source_of(exc.key), exc.key, exc.problem)


async def _drivers(config: HostConfig, as_json: bool) -> int:
    """The running daemon's live state when one serves the plugin directory (read from its
    status server's ``/drivers``); else a probe: the drivers started here and stopped."""
    from devicehost.cli.live import daemon_drivers

    rows = daemon_drivers(config)
    if rows is None:
        host = _host(config)
        try:
            await host.prepare(scan=False)
            # Read before the stop: a hook still hung then is shown as hung.
            rows = [{**row, "source": "probe"} for row in host.driver_states()]
        finally:
            await host.stop()
    if as_json:
        print(json.dumps(rows, indent=2))
        return _not_started(rows)
    if rows and rows[0].get("source") == "daemon":
        print(f"live state of the devicehost serving {config.plugin_dir}:")
    if not rows:
        print("no drivers installed (entry-point group devicehost.drivers is empty)")
    for row in rows:
        print(
            f"{row['name']:<12} {row['status']:<12} {row['distribution']} {row['version']}"
            f"{' (' + row['kind'] + ')' if row['kind'] != 'driver' else ''}"
        )
        for line in (
            ([f"reason: {row['reason']}"] if row["reason"] else [])
            + [f"note: {n}" for n in row["notes"]]
            + ([f"restarts: {row['restarts']}"] if row.get("restarts") else [])
            + [f"hung: {hook} (running past its timeout)" for hook in row.get("hung", ())]
            + [f"node file: {e}" for e in row.get("nodeFileErrors", ())]
        ):
            print(f"{'':<12} {line}")
        dra: dict[str, Any] = row["dra"] if isinstance(row.get("dra"), dict) else {}
        through_dra = set(dra.get("resources", ())) | set(dra.get("refused", {}))
        plugins = [r for r in row["resources"] if r not in through_dra]
        if plugins:
            print(f"{'':<12} resources: {', '.join(plugins)}")
        if dra.get("resources"):
            state = "registered" if dra.get("registered") else "not registered yet"
            print(f"{'':<12} DRA driver {dra.get('name')} ({state}): {', '.join(dra['resources'])}")
        for resource, why in dra.get("refused", {}).items():
            print(f"{'':<12} not served through DRA: {resource}: {why}")
    return _not_started(rows)


def _not_started(rows: list[dict[str, Any]]) -> int:
    """1, with a line on stderr naming them, when a driver could not be started (failed,
    restarting, crash-looping; not one with no hardware here or turned off): an image
    build that ends with ``devicehost drivers`` then fails; else 0."""
    from devicehost.drivers.discovery import DriverStatus

    down = {DriverStatus.FAILED, DriverStatus.RESTARTING, DriverStatus.CRASH_LOOPING}
    names = [row["name"] for row in rows if row.get("status") in down]
    if not names:
        return 0
    print(
        f"devicehost drivers: {len(names)} driver{'s' if len(names) > 1 else ''} could not "
        f"be started: {', '.join(names)} (see the reason under each)",
        file=sys.stderr,
    )
    return 1


async def _devices(config: HostConfig, as_json: bool) -> int:
    host = _host(config)
    try:
        await host.prepare()
    finally:
        await host.stop()
    assert host.plugins is not None
    result: dict[str, dict[str, Any]] = {
        name: {
            "driver": res.driver.name,
            "devices": [
                {"id": d.id, "health": str(d.health), "numa": list(d.numa_nodes)}
                for d in res.state.devices.values()
            ],
        }
        for name, res in host.resources.items()
    }
    notes = {i.name: i.notes for i in host.plugins.infos if i.notes}
    if as_json:
        print(json.dumps({"resources": result, "notes": notes}, indent=2))
        return 0
    if not result:
        print("no resources on this node")
    for name, entry in result.items():
        print(f"{name} (driver {entry['driver']}): {len(entry['devices'])} devices")
        for d in entry["devices"]:
            numa = ",".join(map(str, d["numa"])) or "-"
            print(f"  {d['id']:<40} {d['health']:<10} numa {numa}")
    for driver, lines in notes.items():
        for note in lines:
            print(f"note ({driver}): {note}")
    return 0


async def _check_driver_sections(config: HostConfig) -> None:
    """Let each installed driver validate its own section (its configure raises ValueError),
    and check that every resource's socket path fits the unix limit."""
    from devicehost.drivers.discovery import DriverStatus
    from devicehost.drivers.running import CONFIG_REFUSED

    def not_refusals(record: logging.LogRecord) -> bool:
        """The host's log line for a refused section: said below, as this command's error."""
        return not all(getattr(record, k, None) == v for k, v in CONFIG_REFUSED.items())

    host = _host(config)
    lifecycle_log = logging.getLogger("devicehost.drivers.running")
    lifecycle_log.addFilter(not_refusals)
    try:
        await host.prepare(scan=False)
    finally:
        await host.stop()
        lifecycle_log.removeFilter(not_refusals)
    assert host.plugins is not None
    for info in host.plugins.infos:
        if info.status is DriverStatus.FAILED and info.reason.startswith("config drivers."):
            key, _, problem = info.reason.removeprefix("config ").partition(": ")
            raise ConfigError("config", key, problem)
        for note in info.notes:
            if note.startswith("resource refused: ") and "socket path" in note:
                raise ConfigError("config", "pluginDir", note.removeprefix("resource refused: "))


def _host(config: HostConfig) -> Host:
    from devicehost.host import Host  # imported late: grpc reads its env at import

    return Host(config)


def main(argv: Sequence[str] | None = None) -> int:
    # SIGHUP is ignored by the daemon, as documented, from its first moment: noted here
    # and logged once its loop runs (``_serve``); any other command takes it as usual.
    previous = _take_signal(signal.SIGHUP)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command != "run" and previous is not None:
        signal.signal(signal.SIGHUP, previous)
        if signal.SIGHUP in _SIGNALS_BEFORE_LOOP:
            _SIGNALS_BEFORE_LOOP.remove(signal.SIGHUP)
            signal.raise_signal(signal.SIGHUP)
    misplaced = _misplaced_flags(args)
    if misplaced:
        _subparser(parser, args.command).error(
            f"'{args.command}' does not take {', '.join(misplaced)}"
        )
    try:
        code = _command(args)
        sys.stdout.flush()  # here, where a closed pipe can still be handled
        return code
    except BrokenPipeError:
        # `devicehost devices | head`: the reader left; say nothing more, like other tools.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        return 130


def _command(args: argparse.Namespace) -> int:
    if args.command == "new-driver":
        from devicehost.cli.scaffold import ScaffoldError, write_driver

        try:
            dest = write_driver(args.name, args.dest, resource=args.resource)
        except ScaffoldError as exc:
            print(f"devicehost new-driver: {exc}", file=sys.stderr)
            return 2
        from devicehost.cli.scaffold import next_steps

        print(f"wrote {dest}; next, install it beside this devicehost and run its tests:")
        for step in next_steps(dest):
            print(f"  {step}")
        return 0
    if args.command == "trace":
        from devicehost.cli.trace import run

        return run(args)
    if args.command == "demo" and args.list_nodes:
        from devicehost.cli.demo import list_nodes

        list_nodes()
        return 0
    try:
        config = _load(args)
        if config.simulate_node:  # a typo would build an empty node and serve it as meant
            from devicehost.simulation.machines import check_node

            check_node(config.simulate_node, _node_source(args))
    except ConfigError as exc:
        print(f"devicehost: config error: {exc}", file=sys.stderr)
        return 2
    if args.command != "run":  # run sets up its logging after forking the zygote
        # Only the daemon logs at info by default; one-shot commands keep their output clean.
        quiet = getattr(args, "log_level", None) is None
        _setup_logging(config, "warning" if quiet else config.log_level)
    try:
        if args.command == "run":
            return _run(config)
        import asyncio  # after run's fork of the zygote: ``_run``

        if args.command == "config":
            import yaml

            from devicehost.config.for_node import with_profile
            from devicehost.config.profiles import facts_file

            if args.node_facts:
                config, profile = with_profile(config, facts_file(args.node_facts))
                print(f"# profile: {profile.name if profile else '(none: base settings)'}")
            asyncio.run(_check_driver_sections(config))
            print(yaml.safe_dump(config.to_document(redact=True), sort_keys=False), end="")
            return 0
        if args.command == "mounts":
            from devicehost.node.mounts import mounts_command

            return asyncio.run(mounts_command(config, args.output, args.drivers_only))
        if args.command == "drivers":
            return asyncio.run(_drivers(config, args.json))
        if args.command == "devices":
            return asyncio.run(_devices(config, args.json))
        if args.command == "demo":
            from devicehost.cli.demo import run_demo

            return run_demo(config, keep_running=args.keep_running)
        raise AssertionError(f"unhandled command {args.command!r}")  # pragma: no cover
    except ConfigError as exc:
        print(f"devicehost: config error: {_sourced(exc, config)}", file=sys.stderr)
        return 2


def _node_source(args: argparse.Namespace) -> str:
    """Where ``simulateNode`` came from, for its error: the flag, the env var or the file."""
    if getattr(args, "simulate_node", None):
        return "flag --node"
    if os.environ.get("DEVICEHOST_SIMULATE_NODE"):
        return "env DEVICEHOST_SIMULATE_NODE"
    return str(getattr(args, "config", None) or os.environ.get("DEVICEHOST_CONFIG") or "config")


def _setup_logging(config: HostConfig, level: str) -> None:
    from devicehost.telemetry.logs import setup_logging  # OpenTelemetry: after the fork

    setup_logging(config.log_format, level)


def _run(config: HostConfig) -> int:
    """``devicehost run``: check the plugin directory first, so a wrong path or missing
    privilege is one clear line instead of a traceback or a retry loop.

    The zygote that forks the drivers' workers is forked from this process first, while
    it has imported little and started no thread (``drivers/zygote.py``)."""
    from devicehost.kubelet.deviceplugin.plugin_dir import plugin_dir_problem

    problem = plugin_dir_problem(config.plugin_dir)
    if problem:
        print(f"devicehost: {problem}", file=sys.stderr)
        return 1
    # Every file the daemon creates is private from birth: sockets are 0600 before the
    # chmod that makes sure of it (CDI specs are made readable explicitly).
    os.umask(0o077)
    # Until the loop takes signals over (``_serve``), a SIGTERM is noted and honoured as
    # soon as the loop runs: the host stops as it would later (exit 0, the simulated tree
    # removed), instead of dying by the default action halfway through its imports.
    signal.signal(signal.SIGTERM, _note_signal)
    signal.signal(signal.SIGINT, _note_signal)  # Ctrl-C stops it as SIGTERM does: exit 0
    import functools

    from devicehost.drivers.zygote import Zygote
    from devicehost.simulation.trees import make_sim_root

    # A profile may choose other drivers once the node's labels are known: no early start.
    early = not config.profiles
    sim_root = make_sim_root(config.simulate_dir) if early and config.simulate else None
    try:
        try:
            prestart = functools.partial(_plan_workers, config, sim_root) if early else None
            zygote = Zygote.fork(prestart)
        except OSError:  # no process to spare now: the first worker start spawns a fresh one
            zygote = Zygote()
        from devicehost.system.subprocesses import become_subreaper

        # The subreaper of its helpers' trees (as PID 1 of its container it is anyway):
        # what a killed zygote's keepers leave is re-parented here and stopped
        # (``_reap_strays``). After the fork: only the zygote's death re-parents anything.
        become_subreaper()
        _setup_logging(config, config.log_level)
        # The span exporter and driver threads share the GIL with the request loop; a short
        # switch interval bounds how long a kubelet request can wait for it (default 5 ms).
        sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
        import asyncio

        asyncio.run(_serve(config, zygote, sim_root))
    finally:
        if sim_root is not None:  # the host removes it when it stops; not if it never ran
            from devicehost.simulation.trees import remove_sim_root

            remove_sim_root(sim_root)
        from devicehost.system.reaping import stop_strays
        from devicehost.system.subprocesses import HELPERS

        stop_strays(HELPERS)  # nothing the drivers started outlives the host
    return 0


#: SIGTERM, SIGINT and SIGHUP that arrived before the loop took signals over
_SIGNALS_BEFORE_LOOP: list[int] = []


def _note_signal(signum: int, frame: object) -> None:
    _SIGNALS_BEFORE_LOOP.append(signum)


def _take_signal(signum: int) -> signal._HANDLER | None:
    """Note ``signum`` from now on (``_note_signal``); the handler it had, or None where
    this is not the main thread (``main`` called from a test's thread)."""
    try:
        return signal.signal(signum, _note_signal)
    except ValueError:
        return None


async def _reap_strays() -> None:
    """Reap, and stop first if it still runs, every process re-parented to the host: as
    PID 1 of its container every orphan there is its child, and as the subreaper of its
    helpers' trees so is whatever a killed zygote's workers left. A child that ends or is
    re-parented by a death always comes with a SIGCHLD (the dead helper's own), so the
    host looks then and never polls."""
    import asyncio

    from devicehost.system.reaping import stop_strays
    from devicehost.system.subprocesses import HELPERS

    loop = asyncio.get_running_loop()
    wake = asyncio.Event()
    loop.add_signal_handler(signal.SIGCHLD, wake.set)
    while True:
        await wake.wait()
        wake.clear()
        try:
            for stray in stop_strays(HELPERS):
                if stray.zombie:
                    log.debug("reaped process %d (%s)", stray.pid, stray.name)
                else:
                    log.warning(
                        "stopped process %d (%s): re-parented to the host, left behind by "
                        "a driver whose worker or zygote died",
                        stray.pid,
                        stray.name,
                    )
        except Exception:  # never ends: a host that stops reaping fills the pid table
            log.exception("reaping re-parented processes failed; trying again at the next")


def _plan_workers(config: HostConfig, sim_root: Path | None) -> Plan:
    """Run in the zygote, after the fork: the host does not import the plan (entry-point
    metadata) before it has forked."""
    from devicehost.drivers.plan import plan_workers

    return plan_workers(config, sim_root)


async def _serve(config: HostConfig, zygote: Zygote, sim_root: Path | None) -> None:
    """Import the host while the zygote lists the drivers and their workers import them
    (the two costs overlap instead of adding up at every start), then take the workers
    over: their first calls have been running meanwhile."""
    import asyncio

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_signal_handler(signal.SIGHUP, _sighup_ignored)
    reaper = asyncio.create_task(_reap_strays(), name="reap-strays")
    if signal.SIGTERM in _SIGNALS_BEFORE_LOOP or signal.SIGINT in _SIGNALS_BEFORE_LOOP:
        stop.set()
    if signal.SIGHUP in _SIGNALS_BEFORE_LOOP:
        _sighup_ignored()
    from devicehost.drivers.early import start_workers
    from devicehost.host import serve

    try:
        early = None if config.profiles else await start_workers(config, zygote, sim_root)
        await serve(config, stop=stop, early=early, zygote=zygote)
    finally:
        reaper.cancel()


def _sighup_ignored() -> None:
    log.warning("SIGHUP ignored: devicehost does not reload its config; restart it to apply one")


if __name__ == "__main__":
    sys.exit(main())
