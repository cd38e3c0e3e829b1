"""Helpers shared by the host's tests (a module of its own: several test directories have a
conftest.py, so tests never import from ``conftest``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from devicehost.testing import write_distribution

SCRIPTED = "testdrivers.scripted:Scripted"


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
) -> subprocess.Popen[bytes]:
    """`devicehost run` in its own process, serving the scripted driver 'alpha' with
    ``devices`` devices of ``resource`` (metrics and pod lookups off)."""
    site = tmp_path / "site"
    if not site.exists():
        write_distribution(site, "devicehost-alpha", {"devicehost.drivers": {"alpha": SCRIPTED}})
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: devicehost/v1\nkind: HostConfig\n"
        f"drivers:\n  alpha:\n    resources: {{'{resource}': {devices}}}\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.path.dirname(__file__)])}
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
    ]
    return subprocess.Popen(command, env=env, stderr=stderr)
