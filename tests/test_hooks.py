"""One test (at least) per hook, through a real host and the kubelet stand-in.

tests/test_docs.py fails when a hook in devicehost.hookspecs has no ``test_<hook>_…`` here.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from devicehost import Device
from devicehost.drivers.discovery import DriverStatus
from support import SCRIPTED, eventually
from support import scripted as scripted_control

RES = "test.example/dev"
BETA = "test.example/beta"


@pytest.fixture
def alpha(install, run_host, kubelet):
    def start(section=None, target=SCRIPTED, **overrides):
        install("devicehost-alpha", drivers={"alpha": target})
        section = {"resources": {RES: 2}} if section is None else section
        host = run_host(enabled_drivers=("alpha",), drivers={"alpha": section}, **overrides)
        return host

    return start


def info(host, name="alpha"):
    return next(i for i in host.host.plugins.infos if i.name == name)


def plugin(host):
    return scripted_control(host, RES)


def test_simulate_builds_hardware_before_configure(alpha, kubelet):
    """Under simulate, the driver builds its node under the root first, then serves it."""
    host = alpha(target="testdrivers.scripted:Simulating", simulate=True)
    kubelet.wait_devices("test.example/sim", lambda d: len(d) == 2)
    calls = [c[0] for c in scripted_control(host, "test.example/sim").calls]
    assert calls.index("devicehost_simulate") < calls.index("devicehost_configure")


DOWN = (DriverStatus.RESTARTING, DriverStatus.CRASH_LOOPING)


def test_simulate_failure_puts_only_that_driver_down(install, run_host, kubelet):
    """A driver whose simulation cannot be built is down (and retried) with the reason;
    the others still serve."""
    install("devicehost-broken", drivers={"broken": "testdrivers.scripted:BrokenSimulation"})
    install("devicehost-sim", drivers={"sim": "testdrivers.scripted:Simulating"})
    host = run_host(enabled_drivers=("broken", "sim"), simulate=True)
    assert info(host, "broken").status in DOWN
    assert "OSError: cannot build the simulated node" in info(host, "broken").reason
    kubelet.wait_devices("test.example/sim", lambda d: len(d) == 2)


def test_configure_receives_its_section_and_root(alpha, host_config):
    """configure gets the driver's own config section and the host root."""
    host = alpha({"resources": {RES: 1}, "prefix": "p"})
    configure = next(c for c in plugin(host).calls if c[0] == "devicehost_configure")
    assert configure[1]["config"] == {"resources": {RES: 1}, "prefix": "p"}
    # The scripted driver keeps its control tree under the root it was given.
    assert plugin(host).dir.parent.parent == host_config.root


