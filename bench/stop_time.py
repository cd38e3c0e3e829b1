"""SIGTERM to exit: the 2 s the host promises to stop in, measured rather than asserted.

Tests check that a stop happens and what it leaves behind; how fast it happens depends on
the machine, so it is a figure here, beside the minimal plugin's in the same run.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness import (
    REPO,
    VENDOR_DRIVERS,
    Workspace,
    devicehost_command,
    minimal_command,
    summary,
    verdict,
    wait_resources,
)
from devicehost.testing import KubeletStandIn

SIMULATED = ("--simulate", "--drivers", ",".join(VENDOR_DRIVERS))


def _stop_once(
    ws: Workspace, command_for: Callable[[Path], list[str]], name: str, early: bool
) -> float:
    """Milliseconds from SIGTERM to the process's exit, sent once every resource has
    registered, or (``early``) as soon as the simulated tree appears: the host is then
    still importing, before its loop handles signals. (Sooner than that the interpreter
    has run none of the host's code, and no Python program can handle a signal.)"""
    plugin_dir = ws.plugin_dir(name)
    command = command_for(plugin_dir)
    with KubeletStandIn(plugin_dir, start=True) as kubelet:
        process = subprocess.Popen(
            command, env=ws.env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            if early:
                _wait_for(lambda: any(ws.tmp.iterdir()) or process.poll() is not None)
            else:
                wait_resources(kubelet)
            sent = time.perf_counter()
            process.send_signal(signal.SIGTERM)
            code = process.wait(60)
            elapsed = (time.perf_counter() - sent) * 1000
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    # The minimal plugin may die by the signal's default action before its handler is set;
    # devicehost must exit 0 whenever the signal comes.
    if code not in (0, -signal.SIGTERM) or (code != 0 and "devicehost.cli" in command):
        raise RuntimeError(f"{command[:4]} exited {code} on SIGTERM")
    return round(elapsed, 1)


def _wait_for(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not seen within {timeout} s")
        time.sleep(0.001)


def stop_time(ws: Workspace, runs: int) -> dict[str, Any]:
    """SIGTERM to exit, serving and during start-up, devicehost beside the minimal plugin."""
    commands: dict[str, Callable[[Path], list[str]]] = {
        "minimal_plugin": minimal_command,
        "devicehost": lambda d: devicehost_command(d, *SIMULATED),
    }
    samples: dict[str, list[float]] = {}
    for index in range(runs):
        for name, command in commands.items():
            for moment in ("serving", "starting") if name == "devicehost" else ("serving",):
                key = f"{name}_{moment}"
                samples.setdefault(key, []).append(
                    _stop_once(ws, command, f"stop-{key}-{index}", moment == "starting")
                )
    results = {key: summary(values) for key, values in samples.items()}
    return {
        "what": "SIGTERM to the process's exit (status 0), sent once every resource has "
        "registered, and (devicehost only) as soon as its simulated tree appears, while it "
        "still imports; devicehost with "
        f"{', '.join(VENDOR_DRIVERS)} simulated; {runs} runs each",
        "goal": "devicehost exits within 2 s of SIGTERM whenever it comes (p99, here the "
        "slowest run)",
        "results": results,
        "goals": {
            "devicehost_serving_p99_ms": verdict(results["devicehost_serving"]["p99_ms"], 2000.0),
            "devicehost_starting_p99_ms": verdict(results["devicehost_starting"]["p99_ms"], 2000.0),
        },
    }
