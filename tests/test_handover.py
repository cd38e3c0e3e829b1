"""A rolling update with surge: the new devicehost waits for the old one's plugin
directory, is ready meanwhile, and serves every device-plugin resource once it is free."""

from __future__ import annotations

from pathlib import Path

from devicehost.testing import HostThread
from support import SCRIPTED, eventually, reap, run_scripted, terminate

RES = "example.com/handed"
WAITING = "another devicehost serves"


def test_the_new_devicehost_serves_the_plugins_once_the_old_one_has_stopped(
    tmp_path: Path, plugin_dir: Path, kubelet
) -> None:
    old = run_scripted(tmp_path, plugin_dir, RES, 2)
    new = None
    log = tmp_path / "new.log"
    try:
        kubelet.wait_registered(RES, timeout=20)
        with log.open("wb") as stderr:
            new = run_scripted(
                tmp_path,
                plugin_dir,
                RES,
                2,
                stderr=stderr,
                env={"DEVICEHOST_PLUGIN_DIR_HANDOVER_SECONDS": "60"},
            )
        eventually(lambda: WAITING in log.read_text(), timeout=20)
        assert kubelet.registration_count(RES) == 1  # the old one's sockets untouched
        terminate(old, timeout=10)
        kubelet.wait_registered(RES, count=2, timeout=20)
        kubelet.wait_devices(RES, lambda devices: len(devices) == 2)
        assert kubelet.allocate(RES, [["dev-0"]])
        assert new.poll() is None
        assert "is this host's now" in log.read_text()
    finally:
        for process in (old, new):
            if process is not None:
                reap(process)


def test_a_directory_never_let_go_ends_the_wait_with_its_reason(
    tmp_path: Path, plugin_dir: Path, kubelet
) -> None:
    old = run_scripted(tmp_path, plugin_dir, RES, 2)
    new = None
    try:
        kubelet.wait_registered(RES, timeout=20)
        new = run_scripted(
            tmp_path, plugin_dir, RES, 2, env={"DEVICEHOST_PLUGIN_DIR_HANDOVER_SECONDS": "0.5"}
        )
        _, stderr = new.communicate(timeout=30)
        assert new.returncode == 2
        assert f"another devicehost still serves {plugin_dir} after 0.5 s" in stderr.decode()
        assert "Traceback" not in stderr.decode()
        assert kubelet.registration_count(RES) == 1
        assert old.poll() is None
    finally:
        for process in (old, new):
            if process is not None:
                reap(process)


def test_a_waiting_devicehost_is_ready_and_registers_nothing(host_config, install, kubelet) -> None:
    """Ready while the old pod serves: the rollout stops the old pod only once the new one
    is ready (maxUnavailable 0)."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    drivers = {"alpha": {"resources": {RES: 2}}}
    with HostThread(host_config, enabled_drivers=("alpha",), drivers=drivers):
        kubelet.wait_registered(RES)
        waiting = HostThread(
            host_config,
            enabled_drivers=("alpha",),
            drivers=drivers,
            plugin_dir_handover_seconds=60.0,
        )
        with waiting:
            eventually(lambda: waiting.host.drivers["alpha"].up)
            assert waiting.host.not_ready() == []
            assert waiting.host.face.not_registered() == []
            assert kubelet.registration_count(RES) == 1
