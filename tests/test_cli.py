"""The `devicehost` command as an operator runs it (each test runs the real CLI process)."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from devicehost.testing import write_distribution
from support import SCRIPTED, run_scripted


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


@pytest.fixture
def install_site(tmp_path: Path) -> Path:
    """A site directory where the driver 'absent' (unavailable at configure) is installed."""
    site = tmp_path / "site"
    write_distribution(
        site,
        "devicehost-absent",
        {"devicehost.drivers": {"absent": "testdrivers.author_kit:Absent"}},
    )
    return site


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


def test_unknown_driver_name_is_a_config_error_listing_the_installed(tmp_path):
    """`--drivers` naming no installed driver exits 2 with the installed names listed."""
    result = devicehost("config", "--drivers", "nvidai")
    assert result.returncode == 2
    assert "no installed driver is named 'nvidai'" in result.stderr
    assert "nvidia" in result.stderr


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


def test_drivers_exits_1_naming_a_driver_that_cannot_be_started(tmp_path, install_site):
    """An entry point that fails to import makes `devicehost drivers` exit 1 with a line
    naming it (so an image build ending with it fails); a driver merely without hardware
    here (absent: unavailable) does not."""
    write_distribution(
        install_site, "devicehost-broken", {"devicehost.drivers": {"broken": "nosuch_module"}}
    )
    result = devicehost(
        "drivers", "--drivers", "broken,absent", "--root", str(tmp_path), site=install_site
    )
    assert result.returncode == 1
    assert "devicehost drivers: 1 driver could not be started: broken" in result.stderr
    assert "No module named 'nosuch_module'" in result.stdout
    fine = devicehost("drivers", "--drivers", "absent", "--root", str(tmp_path), site=install_site)
    assert fine.returncode == 0, fine.stderr
    assert "absent       unavailable" in fine.stdout


def test_drivers_text_shows_which_resources_go_through_dra(tmp_path):
    """A resource configured `api: dra` is listed under its DRA driver's name, apart from
    the driver's device-plugin resources."""
    body = (
        "nodeName: node-1\n"
        "resources:\n  a.example/x: {api: dra}\n"
        "drivers:\n  alpha:\n    resources: {a.example/x: 2, a.example/y: 1}\n"
    )
    result = run_with_alpha(tmp_path, "drivers", body)
    assert result.returncode == 0, result.stderr
    lines = [line.strip() for line in result.stdout.splitlines()]
    assert "resources: a.example/y" in lines
    assert "DRA driver alpha.devicehost.io (not registered yet): a.example/x" in lines


def test_kubeconfig_flag_sets_the_dra_api_server_credentials(tmp_path):
    """`--kubeconfig` (for a host run outside a cluster) is dra.kubeconfig, from the flag."""
    result = run_with_alpha(tmp_path, "config", "", "--kubeconfig", "/etc/kube/config")
    assert result.returncode == 0, result.stderr
    assert "kubeconfig: /etc/kube/config" in result.stdout


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


def test_an_edit_allowance_for_a_driver_not_installed_is_warned_about(tmp_path):
    """containerEdits.allow for a misspelt driver is reported like a driver section, not
    accepted silently (its exception would never apply)."""
    result = run_with_alpha(
        tmp_path, "config", "containerEdits:\n  allow:\n    alhpa: [LD_PRELOAD]\n"
    )
    assert result.returncode == 0
    assert "config containerEdits.allow.alhpa: no installed driver is named 'alhpa'" in (
        result.stderr
    )


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


# -- the paths people hit by mistake (issue: the command line helps when things go wrong) --


def _unprivileged(command: list[str]) -> list[str]:
    """``command`` without the power to write anywhere: as root, drop the capabilities
    that bypass file permissions (setpriv), so a 0555 directory is unwritable."""
    if os.geteuid() != 0:
        return command
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot make a directory unwritable")
    caps = "-dac_override,-dac_read_search"
    return [setpriv, "--bounding-set", caps, "--inh-caps", caps, *command]