def test_configure_value_error_fails_that_driver_naming_the_key(install, run_host, kubelet):
    """A driver rejecting its section is failed with its key path; the others serve."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    install("devicehost-beta", drivers={"beta": SCRIPTED})
    host = run_host(
        enabled_drivers=("alpha", "beta"),
        drivers={"alpha": {"resources": {RES: "many"}}, "beta": {"resources": {BETA: 1}}},
    )
    assert info(host).status is DriverStatus.FAILED
    assert info(host).reason == (
        "config drivers.alpha: resources.test.example/dev: expected a device count, got 'many'"
    )
    kubelet.wait_devices(BETA, lambda d: len(d) == 1)


def test_resources_empty_means_nothing_served(alpha, kubelet):
    """A driver with no resources on this node registers nothing and stays active."""
    host = alpha({"resources": {}})
    assert host.host.resources == {}
    assert info(host).status is DriverStatus.ACTIVE
    assert kubelet.registrations == []


def test_resources_raising_puts_driver_down_and_host_serves_on(alpha, install, kubelet):
    """A driver raising in resources is down (retried) with its message; the host runs."""
    host = alpha({"resources": {RES: 1}, "raise": ["devicehost_resources"]})
    assert info(host).status in DOWN
    assert (
        info(host).reason
        == "driver 'alpha', hook devicehost_resources: RuntimeError: scripted failure"
    )


def test_notes_reach_the_driver_info(alpha):
    """Notes a driver returns are kept for `devicehost drivers` and `devices`."""
    host = alpha()
    assert info(host).notes == ["scripted with 2 devices"]


def test_enumerate_failure_marks_unhealthy_then_recovers(alpha, kubelet):
    """While enumerate raises, the devices are Unhealthy; once it works again, Healthy."""
    host = alpha()
    kubelet.wait_devices(RES, lambda d: len(d) == 2)
    driver = plugin(host)
    driver.misbehave(raising=["devicehost_enumerate"])
    driver.changed(RES)
    kubelet.wait_devices(RES, lambda d: {x.health for x in d.values()} == {"Unhealthy"})
    driver.misbehave()
    driver.changed(RES)
    kubelet.wait_devices(RES, lambda d: {x.health for x in d.values()} == {"Healthy"})


def test_watch_notify_rescans_at_once(alpha, kubelet):
    """notify() from watch re-enumerates immediately (the scan interval is an hour here)."""
    host = alpha(scan_interval=3600)
    kubelet.wait_devices(RES, lambda d: len(d) == 2)
    eventually(lambda: any(c[0] == "devicehost_enumerate" for c in plugin(host).calls))
    # The hardware changes; the driver's watch sees it and calls notify().
    plugin(host).set_devices(RES, [Device(id="dev-0"), Device(id="dev-1"), Device(id="dev-9")])
    kubelet.wait_devices(RES, lambda d: "dev-9" in d)


def test_enumerate_interval_is_longer_for_a_driver_that_watches(install, run_host, kubelet):
    """A driver with a watch hook is re-enumerated on watchedScanIntervalSeconds (a safety
    net); one without it on scanIntervalSeconds."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    install("devicehost-plain", drivers={"plain": "testdrivers.scripted:WithoutWatch"})
    host = run_host(
        enabled_drivers=("alpha", "plain"),
        drivers={"alpha": {"resources": {RES: 1}}, "plain": {"resources": {BETA: 1}}},
        scan_interval=0.05,
        watched_scan_interval=3600.0,
    )
    kubelet.wait_registered(RES)
    kubelet.wait_registered(BETA)
    watching, plain = scripted_control(host, RES), scripted_control(host, BETA)

    def enumerations(control):
        return sum(call[0] == "devicehost_enumerate" for call in control.calls)

    eventually(lambda: enumerations(plain) >= 10, timeout=10)
    # The watching driver: its first snapshot and the scan as its watch started, no more.
    assert enumerations(watching) <= 2


def test_watch_start_is_followed_by_a_scan_so_no_change_is_missed(alpha, kubelet):
    """A change between the host's first scan and the start of the driver's watch reaches
    the kubelet without a notify and long before the next interval scan: the host
    enumerates again as each watch starts."""
    alpha(target="testdrivers.scripted:ChangesBeforeItsWatch", scan_interval=3600.0)
    assert sorted(kubelet.wait_devices(RES, lambda d: len(d) == 2)) == ["dev-0", "dev-1"]


def test_preferred_allocation_invalid_answer_falls_back_to_default(alpha, kubelet):
    """A driver choice with the wrong size is replaced by the host's NUMA-packing default."""
    alpha({"resources": {RES: 4}}, target="testdrivers.scripted:Misbehaving")
    kubelet.wait_registered(RES)
    chosen = kubelet.preferred_allocation(RES, ["dev-0", "dev-1", "dev-2", "dev-3"], [], 2)
    assert chosen == ["dev-0", "dev-2"]


def test_preferred_allocation_from_driver_is_returned(alpha, kubelet):
    """A valid driver choice is what the kubelet receives."""
    alpha({"resources": {RES: 4}}, target="testdrivers.scripted:ScriptedWithPreStart")
    kubelet.wait_registered(RES)
    chosen = kubelet.preferred_allocation(RES, ["dev-0", "dev-1", "dev-2", "dev-3"], [], 3)
    assert chosen == ["dev-3", "dev-2", "dev-1"]


