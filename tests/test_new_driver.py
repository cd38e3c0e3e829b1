"""A stranger's driver works the first time: `devicehost new-driver` writes a standalone
distribution outside this repository that installs from wheels into a fresh environment
beside devicehost, passes its own tests and the conformance battery, and is served to a
kubelet by `devicehost run --simulate` and `devicehost demo` — with no edit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from devicehost.scaffold import ScaffoldError, write_driver
from devicehost.testing import KubeletStandIn

ROOT = Path(__file__).resolve().parent.parent
UV = os.environ.get("UV") or shutil.which("uv") or shutil.which("uv", path=ROOT / ".tools/bin")
RESOURCE = "acme.example.com/widget"


def run(*args: object, cwd: Path | None = None, timeout: float = 120) -> str:
    """Run a command; on failure show its output (never a bare CalledProcessError)."""
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{args} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def stranger(tmp_path_factory) -> tuple[Path, Path]:
    """`devicehost new-driver acme` in a temporary directory outside the repository, then a
    fresh venv with only devicehost's wheel, the new driver's wheel and pytest."""
    if UV is None:
        pytest.skip("uv is not available to build wheels (run the tests through `make test`)")
    work = tmp_path_factory.mktemp("stranger")
    assert ROOT not in work.parents
    project = work / "devicehost-acme"
    run(sys.executable, "-m", "devicehost.cli", "new-driver", "acme", "--dest", project)
    wheels = work / "wheels"
    for source in (ROOT, project):
        run(UV, "build", "--wheel", "--quiet", "--out-dir", wheels, source)
    venv = work / "venv"
    run(UV, "venv", "--quiet", "--python", sys.executable, venv)
    run(
        UV, "pip", "install", "--quiet", "--python", venv / "bin" / "python",
        *sorted(wheels.glob("*.whl")), "pytest",
    )  # fmt: skip
    return project, venv


def test_written_project_is_standalone(stranger):
    """The project names devicehost as a plain dependency (no workspace source), declares
    its entry point and carries a README with the rules section."""
    project, _ = stranger
    meta = tomllib.loads((project / "pyproject.toml").read_text())
    assert meta["project"]["dependencies"] == ["devicehost"]
    assert "uv" not in meta.get("tool", {})
    assert meta["project"]["entry-points"]["devicehost.drivers"] == {
        "acme": "devicehost_acme.driver"
    }
    assert "## Rules we follow, and where they come from" in (project / "README.md").read_text()


def test_its_own_tests_pass_in_the_fresh_environment(stranger):
    """The new driver's tests (kit fixtures, check_driver, real sockets) pass against the
    installed wheels."""
    project, venv = stranger
    out = run(venv / "bin" / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=project)
    assert " passed" in out and "failed" not in out


def test_check_driver_passes_on_its_simulated_node(stranger, tmp_path):
    """The conformance battery, run from the fresh environment, passes on the simulation."""
    _, venv = stranger
    script = (
        "from devicehost.testing import check_driver\n"
        f"report = check_driver('acme', {str(tmp_path / 'root')!r}, simulated=True)\n"
        "print(report.devices)\n"
    )
    assert run(venv / "bin" / "python", "-c", script).strip() == f"{{'{RESOURCE}': 4}}"


def test_run_simulate_serves_it_to_the_kubelet(stranger, plugin_dir):
    """`devicehost run --simulate` from the fresh environment registers the new resource;
    the kubelet stand-in lists four widgets and allocates one."""
    _, venv = stranger
    with KubeletStandIn(plugin_dir, start=True) as kubelet:
        process = subprocess.Popen(
            [
                venv / "bin" / "devicehost", "run", "--simulate", "--plugin-dir", plugin_dir,
                "--metrics-address", "", "--pod-resources-socket", "",
            ],
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            kubelet.wait_registered(RESOURCE, timeout=30)
            kubelet.wait_devices(RESOURCE, lambda d: len(d) == 4)
            (container,) = kubelet.allocate(RESOURCE, [["widget1"]])
            assert container.envs == {"WIDGET_VISIBLE_DEVICES": "widget1"}
        finally:
            process.terminate()
            process.wait(10)


def test_demo_serves_it(stranger):
    """`devicehost demo` from the fresh environment tours the new driver's resource."""
    _, venv = stranger
    out = run(venv / "bin" / "devicehost", "demo", "--drivers", "acme", timeout=60)
    assert f"{RESOURCE} <- widget" in out
    assert "kubelet sees Unhealthy" in out


def test_refuses_a_bad_name_and_a_non_empty_destination(tmp_path):
    """A name that is no entry-point name, or a destination with files, is refused."""
    with pytest.raises(ScaffoldError, match="lower-case"):
        write_driver("Acme_NPU", tmp_path / "a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "keep.txt").write_text("mine")
    with pytest.raises(ScaffoldError, match="not empty"):
        write_driver("acme", tmp_path / "b")
