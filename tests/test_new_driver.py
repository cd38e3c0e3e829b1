"""A stranger's driver works the first time: `devicehost new-driver` writes a standalone
distribution outside this repository that installs from wheels into a fresh environment
beside devicehost, passes its own tests and the conformance battery, and is served to a
kubelet by `devicehost run --simulate` and `devicehost demo` — with no edit."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from devicehost.cli.scaffold import ScaffoldError, write_driver
from devicehost.testing import KubeletStandIn

ROOT = Path(__file__).resolve().parent.parent
UV = os.environ.get("UV") or shutil.which("uv") or shutil.which("uv", path=ROOT / ".tools/bin")
RESOURCE = "acme.example.com/widget"
WRITING = (ROOT / "docs" / "writing-a-driver.md").read_text()
NEXT = "next, install it beside this devicehost and run its tests:\n"


def run(*args: object, cwd: Path | None = None, timeout: float = 120) -> str:
    """Run a command; on failure show its output (never a bare CalledProcessError)."""
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{args} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def devicehost_wheel(tmp_path_factory) -> Path:
    """devicehost built as a wheel, as it would be published."""
    if UV is None:
        pytest.skip("uv is not available to build wheels (run the tests through `make test`)")
    wheels = tmp_path_factory.mktemp("devicehost-wheel")
    run(UV, "build", "--wheel", "--quiet", "--out-dir", wheels, ROOT)
    (wheel,) = wheels.glob("devicehost-*.whl")
    return wheel


@pytest.fixture(scope="module")
def stranger(tmp_path_factory, devicehost_wheel) -> tuple[Path, Path]:
    """`devicehost new-driver acme` in a temporary directory outside the repository, then a
    fresh venv (uv's: no pip in it) with only devicehost's wheel, the new driver's wheel and
    pytest."""
    work = tmp_path_factory.mktemp("stranger")
    assert ROOT not in work.parents
    project = work / "devicehost-acme"
    run(sys.executable, "-m", "devicehost.cli", "new-driver", "acme", "--dest", project)
    wheels = work / "wheels"
    run(UV, "build", "--wheel", "--quiet", "--out-dir", wheels, project)
    venv = work / "venv"
    run(UV, "venv", "--quiet", "--python", sys.executable, venv)
    run(
        UV, "pip", "install", "--quiet", "--python", venv / "bin" / "python",
        devicehost_wheel, *sorted(wheels.glob("*.whl")), "pytest",
    )  # fmt: skip
    return project, venv


def shell(script: str, cwd: Path, venv: Path, *path: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in bash as a user of ``venv`` would: its bin first on PATH (so
    ``python`` and ``devicehost`` are the venv's), nothing of this checkout importable."""
    env = {**os.environ, "VIRTUAL_ENV": str(venv)}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *path, env.get("PATH", "")])
    for name in ("PYTHONPATH", "DEVICEHOST_CONFIG", "PYTEST_ADDOPTS"):
        env.pop(name, None)
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


def walkthrough() -> list[str]:
    """The commands of writing-a-driver.md's first section, in order."""
    block = re.search(r"^## 1\..*?^```sh\n(.*?)^```", WRITING, re.MULTILINE | re.DOTALL)
    assert block, "docs/writing-a-driver.md section 1 has no ```sh block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def printed_steps(out: str, python: Path) -> list[str]:
    """The next steps new-driver printed, with this venv's python shown as ``python``."""
    lines = out.split(NEXT, 1)[1].splitlines()[:2]
    return [line.strip().replace(str(python), "python") for line in lines]


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


@pytest.fixture(scope="module")
def newcomer(tmp_path_factory, devicehost_wheel) -> Path:
    """A fresh venv with pip, as `python -m venv` makes one, and devicehost's wheel in it."""
    venv = tmp_path_factory.mktemp("newcomer") / "venv"
    run(UV, "venv", "--quiet", "--seed", "--python", sys.executable, venv)
    run(UV, "pip", "install", "--quiet", "--python", venv / "bin" / "python", devicehost_wheel)
    return venv


def test_writing_a_driver_walkthrough_runs_as_written(newcomer, tmp_path):
    """Every command of writing-a-driver.md's walkthrough, run as written in a fresh
    environment with pip: new-driver prints the doc's next two commands, they install the
    driver and its tests pass, it passes the battery, serves the stand-in, and the demo
    shows it on its own machine and on its default node."""
    commands = walkthrough()
    assert commands[0] == "devicehost new-driver yourvendor"
    result = shell("set -x\n" + "\n".join(commands), tmp_path, newcomer)
    out = result.stdout
    assert result.returncode == 0, f"{out}\n{result.stderr}"
    assert printed_steps(out, newcomer / "bin" / "python") == commands[1:3]
    assert re.search(r"=+ \d+ passed in ", out), out
    assert "driver yourvendor: every conformance check passed\n" in out
    assert "  registered: endpoint devicehost-yourvendor.example.com_widget.sock" in out
    assert "  Allocate ['widget0']:\n    env WIDGET_VISIBLE_DEVICES=widget0\n" in out
    assert re.search(
        r"^  yourvendor-box +A widget box: 8 widgets .* \[devicehost-yourvendor\]$", out, re.M
    )
    tours = out.split("devicehost demo: simulated node ")[1:]
    assert [
        re.search(r"yourvendor.example.com/widget +(\d+) devices", t).group(1) for t in tours
    ] == [
        "8",
        "4",
    ]


def test_new_drivers_printed_steps_work_without_pip(stranger, tmp_path):
    """In an environment without pip (uv's, like the development .venv), new-driver prints
    a `uv pip install --python <it>` line; run as printed, the driver installs there and its
    tests pass."""
    _, venv = stranger
    assert UV is not None
    result = shell("devicehost new-driver beta", tmp_path, venv, str(Path(UV).parent))
    assert result.returncode == 0, result.stderr
    steps = result.stdout.split(NEXT, 1)[1].splitlines()[:2]
    assert steps[0].strip().startswith(f"{UV} pip install --python ")
    assert steps[0].strip().endswith(" -e './devicehost-beta[test]'")
    done = shell("\n".join(s.strip() for s in steps), tmp_path, venv)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert re.search(r"=+ \d+ passed in ", done.stdout), done.stdout


def test_help_names_the_resource_it_writes(tmp_path):
    """`new-driver --help` gives the default resource the written project really uses."""
    help_text = run(sys.executable, "-m", "devicehost.cli", "new-driver", "--help")
    assert "NAME.example.com/widget" in " ".join(help_text.split())
    project = write_driver("acme", tmp_path / "acme")
    assert (
        'RESOURCE = "acme.example.com/widget"'
        in (project / "devicehost_acme/driver.py").read_text()
    )
    assert "yourvendor.example.com/widget" in WRITING


def test_refuses_a_bad_name_and_a_non_empty_destination(tmp_path):
    """A name that is no entry-point name, or a destination with files, is refused."""
    with pytest.raises(ScaffoldError, match="lower-case"):
        write_driver("Acme_NPU", tmp_path / "a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "keep.txt").write_text("mine")
    with pytest.raises(ScaffoldError, match="not empty"):
        write_driver("acme", tmp_path / "b")