def test_allocate_returning_wrong_type_is_internal(alpha, kubelet):
    """An allocate hook returning something other than an Allocation gives INTERNAL."""
    alpha(target="testdrivers.scripted:Misbehaving")
    kubelet.wait_registered(RES)
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(RES, [["dev-0"]])
    assert refused.value.code() == grpc.StatusCode.INTERNAL
    assert refused.value.details() == (
        "driver 'alpha', hook devicehost_allocate: returned an invalid Allocation: "
        "env 'X' has value 1, expected a string"
    )


def test_allocate_unknown_device_from_the_driver_is_invalid_argument(install, run_host, kubelet):
    """A driver's UnknownDevice (a device gone since the host's snapshot) reaches the kubelet
    as INVALID_ARGUMENT naming the driver and the ID, not as a driver fault (INTERNAL)."""
    install(
        "devicehost-vanishing", drivers={"vanishing": "testdrivers.conformance_cases:Vanishing"}
    )
    run_host(enabled_drivers=("vanishing",))
    kubelet.wait_devices("conformance.example/widget", lambda d: len(d) == 2)
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate("conformance.example/widget", [["w1"]])
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details() == (
        "driver 'vanishing': unknown device ID 'w1' for resource 'conformance.example/widget'"
    )
    assert kubelet.allocate("conformance.example/widget", [["w0"]])[0].envs == {"WIDGET": "w0"}


def test_pre_start_failure_is_internal_with_message(alpha, kubelet):
    """A pre_start hook that raises fails PreStartContainer with the driver's message."""
    alpha(
        {"resources": {RES: 2}, "raise": ["devicehost_pre_start"]},
        target="testdrivers.scripted:ScriptedWithPreStart",
    )
    kubelet.wait_registered(RES)
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.pre_start(RES, ["dev-0"])
    assert refused.value.code() == grpc.StatusCode.INTERNAL
    assert "hook devicehost_pre_start: RuntimeError: scripted failure" in refused.value.details()


def test_simulate_health_flows_to_the_kubelet(alpha, kubelet):
    """simulate_health changes the simulated hardware and the kubelet hears it."""
    host = alpha()
    kubelet.wait_devices(RES, lambda d: len(d) == 2)
    driver = host.host.resources[RES].driver
    applied = host.run(
        driver.acall(
            "devicehost_simulate_health", 5.0, resource=RES, device_id="dev-1", healthy=False
        )
    )
    assert applied is True
    kubelet.wait_health(RES, "dev-1", "Unhealthy")


def test_shutdown_called_once_even_when_another_hook_hangs(alpha, kubelet):
    """Stopping calls shutdown once, also when a driver thread is stuck in a hook."""
    host = alpha({"resources": {RES: 2}, "hang": ["devicehost_allocate"]}, hook_timeout=0.2)
    kubelet.wait_registered(RES)
    with pytest.raises(grpc.RpcError):
        kubelet.allocate(RES, [["dev-0"]])
    driver = plugin(host)
    host.stop()
    assert [c for c in driver.calls if c[0] == "devicehost_shutdown"] == [
        ("devicehost_shutdown", {})
    ]


# -- node labels and host paths -------------------------------------------------------------

LABELLED = "testdrivers.labelled:Labelled"
NFD = "devicehost.feature.node.kubernetes.io"


def feature_lines(path):
    return sorted(line for line in path.read_text().splitlines() if not line.startswith("#"))


