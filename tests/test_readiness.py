"""/readyz says whether the host serves what it should: not Ready while a driver that
should serve has been down past its first restarts (with the reason), Ready again once it
serves, and Ready on a node whose drivers legitimately find nothing."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from devicehost.drivers.running import NOT_READY_AFTER_RUNS
from support import eventually

RES_A = "test.example/a"
RES_B = "test.example/b"
START_FAILS = "testdrivers.start_fails:StartFails"


def get(host, path):
    url = f"http://127.0.0.1:{host.host.status_server.port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def readyz(host):
    return get(host, "/readyz")


def counter(host, name, **labels):
    """One sample of /metrics, as Prometheus scrapes it (0 when absent)."""
    for family in text_string_to_metric_families(get(host, "/metrics")[1]):
        for found in family.samples:
            if found.name == name and found.labels == labels:
                return found.value
    return 0


def test_not_ready_while_every_worker_fails_to_start_and_ready_once_they_serve(
    tmp_path, monkeypatch, install, run_host, kubelet
):
    """Every driver's worker dies as it starts: /readyz fails once each has gone down
    NOT_READY_AFTER_RUNS times in a row, naming each driver with the reason `devicehost
    drivers` shows; start failures are counted; once the workers can start again the
    drivers serve and /readyz is 200."""
    marker = tmp_path / "fail"
    marker.write_text("")
    monkeypatch.setenv("DEVICEHOST_TEST_START_FAILS", str(marker))
    install("devicehost-failing", drivers={"alpha": START_FAILS, "beta": START_FAILS})
    host = run_host(
        enabled_drivers=("alpha", "beta"),
        metrics_address="127.0.0.1:0",
        drivers={"alpha": {"resources": {RES_A: 1}}, "beta": {"resources": {RES_B: 1}}},
    )

    def both_named():
        status, body = readyz(host)
        return status == 503 and "'alpha'" in body and "'beta'" in body

    eventually(both_named, timeout=60)
    _, body = readyz(host)
    for name in ("alpha", "beta"):
        handle = host.host.drivers[name]
        assert handle.runs_down >= NOT_READY_AFTER_RUNS
        assert handle.info.reason in body, body  # what `devicehost drivers` prints
        assert (
            counter(host, "devicehost_driver_start_failures_total", driver=name)
            >= NOT_READY_AFTER_RUNS
        )
    assert "failing on purpose" in body, body  # the worker's last output

    marker.unlink()
    kubelet.wait_registered(RES_A, timeout=60)
    kubelet.wait_registered(RES_B, timeout=60)
    eventually(lambda: readyz(host) == (200, "ok\n"), timeout=30)


def test_ready_when_the_drivers_find_no_hardware(install, run_host):
    """A driver that finds no hardware here (unavailable) is no reason for not Ready: the
    node simply has none of that vendor's devices."""
    install("devicehost-absent", drivers={"absent": "testdrivers.author_kit:Absent"})
    host = run_host(enabled_drivers=("absent",), metrics_address="127.0.0.1:0")
    eventually(lambda: str(host.host.drivers["absent"].info.status) == "unavailable")
    assert readyz(host) == (200, "ok\n")
    assert counter(host, "devicehost_driver_start_failures_total", driver="absent") == 0
