"""Serve → register → watch, across kubelet restarts, late or rejecting kubelets, signals."""

from __future__ import annotations

import errno
import logging
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from devicehost.kubelet.deviceplugin.plugin_dir_lock import PluginDirInUse
from devicehost.testing import HostThread, KubeletStandIn
from support import SCRIPTED, UNHURRIED_SECONDS, eventually, reap, run_scripted, terminate
from support import scripted as scripted_control

RES = "test.example/dev"
SOCKET = "devicehost-test.example_dev.sock"


def section(count=2, **extra):
    return {"resources": {RES: count}, **extra}


def test_kubelet_restart_reregisters(install, run_host, kubelet):
    """After the kubelet deletes every socket and re-creates kubelet.sock, we register again
    on a fresh socket and stream the devices again."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    run_host(enabled_drivers=("alpha",), drivers={"alpha": section()})
    kubelet.wait_registered(RES)
    kubelet.restart()
    kubelet.wait_registered(RES, count=2)
    kubelet.wait_devices(RES, lambda d: len(d) == 2)
    assert (kubelet.plugin_dir / SOCKET).is_socket()


def test_removed_plugin_socket_is_served_again(install, run_host, kubelet):
    """Our socket deleted while the kubelet stays up: serve again and re-register."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    run_host(enabled_drivers=("alpha",), drivers={"alpha": section()})
    kubelet.wait_registered(RES)
    os.unlink(kubelet.plugin_dir / SOCKET)
    kubelet.wait_registered(RES, count=2)
    assert kubelet.allocate(RES, [["dev-0"]])


def test_restart_is_detected_by_polling_without_inotify(install, host_config, kubelet):
    """Where inotify is unavailable, the polling fallback notices the restart."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    thread = HostThread(host_config, enabled_drivers=("alpha",), drivers={"alpha": section()})
    thread.host.face.use_inotify = False
    with thread:
        kubelet.wait_registered(RES)
        eventually(lambda: thread.host.face.watcher.mode == "polling")  # once registered
        kubelet.restart()
        kubelet.wait_registered(RES, count=2)


def test_kubelet_that_appears_late_is_waited_for(install, run_host, plugin_dir):
    """With no kubelet at start, the host serves, retries, and registers once it appears."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    host = run_host(enabled_drivers=("alpha",), drivers={"alpha": section()})
    assert (plugin_dir / SOCKET).is_socket()
    assert not host.call(lambda: host.host.ready)
    time.sleep(0.3)  # let a few attempts fail first
    with KubeletStandIn(plugin_dir, start=True) as kubelet:
        kubelet.wait_registered(RES)
        eventually(lambda: host.call(lambda: host.host.ready))


def test_a_registration_never_inherits_another_channels_failed_connection(tmp_path):
    """A channel that tried kubelet.sock while it was missing (a registration cancelled in
    flight when the kubelet restarted) does not decide the next one: with the kubelet back,
    Register succeeds at its first attempt. gRPC shares one connection per address among
    channels by default, and a failed one fails every channel's calls at once for its
    reconnect back-off (~1 s): re-registration after a restart took 1.7 s in some runs."""
    import asyncio

    import grpc

    from devicehost._proto.deviceplugin.v1beta1 import api_pb2 as pb
    from devicehost.kubelet.deviceplugin.registration import register

    plugin_dir = tmp_path / "plugins"
    kubelet_socket = plugin_dir / "kubelet.sock"
    kubelet = KubeletStandIn(plugin_dir)
    outcomes = []

    async def scenario():
        stale = grpc.aio.insecure_channel(f"unix://{kubelet_socket}")
        stale.get_state(try_to_connect=True)
        async with asyncio.timeout(10):
            while stale.get_state() != grpc.ChannelConnectivity.TRANSIENT_FAILURE:
                await stale.wait_for_state_change(stale.get_state())
        await asyncio.to_thread(kubelet.start)
        try:
            return await register(
                kubelet_socket,
                RES,
                SOCKET,
                pb.DevicePluginOptions(),
                initial_backoff=0.05,
                on_attempt=lambda resource, outcome: outcomes.append(outcome),
            )
        finally:
            await stale.close()

    try:
        attempts = asyncio.run(scenario())
    finally:
        kubelet.close()
    assert (attempts, outcomes) == (1, ["ok"])


