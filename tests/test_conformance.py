"""The conformance battery (``devicehost.testing.check_driver``) holds drivers to the hook
contract docs/hooks.md states, checking what a driver raises by type and fields, and
reports every failure as a ``ConformanceError``."""

from __future__ import annotations

import pytest

from devicehost.drivers.conformance import UNKNOWN_ID
from devicehost.testing import ConformanceError, check_driver

CASES = "testdrivers.conformance_cases"
RESOURCE = "conformance.example/widget"


@pytest.fixture
def checked(install, fake_root):
    """``checked(case)``: install ``case`` of testdrivers.conformance_cases as the driver
    ``case`` and run the battery on it."""

    def run(case: str):
        install(f"devicehost-{case.lower()}", drivers={case.lower(): f"{CASES}:{case}"})
        return check_driver(case.lower(), fake_root)

    return run


def problems(checked, case: str) -> list[str]:
    with pytest.raises(ConformanceError) as failed:
        checked(case)
    return failed.value.problems


def test_allocate_refusing_with_unknown_device_passes(checked):
    """UnknownDevice(resource, device_id) for an unknown ID is what the battery wants."""
    report = checked("Keeping")
    assert report.devices == {RESOURCE: 2}


def test_allocate_raising_a_type_error_is_not_a_refusal(checked):
    """UnknownDevice called with the wrong arguments raises TypeError: the battery says
    which exception came and which one it needs, instead of taking any exception."""
    (problem,) = problems(checked, "WrongArguments")
    assert "raised DriverError" in problem and "TypeError" in problem
    assert f"device_id={UNKNOWN_ID!r})" in problem


def test_allocate_refusing_with_the_wrong_fields_fails(checked):
    """An UnknownDevice must name the resource and the unknown ID, in that order."""
    (problem,) = problems(checked, "SwappedFields")
    assert f"UnknownDevice(resource={UNKNOWN_ID!r}, device_id={RESOURCE!r})" in problem


def test_allocate_accepting_an_unknown_id_fails(checked):
    """An answer for an ID the driver never advertised is a problem."""
    (problem,) = problems(checked, "Accepting")
    assert f"allocate accepted the unknown ID {UNKNOWN_ID!r}" in problem


def test_driver_unavailable_from_resources_is_a_conformance_error(checked):
    """DriverUnavailable from resources() becomes a ConformanceError naming the reason,
    as check_driver's docs promise, instead of escaping."""
    (problem,) = problems(checked, "UnavailableResources")
    assert "unavailable on this root: no widget hardware on this node" in problem
