"""Resources that change at runtime (issue: a second stranger's driver, item 5): the host
re-asks ``devicehost_resources`` on each safety scan and at once when the driver calls
``devicehost.resources_changed()``, serving a new name and withdrawing one that went; a
driver that was unavailable at start is tried again, so VFs a provisioning step creates
after devicehost started are found without a restart."""

from __future__ import annotations

import json
from pathlib import Path

import devicehost
from devicehost.drivers.discovery import DriverStatus
from devicehost.testing import HostThread
from support import eventually

CY, DC = "qat.example/cy", "qat.example/dc"
LONG = 3600.0


def write(path: Path, names: list[str]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(names))
    tmp.replace(path)


def start(install, run_host, tmp_path, names, signal=False, **config) -> tuple[HostThread, Path]:
    install("devicehost-changing", drivers={"changing": "testdrivers.changing:Changing"})
    listing = tmp_path / "resources.json"
    if names is not None:
        write(listing, names)
    host = run_host(
        enabled_drivers=("changing",),
        drivers={"changing": {"resourcesFile": str(listing), "signal": signal}},
        **config,
    )
    return host, listing


def test_a_resource_the_driver_adds_is_served_at_the_next_safety_scan(
    install, run_host, kubelet, tmp_path
):
    _, listing = start(install, run_host, tmp_path, [CY], scan_interval=0.2)
    kubelet.wait_devices(CY, lambda d: len(d) == 2)
    write(listing, [CY, DC])
    kubelet.wait_devices(DC, lambda d: set(d) == {"dc-0", "dc-1"})


def test_a_resource_the_driver_drops_is_withdrawn_and_its_socket_removed(
    install, run_host, kubelet, tmp_path, plugin_dir
):
    host, listing = start(install, run_host, tmp_path, [CY, DC], scan_interval=0.2)
    kubelet.wait_registered(DC)
    socket = plugin_dir / host.host.resources[DC].spec.socket_name
    assert socket.exists()
    write(listing, [CY])
    eventually(lambda: DC not in host.host.resources and not socket.exists())
    assert CY in host.host.resources


def test_resources_changed_is_acted_on_at_once_not_at_the_next_scan(
    install, run_host, kubelet, tmp_path
):
    """With scans an hour apart, the driver's own signal is what brings the new name."""
    host, listing = start(
        install, run_host, tmp_path, [CY], signal=True, scan_interval=LONG,
        watched_scan_interval=LONG,
    )  # fmt: skip
    kubelet.wait_registered(CY)
    write(listing, [DC])
    kubelet.wait_devices(DC, lambda d: len(d) == 2)
    eventually(lambda: CY not in host.host.resources)


def test_a_driver_unavailable_at_start_is_tried_again_and_serves_when_its_hardware_appears(
    install, run_host, kubelet, tmp_path
):
    host, listing = start(install, run_host, tmp_path, None, unavailable_retry_interval=0.2)
    info = host.host.drivers["changing"].info
    assert info.status is DriverStatus.UNAVAILABLE
    assert "no VFs yet" in info.reason
    write(listing, [CY])
    kubelet.wait_devices(CY, lambda d: len(d) == 2)
    assert info.status is DriverStatus.ACTIVE
    assert info.restarts == 0, "trying again is not a restart"


def test_resources_changed_outside_a_worker_does_nothing():
    """Called in a driver's own unit test (no host), the signal is a no-op, not an error."""
    devicehost.resources_changed()
