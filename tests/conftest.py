"""Host test helpers: install test drivers as real distributions with real entry points.

``install(...)`` writes ``<dist>-1.0.dist-info`` directories (METADATA and
entry_points.txt, as pip would) into a fresh site directory at the front of ``sys.path``,
so ``importlib.metadata`` discovers them exactly as it discovers pip-installed drivers.
The fixtures of the shipped testing kit (``kubelet``, ``run_host``, ``fake_root``, …)
come from the ``pytest11`` entry point.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devicehost.config.host_config import HostConfig
from devicehost.testing import HostThread
from devicehost.testing.distributions import write_distribution

TESTS = Path(__file__).parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from dra_node import api_server, dra_node  # noqa: E402, F401 (fixtures of the DRA tests)

from support import stop_and_check  # noqa: E402

Install = Callable[..., None]


@pytest.fixture(autouse=True)
def _logging_left_as_found() -> Iterator[None]:
    """``devicehost.cli.main.main`` run in a test sets up logging as the daemon does: a handler
    on this test's captured stderr, and levels. Take them away again, so no later test logs
    into a closed stream ("--- Logging error ---")."""
    root, ours = logging.getLogger(), logging.getLogger("devicehost")
    levels = root.level, ours.level
    yield
    for handler in list(root.handlers):
        if type(handler) is logging.StreamHandler:  # pytest's own are subclasses
            root.removeHandler(handler)
    root.setLevel(levels[0])
    ours.setLevel(levels[1])


@pytest.fixture
def run_host(
    host_config: HostConfig, request: pytest.FixtureRequest
) -> Iterator[Callable[..., HostThread]]:
    """The kit's ``run_host``; in a module marked ``faults`` every test ends with the stop
    check (``support.stop_and_check``): its hosts stop within 2 s and leave no socket, CDI
    spec or helper process — whatever fault the test put them through."""
    started: list[HostThread] = []

    def start(**overrides: object) -> HostThread:
        thread = HostThread(host_config, **overrides)
        started.append(thread)
        return thread.start()

    yield start
    if request.node.get_closest_marker("faults") is not None:
        stop_and_check(started)
    for thread in started:
        thread.stop()


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Install:
    """``install(dist, drivers={name: target}, policies={name: target})``."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))

    def add(
        dist: str, drivers: dict[str, str] | None = None, policies: dict[str, str] | None = None
    ) -> None:
        groups = {}
        if drivers:
            groups["devicehost.drivers"] = drivers
        if policies:
            groups["devicehost.policies"] = policies
        write_distribution(site, dist, groups)

    return add
