"""The demo's tour (``devicehost.cli.demo.Tour``) against a real host and kubelet stand-in."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from devicehost.cli.demo import Tour
from devicehost.config.host_config import HostConfig
from devicehost.testing.hostthread import HostThread
from devicehost.testing.kubelet import KubeletStandIn, _Registration
from devicehost.testing.podresources import PodResourcesStandIn

#: How long the stand-in holds its answer to a Register it has already counted.
ANSWER_DELAY_SECONDS = 0.5


def counted(host: HostThread, resource: str) -> float:
    """The host's devicehost_registrations_total{result="ok"} for ``resource``."""
    registrations = host.host.telemetry.metrics.registrations
    return float(host.call(lambda: registrations.value(resource=resource, result="ok")))


def test_the_restart_step_ends_once_the_host_counted_every_registration(
    tmp_path: Path, plugin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the tour's kubelet-restart step the host's registrations metric counts every
    registration the stand-in accepted, even when the kubelet's answer reaches the host
    late: the metrics step that follows never shows a count without the last one."""
    accept = _Registration.Register

    async def answer_late(self: _Registration, request: Any, context: Any) -> Any:
        answer = await accept(self, request, context)  # counted by the stand-in here
        await asyncio.sleep(ANSWER_DELAY_SECONDS)
        return answer

    monkeypatch.setattr(_Registration, "Register", answer_late)
    with (
        PodResourcesStandIn(tmp_path / "pod-resources.sock") as pods,
        KubeletStandIn(plugin_dir, start=True) as kubelet,
    ):
        config = HostConfig(
            plugin_dir=plugin_dir,
            root=tmp_path,
            simulate=True,
            enabled_drivers=("template",),
            metrics_address="",
            pod_resources_socket=pods.socket,
        )
        host = HostThread(config).start()
        try:
            tour = Tour(host, kubelet, pods)
            assert tour.resources
            for name in tour.resources:  # the first registration, answered and counted
                kubelet.wait_registered(name)
                deadline = time.monotonic() + 60
                while counted(host, name) < 1 and time.monotonic() < deadline:
                    time.sleep(0.05)
            tour.kubelet_restart()
            for name in tour.resources:
                assert counted(host, name) == kubelet.registration_count(name) == 2, name
        finally:
            host.stop()