def test_rejected_registration_is_logged_and_others_unaffected(install, run_host, kubelet, caplog):
    """A resource the kubelet rejects is logged with the reason and retried; another
    driver's resource registers normally."""
    caplog.set_level(logging.ERROR, logger="devicehost")
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    install("devicehost-beta", drivers={"beta": SCRIPTED})
    kubelet.reject["test.example/rejected"] = "resource name is already taken"
    run_host(
        enabled_drivers=("alpha", "beta"),
        drivers={
            "alpha": {"resources": {"test.example/rejected": 1}},
            "beta": {"resources": {"test.example/fine": 1}, "prefix": "b"},
        },
    )
    kubelet.wait_registered("test.example/fine")
    kubelet.wait_attempts("test.example/rejected", 2)
    assert any(
        "kubelet rejected resource 'test.example/rejected'" in r.getMessage()
        and "resource name is already taken" in r.getMessage()
        for r in caplog.records
    )


def test_two_drivers_serve_at_once(install, run_host, kubelet):
    """Two drivers' resources are registered and allocate independently."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    install("devicehost-beta", drivers={"beta": SCRIPTED})
    run_host(
        enabled_drivers=("alpha", "beta"),
        drivers={
            "alpha": {"resources": {"test.example/a": 2}},
            "beta": {"resources": {"test.example/b": 3}, "prefix": "b"},
        },
    )
    kubelet.wait_registered("test.example/a")
    kubelet.wait_registered("test.example/b")
    assert kubelet.allocate("test.example/b", [["b-2"]])[0].envs["SCRIPTED_DEVICES"] == "b-2"


def test_failing_driver_does_not_touch_another(install, run_host, kubelet):
    """A driver whose enumerate raises reports its devices Unhealthy after a rescan; the
    other driver's devices stay Healthy and allocate."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    install("devicehost-beta", drivers={"beta": SCRIPTED})
    host = run_host(
        enabled_drivers=("alpha", "beta"),
        drivers={
            "alpha": {"resources": {"test.example/a": 2}},
            "beta": {"resources": {"test.example/b": 2}, "prefix": "b"},
        },
    )
    kubelet.wait_devices("test.example/a", lambda d: len(d) == 2)
    alpha = scripted_control(host, "test.example/a")
    alpha.misbehave(raising=["devicehost_enumerate"])
    alpha.changed("test.example/a")
    kubelet.wait_devices(
        "test.example/a", lambda d: {x.health for x in d.values()} == {"Unhealthy"}
    )
    healthy = {"b-0": "Healthy", "b-1": "Healthy"}
    kubelet.wait_devices("test.example/b", lambda d: {i: x.health for i, x in d.items()} == healthy)
    assert kubelet.allocate("test.example/b", [["b-0"]])


def test_hanging_driver_does_not_delay_another(install, run_host, kubelet):
    """A driver hanging in enumerate stalls only itself: the other one registers."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    install("devicehost-beta", drivers={"beta": SCRIPTED})
    run_host(
        enabled_drivers=("alpha", "beta"),
        hook_timeout=0.5,
        drivers={
            "alpha": {"resources": {"test.example/a": 2}, "hang": ["devicehost_enumerate"]},
            "beta": {"resources": {"test.example/b": 2}, "prefix": "b"},
        },
    )
    kubelet.wait_registered("test.example/b")
    assert kubelet.allocate("test.example/b", [["b-1"]])


def test_a_hung_driver_does_not_hold_back_the_restart_watch(install, host_config, kubelet):
    """Start-up waits up to 5 s for a driver hung in configure; the restart watch does not
    wait with it (it starts after a second): a kubelet restart during that wait is noticed
    and the other driver's resource registers again before start-up is over."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    install("devicehost-beta", drivers={"beta": SCRIPTED})
    thread = HostThread(
        host_config,
        enabled_drivers=("alpha", "beta"),
        hook_timeout=30.0,
        drivers={
            "alpha": {"resources": {"test.example/a": 2}, "hang": ["devicehost_configure"]},
            "beta": {"resources": {"test.example/b": 2}, "prefix": "b"},
        },
    )
    starting = threading.Thread(target=thread.start)  # start() returns once start-up is over
    starting.start()
    try:
        kubelet.wait_registered("test.example/b")
        kubelet.restart()
        kubelet.wait_registered("test.example/b", count=2, timeout=10)
        assert starting.is_alive()  # start-up still waits for alpha: the watch did not
    finally:
        starting.join(timeout=30)
        thread.stop()