def test_run_without_privilege_says_what_to_do(tmp_path):
    """Item 9: `run` on a plugin directory it may not create sockets in exits 1 with one
    line naming the directory, the cause and the fix — no traceback, no retry loop."""
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    result = subprocess.run(
        _unprivileged([sys.executable, "-m", "devicehost.cli", "run", "--plugin-dir", str(locked)]),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().startswith(f"devicehost: cannot create sockets in {locked}")
    assert "run as root" in result.stderr and "--plugin-dir" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_with_a_socket_path_over_the_unix_limit_says_so(tmp_path):
    """Item 9: a plugin directory too long for unix socket paths is refused at once."""
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    result = devicehost("run", "--plugin-dir", str(deep))
    assert result.returncode == 1
    assert "over the 107-byte limit of unix socket paths" in result.stderr
    assert "use a shorter --plugin-dir" in result.stderr


def test_run_on_a_file_instead_of_a_directory_says_so(tmp_path):
    """Item 9: a plugin directory that is a file is named as such."""
    (tmp_path / "plugins").write_text("")
    result = devicehost("run", "--plugin-dir", str(tmp_path / "plugins"))
    assert result.returncode == 1
    assert f"plugin directory {tmp_path / 'plugins'} is not a directory" in result.stderr


def test_unknown_driver_name_lists_the_installed_ones(tmp_path):
    """Item 10: `--drivers nvidai` is an error listing the installed drivers, not a host
    that silently serves nothing."""
    result = devicehost("drivers", "--drivers", "nvidai", "--root", str(tmp_path))
    assert result.returncode == 2
    assert "enabledDrivers: no installed driver is named 'nvidai'; installed: " in result.stderr
    assert "template" in result.stderr


def test_missing_kubelet_is_one_line_saying_what_it_means(tmp_path, plugin_dir):
    """Item 11: with no kubelet.sock, the log says so once, with what it usually means; the
    retries of each resource stay at debug level."""
    site = scripted_site(tmp_path)
    config = config_file(
        tmp_path, "drivers:\n  alpha:\n    resources: {a.example/x: 1, b.example/y: 1}\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), str(site)])}
    process = subprocess.Popen(
        [
            sys.executable, "-m", "devicehost.cli", "run", "--config", str(config),
            "--drivers", "alpha", "--root", str(tmp_path), "--plugin-dir", str(plugin_dir),
            "--metrics-address", "", "--pod-resources-socket", "", "--log-level", "debug",
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    lines: list[str] = []
    try:
        assert process.stderr is not None
        attempts = {"a.example/x": 0, "b.example/y": 0}
        for line in process.stderr:
            lines.append(line)
            for resource in attempts:
                if f"resource '{resource}' (attempt" in line:
                    attempts[resource] += 1
            if min(attempts.values()) >= 3:
                break
    finally:
        process.terminate()
        process.wait(10)
    missing = [line for line in lines if "kubelet.sock does not exist" in line]
    assert len(missing) == 1, lines
    assert "the kubelet is not running" in missing[0] and "--plugin-dir" in missing[0]
    assert not [line for line in lines if "WARNING" in line and "not reachable" in line]


def test_readme_says_how_to_run_devicehost_and_tools_are_ignored():
    """Item 12: the README names the installed command, and .tools/ is ignored by git."""
    root = Path(__file__).resolve().parent.parent
    assert ".venv/bin/devicehost" in (root / "README.md").read_text()
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", ".tools/bin/uv"], cwd=root, check=False
    )
    assert ignored.returncode == 0


def test_each_command_offers_only_its_flags():
    """Item 13: `demo` does not take --plugin-dir (an error naming the command), and its
    help does not show it."""
    result = devicehost("demo", "--plugin-dir", "/tmp/x")
    assert result.returncode == 2
    assert "devicehost demo: error: 'demo' does not take --plugin-dir" in result.stderr
    assert "--plugin-dir" not in devicehost("demo", "--help").stdout


def test_help_shows_defaults():
    """Item 13: each flag's help shows its default."""
    out = " ".join(devicehost("run", "--help").stdout.split())
    assert "DEVICEHOST_PLUGIN_DIR, default: /var/lib/kubelet/device-plugins" in out
    assert "default: 10)" in out


def test_flags_before_the_command_are_accepted(tmp_path):
    """Item 13: `devicehost --simulate drivers` works like `devicehost drivers --simulate`."""
    result = devicehost("--simulate", "drivers", "--drivers", "template", "--json")
    assert result.returncode == 0, result.stderr
    template = next(r for r in json.loads(result.stdout) if r["name"] == "template")
    assert template["resources"] == ["example.com/widget"]


def test_closed_pipe_ends_quietly():
    """Item 13: `devicehost devices | head` ends without a BrokenPipeError traceback."""
    process = subprocess.Popen(
        [sys.executable, "-m", "devicehost.cli", "devices", "--simulate"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    err = process.stderr.read().decode()
    assert process.wait(60) == 141
    assert "BrokenPipeError" not in err and "Traceback" not in err


def test_unavailable_driver_is_logged_once(install_site):
    """Item 13: a driver unavailable at configure is logged once, with its reason."""
    result = devicehost("devices", "--drivers", "absent", "--log-level", "info", site=install_site)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("no widget hardware on this node") == 1, result.stderr


def test_yaml_errors_name_the_file(tmp_path):
    """Item 13: a YAML syntax error names the file, not "<unicode string>"."""
    path = config_file(tmp_path, "log: [unclosed\n")
    result = devicehost("config", "--config", str(path))
    assert result.returncode == 2
    assert f'in "{path}", line' in result.stderr
    assert "<unicode string>" not in result.stderr


def test_new_driver_refuses_a_bad_name(tmp_path):
    """Item 14: `new-driver` with an unusable name exits 2 saying what a name may be."""
    result = devicehost("new-driver", "Bad_Name", "--dest", str(tmp_path / "x"))
    assert result.returncode == 2
    assert "expected lower-case letters and digits" in result.stderr


def test_demo_lists_the_nodes_it_can_simulate():
    """`demo --list-nodes` lists each published machine with a one-line description."""
    out = devicehost("demo", "--list-nodes").stdout
    for name in ("dgx-h100", "atlas-800-9000", "atlas-800t-a2", "atlas-800-3000"):
        assert re.search(rf"^  {name} +\S", out, re.MULTILINE), out


def contributing_site(tmp_path: Path) -> Path:
    """A site where one distribution publishes the machine robot-box and another a machine
    whose description cannot be imported."""
    site = tmp_path / "site"
    write_distribution(
        site,
        "devicehost-robots",
        {"devicehost.nodes": {"robot-box": "testdrivers.author_kit:ROBOT_BOX"}},
    )
    write_distribution(
        site, "devicehost-broken-box", {"devicehost.nodes": {"broken-box": "testdrivers.nowhere:X"}}
    )
    return site


def test_demo_lists_machines_installed_drivers_contribute(tmp_path):
    """A distribution's devicehost.nodes entry points appear in `demo --list-nodes` with
    their descriptions and publisher; one whose description fails to import is still
    listed, saying why, and the others are unaffected."""
    out = devicehost("demo", "--list-nodes", site=contributing_site(tmp_path)).stdout
    assert re.search(
        r"^  robot-box +Robot box: a stand-in machine a third-party driver publishes "
        r"\[devicehost-robots\]$",
        out,
        re.MULTILINE,
    ), out
    assert re.search(r"^  broken-box +\(description not loaded: ModuleNotFoundError", out, re.M)
    assert re.search(r"^  template-box +A widget box", out, re.MULTILINE), out
    assert re.search(r"^  dgx-h100 +NVIDIA DGX H100", out, re.MULTILINE), out


def test_a_contributed_machine_is_a_valid_node(tmp_path):
    """`--node` accepts a machine an installed distribution publishes."""
    result = devicehost(
        "devices", "--simulate", "--node", "robot-box", "--drivers", "template",
        site=contributing_site(tmp_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "no resources on this node"


@pytest.mark.parametrize(
    "command",
    [
        ("devices", "--simulate"),
        ("drivers", "--simulate"),
        ("config", "--simulate"),
        ("demo",),
        ("run", "--simulate", "--metrics-address", "", "--pod-resources-socket", ""),
    ],
    ids=lambda c: c[0],
)
def test_an_unknown_node_is_an_error_listing_the_known_ones(tmp_path, command):
    """`--node nosuch` exits 2 in every command, before anything is built or served, with
    the valid names listed (published and contributed)."""
    extra = ("--plugin-dir", str(tmp_path)) if command[0] == "run" else ()
    result = devicehost(*command, *extra, "--node", "nosuch", site=contributing_site(tmp_path))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(
        "devicehost: config error: flag --node: simulateNode: no simulated machine is named "
        "'nosuch'; known: dgx-h100, atlas-800-9000, atlas-800t-a2, atlas-800-3000, "
    ), result.stderr
    assert "robot-box" in result.stderr and "template-box" in result.stderr
    assert result.stdout == ""


def test_otlp_credentials_never_reach_the_output_or_the_log(tmp_path, plugin_dir, kubelet):
    """With user:password in the OTLP endpoint, neither `devicehost config` nor a `devicehost
    run` that exports spans to it (and fails to: nothing listens) prints the password."""
    secret = "http://bob:s3cret@127.0.0.1:9/v1/traces"
    env = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": secret,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
    }
    shown = subprocess.run(
        [sys.executable, "-m", "devicehost.cli", "config", "--drivers", "template"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "127.0.0.1:9" in shown.stdout
    assert "s3cret" not in shown.stdout + shown.stderr

    process = run_scripted(tmp_path, plugin_dir, "test.example/dev", 1, env=env)
    try:
        kubelet.wait_registered("test.example/dev", timeout=20)
        assert kubelet.allocate("test.example/dev", [["dev-0"]])  # a span to export
    finally:
        process.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        _, stderr = process.communicate(timeout=20)
        print(f"\nSIGTERM to exit, collector unreachable: {time.monotonic() - sent:.2f} s")
    assert process.returncode == 0
    assert b"stopped" in stderr
    assert b"tracing to http://***@127.0.0.1:9/v1/traces" in stderr  # named, redacted
    assert b"s3cret" not in stderr


# -- config checks: every source named, each error said once ---------------------------------


def test_a_misspelt_disabled_driver_flag_is_refused_naming_the_flag():
    """`--disable-drivers nosuch` exits 2 naming the flag and the installed drivers, as a
    misspelt enabled driver does: it would leave the driver meant to be off serving."""
    result = devicehost("config", "--disable-drivers", "nosuch")
    assert result.returncode == 2
    assert result.stderr.startswith(
        "devicehost: config error: flag --disable-drivers: disabledDrivers: no installed "
        "driver is named 'nosuch'; installed: "
    ), result.stderr


def test_a_misspelt_disabled_driver_in_the_file_is_refused_naming_the_file(tmp_path):
    """`disabledDrivers: [nvidai]` in a config file exits 2 naming the file and key."""
    path = config_file(tmp_path, "disabledDrivers: [nvidai]\n")
    result = devicehost("config", "--config", str(path))
    assert result.returncode == 2
    assert (
        f"devicehost: config error: {path}: disabledDrivers: no installed driver is named "
        "'nvidai'; installed: "
    ) in result.stderr


def test_an_unknown_enabled_driver_names_the_flag_it_came_from(tmp_path):
    """`--drivers nosuch` names the flag as the source, as the command line spells it,
    not the config key alone."""
    result = devicehost("config", "--drivers", "nosuch")
    assert result.returncode == 2
    assert result.stderr.startswith(
        "devicehost: config error: flag --drivers: enabledDrivers: no installed driver is "
        "named 'nosuch'"
    ), result.stderr


def test_config_refuses_an_otlp_endpoint_that_is_no_url(tmp_path):
    """`tracing.otlpEndpoint: "not a url"` fails `devicehost config` (exit 2) naming the
    file and key, instead of a host that fails at every export."""
    path = config_file(tmp_path, 'tracing:\n  otlpEndpoint: "not a url"\n')
    result = devicehost("config", "--config", str(path))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"devicehost: config error: {path}: tracing.otlpEndpoint: expected an OTLP URL such "
        "as http://collector:4317, got 'not a url'"
    )


def test_config_refuses_a_relative_cdi_dir(tmp_path):
    """A relative `cdi.dir` fails `devicehost config` (exit 2): the runtime reads specs
    from an absolute directory, and a relative one would depend on the host's cwd."""
    path = config_file(tmp_path, "cdi:\n  dir: run/cdi\n")
    result = devicehost("config", "--config", str(path))
    assert result.returncode == 2
    assert (
        f"devicehost: config error: {path}: cdi.dir: expected an absolute path, got 'run/cdi'"
    ) in result.stderr


def test_a_driver_config_error_is_printed_once(tmp_path):
    """`devicehost config` says a driver's refusal of its section once, as its own error;
    the host's log line for the same refusal is not printed beside it."""
    result = run_with_alpha(
        tmp_path, "config", "drivers:\n  alpha:\n    resources: {a.example/x: lots}\n"
    )
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if "expected a device count" in line]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("devicehost: config error: ")


def test_mounts_offers_only_the_flags_it_reads():
    """`mounts --help` lists the flags that change its answer (plugin directory,
    PodResources socket, driver selection, hook timeout, logs) and no other;
    `mounts --simulate` is an error naming the command."""
    help_text = devicehost("mounts", "--help").stdout
    for flag in ("--plugin-dir", "--pod-resources-socket", "--drivers", "--disable-drivers"):
        assert flag in help_text, flag
    for flag in ("--simulate", "--root", "--node ", "--metrics-address", "--otlp-endpoint"):
        assert flag not in help_text, flag
    result = devicehost("mounts", "--simulate")
    assert result.returncode == 2
    assert "'mounts' does not take --simulate" in result.stderr


# -- the plugin directory -------------------------------------------------------------------


def _run_until(args: list[str], wanted: str, site: Path | None = None) -> list[str]:
    """Start `devicehost run ARGS`, read its log until a line contains ``wanted`` (or it
    exits, or 60 s pass), then stop it with SIGTERM; the log lines read."""
    paths = [str(Path(__file__).parent)] + ([str(site)] if site else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    env.pop("DEVICEHOST_CONFIG", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "devicehost.cli", "run", *args],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    seen: list[str] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                break
            seen.append(line)
            if wanted in line:
                break
    finally:
        process.terminate()
        process.wait(30)
        reader.join(10)
    return seen


def test_run_creates_a_missing_plugin_directory_before_serving(tmp_path, plugin_dir):
    """A plugin directory that does not exist yet is created first, said once in the log,
    and every resource serves at its first try: no bind error, no retry."""
    plugin_dir = plugin_dir / "kubelet" / "dp"  # a short path: unix sockets go in it
    config = config_file(
        tmp_path, "drivers:\n  alpha:\n    resources: {a.example/x: 1, b.example/y: 1}\n"
    )
    lines = _run_until(
        [
            "--config", str(config), "--drivers", "alpha", "--root", str(tmp_path),
            "--plugin-dir", str(plugin_dir), "--metrics-address", "",
            "--pod-resources-socket", "",
        ],
        "kubelet.sock does not exist",  # registration: both sockets are served by then
        site=scripted_site(tmp_path),
    )  # fmt: skip
    created = [line for line in lines if "created the plugin directory" in line]
    assert len(created) == 1, lines
    assert str(plugin_dir) in created[0]
    assert not [line for line in lines if "bind" in line.lower() or "cannot serve" in line]
    assert any("kubelet.sock does not exist" in line for line in lines), lines


def test_run_logs_one_resource_in_the_singular(tmp_path, plugin_dir):
    """A host serving one resource says "serving 1 resource", not "1 resources"."""
    config = config_file(tmp_path, "drivers:\n  alpha:\n    resources: {a.example/x: 1}\n")
    lines = _run_until(
        [
            "--config", str(config), "--drivers", "alpha", "--root", str(tmp_path),
            "--plugin-dir", str(plugin_dir), "--metrics-address", "",
            "--pod-resources-socket", "",
        ],
        "serving 1 ",
        site=scripted_site(tmp_path),
    )  # fmt: skip
    assert any("serving 1 resource: a.example/x" in line for line in lines), lines


def _in_own_mount_namespace(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the shell ``script`` (with ``args`` as $1...) in a mount namespace of its own, so
    it may mount over directories without touching this machine's."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    probe = subprocess.run([unshare, "-m", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a mount namespace here: {probe.stderr.decode().strip()}")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    env.pop("DEVICEHOST_CONFIG", None)
    return subprocess.run(
        [unshare, "-m", "--propagation", "private", "sh", "-c", script, "sh", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_run_on_a_read_only_filesystem_says_so_not_run_as_root(tmp_path):
    """A plugin directory on a read-only filesystem is refused (exit 1) saying the
    filesystem is read-only, never "permission denied; run as root" to root."""
    mount_point = tmp_path / "ro"
    mount_point.mkdir()
    result = _in_own_mount_namespace(
        'mount -t tmpfs -o ro tmpfs "$1" && exec "$2" -m devicehost.cli run --plugin-dir "$1/dp"',
        str(mount_point),
        sys.executable,
    )
    assert result.returncode == 1, result.stderr
    assert f"plugin directory {mount_point / 'dp'} does not exist and cannot be created" in (
        result.stderr
    )
    assert "the filesystem is mounted read-only" in result.stderr
    assert "run as root" not in result.stderr


def test_a_simulated_run_creates_nothing_outside_the_paths_it_was_given(tmp_path):
    """`run --simulate --plugin-dir <elsewhere>` creates nothing in the kubelet's
    directories or under /run (fresh, empty filesystems over /var/lib and /run in a
    private mount namespace stay empty): only the given directory and its simulated tree."""
    plugin_dir = tmp_path / "plugins"
    script = (
        "mount -t tmpfs tmpfs /var/lib && mount -t tmpfs tmpfs /run || exit 99\n"
        '"$1" -m devicehost.cli run --simulate --plugin-dir "$2" --metrics-address "" '
        '2> "$3" &\n'
        "pid=$!\n"
        # until every resource is served and registration is tried
        'for _ in $(seq 600); do grep -q "kubelet.sock does not exist" "$3" && break; '
        "sleep 0.1; done\n"
        'kill -TERM $pid; wait $pid; echo "exit $?"\n'
        "find /var/lib /run -mindepth 1\n"
    )
    log = tmp_path / "run.log"
    result = _in_own_mount_namespace(script, sys.executable, str(plugin_dir), str(log))
    assert result.returncode != 99, result.stderr
    assert "kubelet.sock does not exist" in log.read_text(), log.read_text()
    assert result.stdout.splitlines() == ["exit 0"], result.stdout
    assert plugin_dir.is_dir()
