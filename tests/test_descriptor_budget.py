"""Every recovery path works with the process at its descriptor limit (docs/reliability.md,
"Limits": descriptors). One `devicehost run` under a 160-descriptor limit (soft and hard)
serves a good driver (CDI on, spans exported) beside one declaring 40 resources, which
take every descriptor the budget gives them; then its limit is lowered to what it has
open plus ``HEADROOM`` (16, a quarter of the reserve the budget keeps). Then each path,
one test each: a worker restarted, every resource registered again after a
kubelet restart, a node file (the CDI spec) rewritten, the span exporter restarted. None
may meet EMFILE; the host then stops on SIGTERM with exit 0.
"""

from __future__ import annotations

import json
import os
import resource as rlimits
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devicehost import Device
from devicehost.testing import KubeletStandIn, OtlpReceiver, write_distribution
from support import SCRIPTED, ScriptedControl, descendants, eventually, reap, terminate

GOOD = "test.example/good"
LIMIT = 160
#: Descriptors left free once the budget is spent: the host's limit is then lowered to what
#: it has open plus this many (prlimit), so each recovery path must do with them. It is
#: well under the reserve of 64 the budget keeps (system/descriptors.py, RESERVE).
HEADROOM = int(os.environ.get("DEVICEHOST_TEST_FD_HEADROOM", "16"))
PACED = "testdrivers.faulty:Paced"


@dataclass
class AtTheLimit:
    process: subprocess.Popen[bytes]
    kubelet: KubeletStandIn
    receiver: OtlpReceiver
    control: ScriptedControl
    cdi_dir: Path
    log: Path

    def helper(self, name: str) -> int:
        """The pid of the host's one helper process named ``name`` (waiting while it is
        being started: a process renames itself just after its fork)."""
        found: list[int] = []

        def one() -> bool:
            found[:] = [p for p, n in descendants(self.process.pid).items() if n == name]
            return len(found) == 1

        eventually(one, 30)
        return found[0]

    def serves_good(self) -> None:
        self.kubelet.wait_devices(
            GOOD, lambda d: {x.health for x in d.values()} == {"Healthy"}, timeout=60
        )
        assert self.kubelet.allocate(GOOD, [["g-1"]])[0].cdi_devices


def settled(pid: int, kubelet: KubeletStandIn, quiet: float = 1.5) -> int:
    """The host's open descriptors once the resources it admitted have all registered and
    the count has not moved for ``quiet`` seconds (servers still binding would otherwise
    meet the lowered limit: that is start-up, not recovery)."""
    last: tuple[int, int] | None = None
    since = time.monotonic()
    deadline = since + 60
    while time.monotonic() < deadline:
        now = (len(os.listdir(f"/proc/{pid}/fd")), len(kubelet.registered()))
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return now[0]
        time.sleep(0.1)
    raise TimeoutError(f"the host's descriptors and registrations never settled: {last}")


@pytest.fixture(scope="module")
def at_the_limit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AtTheLimit]:
    tmp = tmp_path_factory.mktemp("descriptors")
    site, plugin_dir, cdi_dir = tmp / "site", tmp / "dp", tmp / "cdi"
    plugin_dir.mkdir()
    write_distribution(site, "devicehost-good", {"devicehost.drivers": {"good": SCRIPTED}})
    write_distribution(site, "devicehost-many", {"devicehost.drivers": {"many": PACED}})
    many = ", ".join(f"'test.example/many{i}': 1" for i in range(40))
    receiver = OtlpReceiver().start()
    config = tmp / "config.yaml"
    config.write_text(
        "apiVersion: devicehost/v1\nkind: HostConfig\n"
        f"cdi: {{enabled: true, dir: {cdi_dir}, drivers: [good]}}\n"
        f"tracing: {{otlpEndpoint: '{receiver.endpoint}'}}\n"
        f"drivers:\n  good:\n    resources: {{'{GOOD}': 2}}\n    prefix: g\n"
        # Its resources answer comes late, so the good driver has claimed its own by then.
        f"  many:\n    resources: {{{many}}}\n    prefix: m\n"
        "    delay: {devicehost_resources: 3.0}\n"
    )
    log = tmp / "devicehost.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.path.dirname(__file__)])}
    env.pop("DEVICEHOST_CONFIG", None)
    command = [
        *(sys.executable, "-m", "devicehost.cli", "run", "--config", str(config)),
        *("--plugin-dir", str(plugin_dir), "--metrics-address", "", "--root", str(tmp)),
        *("--pod-resources-socket", "", "--drivers", "good,many"),
    ]
    kubelet = KubeletStandIn(plugin_dir, start=True)
    with log.open("w") as out:
        process = subprocess.Popen(
            command,
            env=env,
            stderr=out,
            preexec_fn=lambda: rlimits.setrlimit(rlimits.RLIMIT_NOFILE, (LIMIT, LIMIT)),
        )
    state = AtTheLimit(process, kubelet, receiver, ScriptedControl(tmp, "good"), cdi_dir, log)
    try:
        kubelet.wait_registered(GOOD, timeout=30)
        eventually(
            lambda: f"descriptors are open of this process's limit of {LIMIT}" in log.read_text(),
            60,
        )
        state.serves_good()
        open_now = settled(process.pid, kubelet)
        rlimits.prlimit(process.pid, rlimits.RLIMIT_NOFILE, (open_now + HEADROOM,) * 2)
        yield state
        text = log.read_text()
        assert "Too many open files" not in text and "EMFILE" not in text, text[-3000:]
        terminate(process, timeout=30)
    finally:
        reap(process)
        kubelet.close()
        receiver.stop()


def test_a_worker_is_restarted_at_the_limit(at_the_limit: AtTheLimit) -> None:
    old = at_the_limit.helper("dh-good")
    os.kill(old, signal.SIGKILL)
    # A killed process is listed until it has died: wait for another one of that name.
    eventually(
        lambda: any(
            pid != old and name == "dh-good"
            for pid, name in descendants(at_the_limit.process.pid).items()
        ),
        60,
    )
    assert at_the_limit.helper("dh-good") != old
    at_the_limit.serves_good()


def test_every_resource_registers_again_after_a_kubelet_restart_at_the_limit(
    at_the_limit: AtTheLimit,
) -> None:
    before = at_the_limit.kubelet.registration_count(GOOD)
    at_the_limit.kubelet.restart()
    at_the_limit.kubelet.wait_registered(GOOD, timeout=60, count=before + 1)
    at_the_limit.serves_good()


def test_the_cdi_spec_is_rewritten_at_the_limit(at_the_limit: AtTheLimit) -> None:
    (spec,) = at_the_limit.cdi_dir.glob("k8s.devicehost.io-*good*.json")
    at_the_limit.control.set_devices(GOOD, [Device(id=f"g-{i}") for i in range(3)])

    def listed() -> int:
        return len(json.loads(spec.read_text())["devices"])

    eventually(lambda: listed() == 3, 30)
    at_the_limit.serves_good()


def test_the_span_exporter_is_restarted_at_the_limit(at_the_limit: AtTheLimit) -> None:
    os.kill(at_the_limit.helper("dh-spans"), signal.SIGKILL)
    before = len(at_the_limit.receiver.spans)

    def exported_again() -> bool:
        at_the_limit.kubelet.allocate(GOOD, [["g-0"]])
        return len(at_the_limit.receiver.spans) > before

    eventually(exported_again, 60)
    assert "starting it again" in at_the_limit.log.read_text()
