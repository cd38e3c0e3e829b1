"""The `devicehost` command as an operator runs it (each test runs the real CLI process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from devicehost.testing import write_distribution
from support import SCRIPTED


def devicehost(*args: str, site: Path | None = None) -> subprocess.CompletedProcess[str]:
    paths = [str(Path(__file__).parent)] + ([str(site)] if site else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    env.pop("DEVICEHOST_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "devicehost.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def scripted_site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    write_distribution(site, "devicehost-alpha", {"devicehost.drivers": {"alpha": SCRIPTED}})
    return site


def run_with_alpha(
    tmp_path: Path, command: str, body: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    """`devicehost COMMAND` with only the scripted driver 'alpha' and config ``body``."""
    path = config_file(tmp_path, body)
    return devicehost(
        command,
        "--config",
        str(path),
        "--drivers",
        "alpha",
        "--root",
        str(tmp_path),
        *extra,
        site=scripted_site(tmp_path),
    )


def config_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "host.yaml"
    path.write_text("apiVersion: devicehost/v1\nkind: HostConfig\n" + body)
    return path


def test_help_lists_commands_and_examples():
    """--help names every command and shows examples."""
    result = devicehost("--help")
    assert result.returncode == 0
    for command in ("run", "drivers", "devices", "config", "demo"):
        assert command in result.stdout
    assert "devicehost run --root /host" in result.stdout


def test_run_help_documents_flags_with_env_vars():
    """`run --help` shows each flag with the env var that sets the same value."""
    result = devicehost("run", "--help")
    assert "--plugin-dir DIR" in result.stdout
    assert "DEVICEHOST_PLUGIN_DIR" in result.stdout
    assert "--simulate" in result.stdout


def test_config_prints_the_effective_document(tmp_path):
    """`devicehost config` prints the merged HostConfig, flags applied."""
    path = config_file(tmp_path, "scanIntervalSeconds: 3\n")
    result = devicehost(
        "config", "--config", str(path), "--node-name", "n9", "--drivers", "template"
    )
    assert result.returncode == 0, result.stderr
    assert "scanIntervalSeconds: 3.0" in result.stdout
    assert "nodeName: n9" in result.stdout


def test_config_error_exits_2_with_the_key(tmp_path):
    """A bad config exits 2 and names the file and key on stderr."""
    path = config_file(tmp_path, "hookTimeoutSeconds: soon\n")
    result = devicehost("config", "--config", str(path))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"devicehost: config error: {path}: hookTimeoutSeconds: expected a positive number of "
        "seconds, got 'soon'"
    )


def test_config_checks_driver_sections_through_the_driver(tmp_path):
    """A driver section the driver rejects fails `devicehost config` with its key path."""
    result = run_with_alpha(
        tmp_path, "config", "drivers:\n  alpha:\n    resources: {a.example/x: lots}\n"
    )
    assert result.returncode == 2
    assert "drivers.alpha: resources.a.example/x: expected a device count" in result.stderr


def test_drivers_json_lists_status_and_resources(tmp_path):
    """`drivers --json` gives each driver's distribution, version, status and resources."""
    result = run_with_alpha(
        tmp_path, "drivers", "drivers:\n  alpha:\n    resources: {a.example/x: 2}\n", "--json"
    )
    assert result.returncode == 0, result.stderr
    alpha = next(r for r in json.loads(result.stdout) if r["name"] == "alpha")
    assert alpha["distribution"] == "devicehost-alpha"
    assert alpha["status"] == "active"
    assert alpha["resources"] == ["a.example/x"]
    assert alpha["notes"] == ["scripted with 2 devices"]


def test_devices_json_shows_ids_health_and_numa(tmp_path):
    """`devices --json` enumerates once and shows every device with health and NUMA."""
    result = run_with_alpha(
        tmp_path, "devices", "drivers:\n  alpha:\n    resources: {a.example/x: 2}\n", "--json"
    )
    assert result.returncode == 0, result.stderr
    devices = json.loads(result.stdout)["resources"]["a.example/x"]["devices"]
    assert devices == [
        {"id": "dev-0", "health": "Healthy", "numa": [0]},
        {"id": "dev-1", "health": "Healthy", "numa": [1]},
    ]


def test_devices_text_output(tmp_path):
    """Plain `devices` prints one line per device under its resource."""
    result = run_with_alpha(
        tmp_path, "devices", "drivers:\n  alpha:\n    resources: {a.example/x: 1}\n"
    )
    assert "a.example/x (driver alpha): 1 devices" in result.stdout
    assert "dev-0" in result.stdout and "Healthy" in result.stdout


def test_unknown_driver_section_is_warned_about(tmp_path):
    """A config section for a driver that is not installed is reported, not silently lost."""
    result = run_with_alpha(tmp_path, "config", "drivers:\n  nvida:\n    replicas: 2\n")
    assert result.returncode == 0
    assert "config drivers.nvida: no installed driver is named 'nvida'" in result.stderr


def test_demo_tours_a_simulated_node():
    """`devicehost demo` registers, lists, allocates, flips health and survives a restart."""
    result = devicehost("demo", "--drivers", "template")
    assert result.returncode == 0, result.stderr
    for line in (
        "== Registration with the kubelet",
        "example.com/widget",
        "kubelet sees Unhealthy",
        "kubelet sees Healthy",
        "resources re-registered",
    ):
        assert line in result.stdout