def test_stale_socket_and_planted_symlink_are_replaced(install, run_host, kubelet, tmp_path):
    """A symlink planted at our socket path is removed, not followed: its target survives."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    (kubelet.plugin_dir / SOCKET).symlink_to(victim)
    run_host(enabled_drivers=("alpha",), drivers={"alpha": section()})
    kubelet.wait_registered(RES)
    assert (kubelet.plugin_dir / SOCKET).is_socket()
    assert victim.read_text() == "keep me"


def test_stop_ends_streams_removes_sockets_and_shuts_drivers_down(install, run_host, kubelet):
    """Stopping ends every stream cleanly, removes our socket and calls shutdown."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    host = run_host(enabled_drivers=("alpha",), drivers={"alpha": section()})
    kubelet.wait_registered(RES)
    driver = scripted_control(host, RES)
    host.stop()
    kubelet.wait_until(lambda: kubelet.endpoints[RES].stream.done(), 5, "stream end")
    assert kubelet.endpoints[RES].stream_error is None
    assert not (kubelet.plugin_dir / SOCKET).exists()
    assert ("devicehost_shutdown", {}) in driver.calls


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_process_cleanly(tmp_path, plugin_dir, signum):
    """`devicehost run` exits 0 on SIGTERM/SIGINT within 5 s and removes its socket."""
    with KubeletStandIn(plugin_dir, start=True) as kubelet:
        process = run_scripted(tmp_path, plugin_dir, RES, 1)
        try:
            kubelet.wait_registered(RES, timeout=20)
            process.send_signal(signum)
            assert process.wait(timeout=5) == 0
        finally:
            process.kill()
        assert not (plugin_dir / SOCKET).exists()
        assert b"stopped" in process.stderr.read()


def inotify_descriptors() -> int:
    """inotify descriptors open in this process (the host's watcher runs in it)."""
    fds = os.listdir("/proc/self/fd")
    return sum(
        1
        for fd in fds
        if os.path.exists(f"/proc/self/fd/{fd}")
        and os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
    )


def test_plugin_dir_replaced_by_a_file_then_restored(install, host_config, kubelet, caplog):
    """The plugin directory removed and replaced by a file, then a directory again with the
    kubelet back: the host says it cannot watch it, re-registers once it is back, keeps
    watching the new directory with inotify (a later kubelet restart is noticed with the
    safety poll set to an hour), locks the new directory against a second host, and stops
    cleanly with no inotify descriptor left open."""
    caplog.set_level(logging.INFO, logger="devicehost")
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    before = inotify_descriptors()
    thread = HostThread(host_config, enabled_drivers=("alpha",), drivers={"alpha": section()})
    thread.host.face.watcher.safety_interval = 3600.0  # only inotify can notice a restart
    plugin_dir = kubelet.plugin_dir
    with thread:
        kubelet.wait_registered(RES)
        eventually(lambda: thread.host.face.watcher.mode == "inotify")  # once registered
        kubelet.stop()
        eventually(lambda: _emptied_and_removed(plugin_dir))
        plugin_dir.write_text("not a directory")
        eventually(lambda: any("cannot watch" in r.getMessage() for r in caplog.records))

        plugin_dir.unlink()
        plugin_dir.mkdir()
        kubelet.start()
        kubelet.wait_registered(RES, count=2)
        kubelet.wait_devices(RES, lambda d: len(d) == 2)
        assert kubelet.allocate(RES, [["dev-0"]])
        eventually(
            lambda: any(
                "watching" in r.getMessage() and "again" in r.getMessage() for r in caplog.records
            )
        )

        kubelet.restart()  # noticed by the new directory's watch
        kubelet.wait_registered(RES, count=3)
        kubelet.wait_devices(RES, lambda d: len(d) == 2)
        # The new directory is locked too: a second host still refuses to start.
        with pytest.raises(PluginDirInUse, match="another devicehost already serves"):
            HostThread(host_config, enabled_drivers=("alpha",)).start()
    assert any(r.getMessage() == "stopped" for r in caplog.records)
    assert inotify_descriptors() == before


def _emptied_and_removed(directory: Path) -> bool:
    """One try at removing a directory a host serves in: it puts a fresh socket back as soon
    as it sees its socket gone, possibly between the unlinks and the ``rmdir``."""
    for entry in directory.iterdir():
        entry.unlink(missing_ok=True)
    try:
        directory.rmdir()
    except OSError as exc:
        if exc.errno != errno.ENOTEMPTY:
            raise
        return False
    return True


def test_a_second_devicehost_on_the_same_plugin_dir_refuses_to_start(tmp_path, plugin_dir, kubelet):
    """A second `devicehost run` on a plugin directory already served exits 2 with one line
    saying so, instead of deleting the first one's sockets; the first one serves on."""
    first = run_scripted(tmp_path, plugin_dir, RES, 2)
    second = None
    try:
        kubelet.wait_registered(RES, timeout=20)
        second = run_scripted(tmp_path, plugin_dir, RES, 2)
        _, stderr = second.communicate(timeout=30)
        assert second.returncode == 2
        assert f"another devicehost already serves {plugin_dir}" in stderr.decode()
        assert "Traceback" not in stderr.decode()
        assert kubelet.registration_count(RES) == 1
        assert kubelet.allocate(RES, [["dev-1"]])
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


