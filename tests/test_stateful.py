"""A hypothesis state machine over one running host: Allocate, health flips, device removal
and re-adding, and kubelet restarts, in any order.

The machine keeps the driver's truth (which devices exist, which are Healthy) and checks
after every step that:

- the kubelet's latest ListAndWatch list converges to that truth;
- an Allocate grants only known Healthy devices, with one container answer per request,
  and otherwise is refused with exactly the code the truth predicts;
- after a kubelet restart the resource is registered once more and streams the truth.

One host serves every run of the machine; ``initialize`` puts the driver back to its
first state. ``make test`` runs 10 runs of 20 steps; ``make soak`` 100 runs of 50.
"""

from __future__ import annotations

import grpc
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from devicehost import Device, Health
from support import SCRIPTED
from support import scripted as scripted_control

RES = "test.example/dev"
START = [f"dev-{i}" for i in range(4)]
POOL = [*START, "dev-4", "dev-5", "extra-0"]  # IDs that may come and go
STRANGERS = ["dev-9", "", "DEV-0", "dev-0 "]  # never known


@pytest.fixture
def served(install, run_host, kubelet):
    """One host with the scripted driver, shared by every run of the machine."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    host = run_host(
        enabled_drivers=("alpha",), scan_interval=3600, drivers={"alpha": {"resources": {RES: 4}}}
    )
    kubelet.wait_registered(RES)
    kubelet.wait_devices(RES, lambda d: len(d) == 4)
    return host, kubelet


def machine(host, kubelet):
    driver = scripted_control(host, RES)

    class HostMachine(RuleBasedStateMachine):
        """The model: ``truth`` maps each device the driver reports to its health."""

        truth: dict[str, bool]

        def set_driver(self) -> None:
            devices = [
                Device(id=i, health=Health.HEALTHY if ok else Health.UNHEALTHY)
                for i, ok in self.truth.items()
            ]
            driver.set_devices(RES, devices)

        @initialize()
        def reset(self) -> None:
            self.truth = {i: True for i in START}
            self.registrations = kubelet.registration_count(RES)
            self.restarts = 0
            self.set_driver()
            self.converged()

        @rule(device=st.sampled_from(POOL), healthy=st.booleans())
        def flip_health(self, device: str, healthy: bool) -> None:
            if device in self.truth:
                self.truth[device] = healthy
                self.set_driver()

        @precondition(lambda self: len(self.truth) > 0)
        @rule(data=st.data())
        def remove_device(self, data: st.DataObject) -> None:
            device = data.draw(st.sampled_from(sorted(self.truth)))
            del self.truth[device]
            self.set_driver()

        @rule(device=st.sampled_from(POOL), healthy=st.booleans())
        def add_device(self, device: str, healthy: bool) -> None:
            self.truth[device] = healthy
            self.set_driver()

        @rule()
        def restart_kubelet(self) -> None:
            count = kubelet.registration_count(RES)
            kubelet.restart()  # forgets every plugin before it returns
            kubelet.wait_registered(RES, count=count + 1, timeout=20)
            self.restarts += 1

        @rule(
            containers=st.lists(
                st.lists(st.sampled_from(POOL + STRANGERS), max_size=3), min_size=1, max_size=3
            )
        )
        def allocate(self, containers: list[list[str]]) -> None:
            expected = self.expected(containers)
            try:
                response = kubelet.allocate(RES, containers)
            except grpc.RpcError as refused:
                assert refused.code() == expected, (containers, refused.details())
                return
            assert expected == grpc.StatusCode.OK, (containers, "granted")
            assert len(response) == len(containers)
            for ids, answer in zip(containers, response, strict=True):
                assert answer.envs["SCRIPTED_DEVICES"] == ",".join(ids)
                assert all(self.truth.get(i) is True for i in ids), "granted a bad device"

        def expected(self, containers: list[list[str]]) -> grpc.StatusCode:
            owners = [{*ids} for ids in containers]
            for index, ids in enumerate(owners):
                if any(ids & other for other in owners[index + 1 :]):
                    return grpc.StatusCode.INVALID_ARGUMENT  # one device, two containers
            for ids in containers:
                if not ids or len(set(ids)) != len(ids):
                    return grpc.StatusCode.INVALID_ARGUMENT
                for i in ids:
                    if i not in self.truth:
                        return grpc.StatusCode.INVALID_ARGUMENT
                    if not self.truth[i]:
                        return grpc.StatusCode.FAILED_PRECONDITION
            return grpc.StatusCode.OK

        @invariant()
        def converged(self) -> None:
            """The kubelet's latest list is the driver's truth (IDs and health)."""
            if not hasattr(self, "truth"):
                return
            want = {i: "Healthy" if ok else "Unhealthy" for i, ok in self.truth.items()}
            kubelet.wait_devices(RES, lambda d: {i: x.health for i, x in d.items()} == want)

        @invariant()
        def registered_after_every_restart(self) -> None:
            """Never fewer registrations than restarts (a duplicate is the race pinned by
            test_faults.py::test_late_kubelet_gets_one_registration)."""
            if hasattr(self, "registrations"):
                assert kubelet.registration_count(RES) >= self.registrations + self.restarts
                assert RES in kubelet.registered()

    return HostMachine


def test_allocate_health_removal_restarts_state_machine(served):
    """Through any sequence of Allocates, health flips, device removals and additions and
    kubelet restarts (10 runs of 20 steps), only known Healthy devices are granted, every
    refusal has the predicted code, and the kubelet's list converges to the driver's truth
    after every step."""
    host, kubelet = served
    run_state_machine_as_test(
        machine(host, kubelet),
        settings=settings(
            max_examples=10,
            stateful_step_count=20,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


@pytest.mark.slow
def test_allocate_health_removal_restarts_state_machine_long(served):
    """The same invariants over 100 runs of 50 steps."""
    host, kubelet = served
    run_state_machine_as_test(
        machine(host, kubelet),
        settings=settings(
            max_examples=100,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
