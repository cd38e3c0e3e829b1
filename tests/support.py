"""Helpers shared by the host's tests (a module of its own: several test directories have a
conftest.py, so tests never import from ``conftest``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from devicehost.drivers.protocol import to_plain
from devicehost.model import Device
from devicehost.testing import write_distribution
from testdrivers.scripted import control_dir, write_json

SCRIPTED = "testdrivers.scripted:Scripted"

# A budget for what a test checks happens, not how fast: the host's own short budgets (1 s
# to flush spans, 2 s to stop) are goals measured by `make bench`; a test that inherited them
# failed whenever the machine was busy. No loaded machine takes this long for any of them.
UNHURRIED_SECONDS = 60.0


def python_probe(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with this one's import path: what a process
    imports can only be seen from a process that has imported nothing yet."""
    from devicehost.system.subprocesses import host_environment

    return subprocess.run(
        [sys.executable, "-c", code], env=host_environment(), capture_output=True, text=True
    )


def modules_after(code: str) -> tuple[set[str], subprocess.CompletedProcess[str]]:
    """The modules a fresh interpreter holds after running ``code`` (``python_probe``),
    and the run itself (its other output, its log lines)."""
    run = python_probe(code + "\nimport json, sys; print(json.dumps(sorted(sys.modules)))")
    assert run.returncode == 0, run.stderr
    return set(json.loads(run.stdout.splitlines()[-1])), run


def eventually(predicate: Callable[[], object], timeout: float = 10.0) -> None:
    """Wait until ``predicate()`` is true (for state that settles just after an event)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout} s")
        time.sleep(0.01)


def run_scripted(
    tmp_path: Path,
    plugin_dir: Path,
    resource: str,
    devices: int,
    stderr: int | IO[Any] = subprocess.PIPE,
    extra_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """`devicehost run` in its own process, serving the scripted driver 'alpha' with
    ``devices`` devices of ``resource`` (metrics and pod lookups off), with ``extra_args``
    and ``env`` added."""
    site = tmp_path / "site"
    if not site.exists():
        write_distribution(site, "devicehost-alpha", {"devicehost.drivers": {"alpha": SCRIPTED}})
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: devicehost/v1\nkind: HostConfig\n"
        f"drivers:\n  alpha:\n    resources: {{'{resource}': {devices}}}\n"
    )
    path = os.pathsep.join([str(site), os.path.dirname(__file__)])
    env = {**os.environ, **(env or {}), "PYTHONPATH": path}
    command = [
        sys.executable,
        "-m",
        "devicehost.cli",
        "run",
        "--config",
        str(config),
        "--plugin-dir",
        str(plugin_dir),
        "--drivers",
        "alpha",
        "--metrics-address",
        "",
        "--pod-resources-socket",
        "",
        "--root",
        str(root),
        *extra_args,
    ]
    return subprocess.Popen(command, env=env, stderr=stderr)


class ScriptedControl:
    """The test's side of a scripted driver: its "hardware" and misbehaviour, as files.

    The driver runs in its own worker process; this writes what its next enumerate reads
    (its watch notices at once) and reads the calls it recorded.
    """

    def __init__(self, root: Path, driver: str) -> None:
        self.dir = control_dir(root, driver)

    def _devices(self) -> dict[str, list[Any]]:
        import json

        return dict(json.loads((self.dir / "devices.json").read_text()))

    def set_devices(self, resource: str, devices: list[Device] | list[Any]) -> None:
        table = self._devices()
        table[resource] = [to_plain(d) for d in devices]
        write_json(self.dir / "devices.json", table)

    def set_health(self, resource: str, device_id: str, healthy: bool) -> None:
        table = self._devices()
        for device in table[resource]:
            if device["id"] == device_id:
                device["health"] = "Healthy" if healthy else "Unhealthy"
        write_json(self.dir / "devices.json", table)

    def health(self, resource: str) -> dict[str, str]:
        return {d["id"]: d["health"] for d in self._devices()[resource]}

    def changed(self, resource: str) -> None:
        """Touch the hardware: the watch notifies and the host enumerates again."""
        write_json(self.dir / "devices.json", self._devices())

    def misbehave(
        self, *, raising: Sequence[str] = (), hanging: Sequence[str] = (), **answers: Any
    ) -> None:
        """From now on, these hooks raise or hang (until ``release()``); ``answers`` are
        what some test drivers answer instead (``preference=7``)."""
        control = {"raise": list(raising), "hang": list(hanging), **answers}
        write_json(self.dir / "control.json", control)

    def answer(self, plain: Any) -> None:
        """What an ``Echo`` driver's allocate returns from now on (plain data)."""
        write_json(self.dir / "answer.json", plain)

    def release(self) -> None:
        """Hung hooks return (the vendor library answers again)."""
        write_json(self.dir / "control.json", {"released": True})

    @property
    def calls(self) -> list[tuple[str, dict[str, Any]]]:
        import json

        try:
            lines = (self.dir / "calls.jsonl").read_text().splitlines()
        except FileNotFoundError:
            return []
        return [(hook, kwargs) for hook, kwargs in map(json.loads, lines)]