def sim_trees(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("devicehost-sim-*"))


def test_simulated_tree_is_removed_on_exit_and_a_crashed_runs_is_swept(
    tmp_path, plugin_dir, kubelet
):
    """`devicehost run --simulate` builds its hardware tree in the temp directory: a run
    killed with SIGKILL leaves it behind, the next run removes it at start, and a run
    stopped by SIGTERM removes its own."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {"TMPDIR": str(tmp)}
    first = run_scripted(tmp_path, plugin_dir, RES, 2, extra_args=["--simulate"], env=env)
    second = None
    try:
        kubelet.wait_registered(RES, timeout=20)
        [crashed] = sim_trees(tmp)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        assert crashed.is_dir()  # nothing could clean up

        second = run_scripted(tmp_path, plugin_dir, RES, 2, extra_args=["--simulate"], env=env)
        kubelet.wait_registered(RES, count=2, timeout=20)
        [fresh] = sim_trees(tmp)
        assert fresh != crashed
        terminate(second, timeout=10)
        assert sim_trees(tmp) == []
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


def test_a_simulated_run_that_fails_at_start_leaves_no_tree(tmp_path, plugin_dir):
    """The simulated tree is made before the drivers are listed (the zygote's workers
    build in it): a run that then stops on a config error removes it too."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    run = run_scripted(
        tmp_path,
        plugin_dir,
        RES,
        2,
        extra_args=["--simulate", "--drivers", "alpah"],
        env={"TMPDIR": str(tmp)},
    )
    _, stderr = run.communicate(timeout=30)
    assert run.returncode == 2, stderr.decode()
    assert "no installed driver is named 'alpah'" in stderr.decode()
    assert sim_trees(tmp) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_sigterm_early_in_start_up_exits_0_and_leaves_nothing(tmp_path, plugin_dir, signum):
    """SIGTERM or SIGINT (Ctrl-C) as the simulated tree has just been made (before the
    zygote is forked and long before the host's loop handles signals): the run exits 0,
    not by the signal's default action or 130, without a traceback, and removes the tree."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    run = run_scripted(
        tmp_path, plugin_dir, RES, 2, extra_args=["--simulate"], env={"TMPDIR": str(tmp)}
    )
    try:
        eventually(lambda: sim_trees(tmp) or run.poll() is not None, timeout=30)
        assert sim_trees(tmp), "the run ended before it made its tree"
        run.send_signal(signum)
        # Honoured, not left for the end of the imports: the exit status and the removed tree
        # show it; how fast is make bench's stop_time (a busy machine may take seconds here).
        _, stderr = run.communicate(timeout=UNHURRIED_SECONDS)
        assert run.returncode == 0, stderr.decode()
        assert "Traceback" not in stderr.decode()
        assert sim_trees(tmp) == []
    finally:
        reap(run)


def test_simulated_trees_go_to_memory_unless_tmpdir_says_otherwise(tmp_path, monkeypatch):
    """A simulated node is hundreds of small files: they go to /dev/shm when it is
    writable, and to $TMPDIR whenever that is set."""
    from devicehost.simulation.trees import SHARED_MEMORY_DIR, simulation_dir

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert simulation_dir() == tmp_path
    monkeypatch.delenv("TMPDIR")
    if not os.access(SHARED_MEMORY_DIR, os.W_OK | os.X_OK):
        pytest.skip(f"{SHARED_MEMORY_DIR} is not writable here")
    assert simulation_dir() == Path(SHARED_MEMORY_DIR)


@pytest.mark.parametrize("use_inotify", [True, False])
def test_the_restart_watch_wakes_every_subscriber_as_it_starts(tmp_path, use_inotify):
    """The host starts its restart watch only once its first registrations are through:
    what changed in the plugin directory before then is checked as the watch starts, as
    every subscriber is woken then (inotify or polling)."""
    import asyncio

    from devicehost.kubelet.deviceplugin.restart_watch import DirectoryWatcher

    async def scenario() -> tuple[bool, bool, str]:
        watcher = DirectoryWatcher(tmp_path / "device-plugins", safety_interval=3600.0)
        early = watcher.subscribe()
        try:
            before = early.is_set()
            watcher.start(use_inotify)
            return before, early.is_set(), watcher.mode
        finally:
            await watcher.close()

    before, after, mode = asyncio.run(scenario())
    assert (before, after) == (False, True)
    assert mode == ("inotify" if use_inotify else "polling")
