"""The driver passes the conformance battery and serves through a real host.

The kit's fixtures (``fake_root``, ``kubelet``, ``run_host``) come with devicehost
(its pytest plugin); ``run_host`` takes HostConfig keys as in the YAML file.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from devicehost_template import driver
from devicehost_template.driver import MACHINE, MACHINE_WIDGETS, NAME, RESOURCE, VISIBLE

from devicehost import Health
from devicehost.testing import ConformanceError, FakeRoot, check_driver, watch_notifies


def test_conformance_on_simulated_node(fake_root: FakeRoot) -> None:
    """Four simulated widgets enumerate, all healthy, and each allocates alone."""
    report = check_driver(NAME, fake_root, simulated=True)
    assert report.devices == {RESOURCE: 4}
    assert report.healthy == {RESOURCE: 4}


def test_simulated_count_shapes_the_simulated_node(fake_root: FakeRoot) -> None:
    """The simulation follows the driver's config section: simulatedCount widgets."""
    report = check_driver(NAME, fake_root, config={"simulatedCount": 2}, simulated=True)
    assert report.devices == {RESOURCE: 2}


def test_own_machine_is_built_by_name(fake_root: FakeRoot) -> None:
    """``--node`` naming this driver's own machine builds its widgets."""
    report = check_driver(NAME, fake_root, simulated=True, node=MACHINE)
    assert report.devices == {RESOURCE: MACHINE_WIDGETS}


def test_another_machine_gets_widgets_only_when_the_config_asks(fake_root: FakeRoot) -> None:
    """A published machine without widgets gets none, unless simulatedCount asks for
    them: a test cluster simulating a known machine plus this driver's widgets."""
    assert check_driver(NAME, fake_root, simulated=True, node="dgx-h100").devices == {}
    report = check_driver(
        NAME, fake_root, config={"simulatedCount": 2}, simulated=True, node="dgx-h100"
    )
    assert report.devices == {RESOURCE: 2}


def test_bad_config_is_refused_naming_the_key(fake_root: FakeRoot) -> None:
    """A bad simulatedCount is refused with the key named."""
    with pytest.raises(ConformanceError, match="simulatedCount: expected an integer"):
        check_driver(NAME, fake_root, config={"simulatedCount": "many"}, simulated=True)


def test_no_widgets_means_no_resource(kubelet, run_host) -> None:
    """On a node without /dev/widget*, the driver serves nothing and nothing registers."""
    host = run_host(enabledDrivers=[NAME])
    assert host.host.resources == {}
    assert kubelet.registrations == []


def test_allocation_gives_device_nodes_and_joined_env(kubelet, run_host) -> None:
    """Two widgets in one container: both device nodes, and their names joined in order.
    Simulated, the host paths are in the driver's simulated tree, where the nodes are."""
    host = run_host(enabledDrivers=[NAME], simulate=True)
    tree = str(host.simulated_root(NAME).path)
    kubelet.wait_devices(RESOURCE, lambda d: len(d) == 4)
    (container,) = kubelet.allocate(RESOURCE, [["widget3", "widget1"]])
    assert container.envs[VISIBLE] == "widget3,widget1"
    assert [(d.host_path, d.container_path) for d in container.devices] == [
        (tree + "/dev/widget3", "/dev/widget3"),
        (tree + "/dev/widget1", "/dev/widget1"),
    ]


def test_fault_reaches_kubelet_and_recovers(kubelet, run_host) -> None:
    """A widget's health file flipping is streamed both ways through ListAndWatch."""
    host = run_host(enabledDrivers=[NAME], simulate=True)
    widgets = host.simulated_root(NAME)
    devices = kubelet.wait_devices(RESOURCE, lambda d: len(d) == 4)
    assert devices["widget3"].numa_nodes == (1,)
    widgets.write("/sys/class/widget/widget2/health", "fault")
    kubelet.wait_health(RESOURCE, "widget2", Health.UNHEALTHY)
    widgets.write("/sys/class/widget/widget2/health", "ok")
    kubelet.wait_health(RESOURCE, "widget2", Health.HEALTHY)


def test_widgets_carry_their_product_name(kubelet, run_host) -> None:
    """Each widget's attributes (its product name, for DRA claims to select it by) reach
    the host checked, alongside its ID and health."""
    host = run_host(enabledDrivers=[NAME], simulate=True)
    kubelet.wait_devices(RESOURCE, lambda devices: len(devices) == 4)
    devices = host.call(lambda: dict(host.host.resources[RESOURCE].state.devices))
    assert {d.attributes.product for d in devices.values()} == {"Example Widget 2000"}


def test_watch_notifies_when_what_the_kubelet_was_told_no_longer_holds(
    fake_root: FakeRoot,
) -> None:
    """The flip-and-revert: an enumeration caught widget1 faulty and the fault cleared
    before the watch looked again. The watch compares the files with what was enumerated
    (not with its own last look), so it notifies, and the host enumerates Healthy again;
    while they agree it stays quiet."""
    driver.devicehost_simulate(root=fake_root.path, config={}, node="")
    driver.devicehost_configure(config={}, root=fake_root.path)
    now = list(driver.devicehost_enumerate(resource=RESOURCE))
    told = [replace(d, health=Health.UNHEALTHY) if d.id == "widget1" else d for d in now]
    assert watch_notifies(driver, RESOURCE, told)
    assert not watch_notifies(driver, RESOURCE, now, timeout=0.5)