def test_labels_land_in_the_feature_file_and_follow_device_changes(alpha, kubelet, tmp_path):
    """Valid labels are written as <namespace>/<driver>.<key>=<value>; after a scan that
    changed a device the file is rewritten; a clean stop removes it."""
    feature_file = tmp_path / "features.d" / "devicehost"
    host = alpha({"resources": {RES: 2}}, target=LABELLED, feature_file=feature_file)
    kubelet.wait_devices(RES, lambda d: len(d) == 2)
    assert feature_lines(feature_file) == [
        f"{NFD}/alpha.count=2",
        f"{NFD}/alpha.family=910B",
        f"{NFD}/alpha.present=true",
    ]
    plugin(host).set_health(RES, "dev-1", False)
    eventually(lambda: f"{NFD}/alpha.count=1" in feature_lines(feature_file))
    host.stop()
    assert not feature_file.exists()
    assert not list(feature_file.parent.iterdir())  # no temporary file left behind


def test_labels_that_break_the_rules_are_dropped_naming_the_driver(
    alpha, kubelet, tmp_path, caplog
):
    """A bad key, a bad value and a non-string value are each dropped with a log line that
    names the driver and the key; the good labels are still written."""
    feature_file = tmp_path / "features.d" / "devicehost"
    alpha({"resources": {RES: 1}}, target=LABELLED, feature_file=feature_file)
    kubelet.wait_devices(RES, lambda d: len(d) == 1)
    dropped = [r.getMessage() for r in caplog.records if "label dropped" in r.getMessage()]
    assert len(dropped) == 3
    assert all("driver 'alpha', hook devicehost_labels" in m for m in dropped)
    assert any("'Bad Key'" in m for m in dropped)
    assert any("'firmware-version'" in m for m in dropped)
    assert any("'memory-mib'" in m for m in dropped)
    assert f"{NFD}/alpha.present=true" in feature_lines(feature_file)


def test_labels_are_off_without_a_feature_file(alpha, kubelet, tmp_path):
    """With labels.featureFile empty (the default) no file is written anywhere."""
    host = alpha({"resources": {RES: 1}}, target=LABELLED)
    kubelet.wait_devices(RES, lambda d: len(d) == 1)
    assert host.host.node_labels is None


def test_host_paths_become_a_mount_plan_without_configure(install, host_config, capsys):
    """`devicehost mounts` asks drivers without configuring them: a path inside a declared
    one folds into it, a /sys class that exists only with its module loaded is mounted
    through /sys/class (which every kernel has), at_real_path mounts twice, a non-HostPath
    is dropped, and the host's own directories are listed writable."""
    import json

    from devicehost.cli.main import main

    install("devicehost-alpha", drivers={"alpha": LABELLED})
    assert main(["mounts", "--drivers", "alpha", "--output", "json"]) == 0
    plan = {m["hostPath"]: m for m in json.loads(capsys.readouterr().out)}
    assert "/sys/class/widget" not in plan
    assert plan["/sys/class"]["mountPaths"] == ["/host/sys/class"]
    assert [d["path"] for d in plan["/sys/class"]["declaredBy"]] == [
        "/sys/class/widget",
        "/sys/class/widget/widget0",
    ]
    assert plan["/opt/widget/lib"]["mountPaths"] == ["/opt/widget/lib", "/host/opt/widget/lib"]
    assert all(plan[p]["readOnly"] for p in ("/sys/class", "/opt/widget/lib"))
    assert plan["/var/lib/kubelet/device-plugins"]["readOnly"] is False
    assert "/etc/shadow" not in plan
    assert plan["/sys/class"]["declaredBy"][0]["purpose"] == "widget health (unconfigured)"


def test_the_cdi_directory_is_the_hosts_only_when_cdi_is_on():
    """cdi.dir has a default, but the host writes there (and needs it mounted writable)
    only with cdi.enabled."""
    from devicehost.config.host_config import HostConfig
    from devicehost.node.mounts import host_own_paths

    def own(config: HostConfig) -> set[str]:
        return {d.path for d in host_own_paths(config)}

    assert "/var/run/cdi" not in own(HostConfig())
    assert "/etc/cdi" in own(HostConfig(cdi_enabled=True, cdi_dir=Path("/etc/cdi")))
