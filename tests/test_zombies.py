"""A driver that never reaps its finished children: the zombies are counted, and past the
bound the worker is restarted, which reaps them (a real worker process; the scripted
driver forks the children at configure and never waits for them)."""

from __future__ import annotations

import logging
import re

import pytest

from support import SCRIPTED, eventually

#: Every test here ends with the stop check (tests/conftest.py, run_host).
pytestmark = pytest.mark.faults

RES = "test.example/dev"


def zombies_metric(host) -> float | None:  # type: ignore[no-untyped-def]
    text = host.call(host.host.telemetry.metrics.render)
    match = re.search(r'^devicehost_driver_zombies\{driver="alpha"\} (\S+)$', text, re.M)
    return float(match.group(1)) if match else None


def test_a_worker_s_zombies_are_counted(install, run_host, kubelet):
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    host = run_host(
        enabledDrivers=["alpha"], drivers={"alpha": {"resources": {RES: 2}, "zombies": 5}}
    )
    kubelet.wait_registered(RES)
    eventually(lambda: zombies_metric(host) == 5.0, timeout=60)


def test_a_worker_past_the_zombie_bound_is_restarted_saying_why(install, run_host, kubelet, caplog):
    caplog.set_level(logging.ERROR, logger="devicehost")
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    host = run_host(
        enabledDrivers=["alpha"],
        drivers={"alpha": {"resources": {RES: 2}, "zombies": 5}},
        limits={"zombiesPerDriver": 3},
    )
    kubelet.wait_registered(RES)
    eventually(lambda: host.host.drivers["alpha"].info.restarts >= 1, timeout=60)
    assert any(
        "left 5 finished child processes unreaped (zombies), over the bound of 3" in r.message
        for r in caplog.records
    ), [r.message for r in caplog.records]
