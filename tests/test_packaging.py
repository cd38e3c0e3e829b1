"""The users' story for real: build wheels, pip-install a third-party driver into a fresh
environment, and watch the installed `devicehost` find it and serve it to a kubelet."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from devicehost.testing import FakeRoot, KubeletStandIn

ROOT = Path(__file__).resolve().parent.parent
UV = os.environ.get("UV") or shutil.which("uv")


@pytest.fixture(scope="module")
def fresh_env(tmp_path_factory) -> Path:
    """A new virtualenv with only the host wheel and the example driver wheel installed."""
    if UV is None:
        pytest.skip("uv is not available to build wheels (run the tests through `make test`)")
    work = tmp_path_factory.mktemp("packaging")
    wheels = work / "wheels"
    for project in (ROOT, ROOT / "tests" / "example_driver"):
        subprocess.run(
            [UV, "build", "--wheel", "--quiet", "--out-dir", str(wheels), str(project)],
            check=True,
            capture_output=True,
        )
    venv = work / "venv"
    subprocess.run(
        [UV, "venv", "--quiet", "--python", sys.executable, str(venv)],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            UV,
            "pip",
            "install",
            "--quiet",
            "--python",
            str(venv / "bin" / "python"),
            *map(str, sorted(wheels.glob("*.whl"))),
        ],
        check=True,
        capture_output=True,
    )
    return venv


def test_installed_driver_is_listed(fresh_env, tmp_path):
    """`devicehost drivers` in the fresh environment lists the pip-installed driver."""
    result = subprocess.run(
        [fresh_env / "bin" / "devicehost", "drivers", "--json", "--root", str(tmp_path)],
        check=True,
        capture_output=True,
        text=True,
    )
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["example"]["distribution"] == "devicehost-example"
    assert rows["example"]["version"] == "1.2.3"
    assert rows["example"]["status"] == "active"
    assert set(rows) == {"example"}  # nothing from the development environment leaks in


def test_installed_driver_is_served_to_the_kubelet(fresh_env, tmp_path, plugin_dir):
    """`devicehost run` from the fresh environment registers the driver's resource, and the
    kubelet stand-in allocates from it."""
    root = FakeRoot(tmp_path / "root")
    root.char_device("/dev/thing0")
    root.char_device("/dev/thing1")
    with KubeletStandIn(plugin_dir, start=True) as kubelet:
        process = subprocess.Popen(
            [
                fresh_env / "bin" / "devicehost",
                "run",
                "--plugin-dir",
                str(plugin_dir),
                "--root",
                str(root.path),
                "--metrics-address",
                "",
                "--pod-resources-socket",
                "",
            ],
            stderr=subprocess.DEVNULL,
        )
        try:
            kubelet.wait_registered("example.org/thing", timeout=30)
            kubelet.wait_devices("example.org/thing", lambda d: sorted(d) == ["thing0", "thing1"])
            response = kubelet.allocate("example.org/thing", [["thing1"]])
            assert [d.host_path for d in response[0].devices] == ["/dev/thing1"]
        finally:
            process.terminate()
            process.wait(10)
