"""pytest fixtures for driver authors (loaded automatically through the ``pytest11`` entry
point once devicehost is installed).

- ``fake_root``: a ``FakeRoot`` in a fresh temp directory.
- ``plugin_dir``: a short, fresh device-plugin directory (unix socket paths must stay
  under 108 bytes, which pytest's own temp paths can exceed).
- ``kubelet``: a started ``KubeletStandIn`` on ``plugin_dir``.
- ``host_config``: a ``HostConfig`` pointing at ``plugin_dir`` and ``fake_root``, with
  metrics and pod resources off.
- ``run_host``: ``run_host(**overrides) -> HostThread`` starts a host in a thread on
  ``host_config`` with ``overrides`` keyed as in the YAML file (docs/configuration.md):
  ``run_host(enabledDrivers=["mine"], simulate=True, drivers={"mine": {"count": 2}})``.
  It is stopped after the test.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devicehost.config.host_config import HostConfig
from devicehost.testing.fakeroot import FakeRoot
from devicehost.testing.hostthread import HostThread
from devicehost.testing.kubelet import KubeletStandIn


@pytest.fixture
def fake_root(tmp_path: Path) -> FakeRoot:
    return FakeRoot(tmp_path / "root")


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="dh-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kubelet(plugin_dir: Path) -> Iterator[KubeletStandIn]:
    with KubeletStandIn(plugin_dir, start=True) as stand_in:
        yield stand_in


@pytest.fixture
def host_config(plugin_dir: Path, fake_root: FakeRoot) -> HostConfig:
    return HostConfig(
        plugin_dir=plugin_dir,
        root=fake_root.path,
        pod_resources_socket=None,
        metrics_address="",
        scan_interval=10.0,
        watched_scan_interval=10.0,
        hook_timeout=2.0,
        initial_backoff=0.05,
        max_backoff=0.5,
        rejected_backoff=0.5,
    )


@pytest.fixture
def run_host(host_config: HostConfig) -> Iterator[Callable[..., HostThread]]:
    started: list[HostThread] = []

    def start(**overrides: Any) -> HostThread:
        thread = HostThread(host_config, **overrides)
        started.append(thread)
        return thread.start()

    yield start
    for thread in started:
        thread.stop()