def scripted(host: Any, resource: str) -> ScriptedControl:
    """The control of the scripted driver serving ``resource`` in a running ``HostThread``."""
    name = host.host.resources[resource].driver.name
    root = host.host.simulated_root(name) or host.config.root
    return ScriptedControl(root, name)


def terminate(process: subprocess.Popen[Any], timeout: float = 30) -> None:
    """Stop a ``devicehost run`` as the kubelet's container runtime does (SIGTERM) and check
    it exits 0 within ``timeout`` seconds."""
    process.send_signal(signal.SIGTERM)
    code = process.wait(timeout=timeout)
    assert code == 0, f"devicehost run exited {code} on SIGTERM"


def reap(process: subprocess.Popen[Any]) -> None:
    """Kill and wait for ``process`` if it still runs: a test's ``finally``, so a failure
    never leaves a host behind."""
    if process.poll() is None:
        process.kill()
        process.wait()


# -- the stop check ---------------------------------------------------------------------------

#: How long a stop may take: SIGTERM must end devicehost within 2 s, whatever its drivers do.
STOP_BUDGET_SECONDS = 2.0


def descendants(pid: int) -> dict[int, str]:
    """Every live process below ``pid`` (from /proc): pid → its name (``comm``)."""
    parents: dict[int, list[tuple[int, str]]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat.rsplit(")", 1)[1].split()
        if rest[0] != "Z":  # a zombie is gone; only its parent's wait is left
            parents.setdefault(int(rest[1]), []).append((int(entry.name), name))
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        for child, name in parents.get(todo.pop(), []):
            found[child] = name
            todo.append(child)
    return found


def stop_and_check(hosts: list[Any]) -> None:
    """The stop check every fault test ends with: each host (a ``HostThread``) stops within
    ``STOP_BUDGET_SECONDS``, leaving no socket of its own in the plugin directory, no CDI
    spec it wrote, and none of the helper processes (``dh-*``) it started."""
    helpers = {p: n for p, n in descendants(os.getpid()).items() if n.startswith("dh-")}
    started = time.monotonic()
    for host in hosts:
        host.stop()
    took = time.monotonic() - started
    assert took < STOP_BUDGET_SECONDS, f"stopping took {took:.2f} s"
    for host in hosts:
        config = host.config
        left = sorted(p.name for p in config.plugin_dir.glob("devicehost-*.sock"))
        assert not left, f"sockets left in {config.plugin_dir}: {left}"
        if config.cdi_enabled and config.cdi_dir.is_dir():
            specs = sorted(p.name for p in config.cdi_dir.glob("k8s.devicehost.io-*"))
            assert not specs, f"CDI specs left in {config.cdi_dir}: {specs}"

    def alive() -> dict[int, str]:
        now = descendants(os.getpid())
        return {p: n for p, n in helpers.items() if now.get(p) == n}

    deadline = started + STOP_BUDGET_SECONDS
    while alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(), f"helper processes left after the stop: {alive()}"
