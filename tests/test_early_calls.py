"""A driver's first calls are sent as its worker is forked, so they run while the host is
still importing; the bring-up takes their answers instead of asking again."""

from __future__ import annotations

import asyncio
import json

import pytest

from devicehost.drivers.discovery import DRIVER_GROUP
from devicehost.drivers.process import WORKER_THREADS, WorkerProcess
from devicehost.drivers.zygote import Zygote
from devicehost.errors import DriverError, DriverTimeout
from testdrivers.scripted import control_dir

CONFIGURE = {"config": {"mark": "early"}, "root": "/", "simulated": False}
FIRST_CALLS = {
    "devicehost_configure": CONFIGURE,
    "devicehost_resources": {},
    "devicehost_notes": {},
}


async def with_worker(body, entry_point="testdrivers.ordered:Ordered"):
    zygote = Zygote()
    worker = WorkerProcess(
        "ordered",
        "devicehost-ordered",
        DRIVER_GROUP,
        zygote,
        on_notify=lambda resource: None,
        on_watch_error=lambda resource, message: None,
        entry_point=entry_point,
    )
    try:
        await worker.spawn()
        return await body(worker)
    finally:
        await worker.stop(2.0)
        await zygote.close()


def test_early_calls_run_in_order_once_and_their_answers_are_taken():
    """Sent before the driver is imported, configure (slow), resources and notes run one
    after the other; the same calls made later take those answers: the driver sees each
    once."""

    async def body(worker):
        worker.send_early(FIRST_CALLS)
        await worker.start(30)
        await worker.call("devicehost_configure", 10, **CONFIGURE)
        specs = await worker.call("devicehost_resources", 10)
        notes = await worker.call("devicehost_notes", 10)
        return specs, notes

    specs, notes = asyncio.run(with_worker(body))
    assert [s["name"] for s in specs] == ["test.example/ordered"]
    assert notes == ["configure(early),resources,notes"]


def test_a_call_with_other_arguments_is_asked_again():
    """An early answer is only for the very call it was sent as: other arguments are a new
    call (the host's config or root differed by the time it asked)."""

    async def body(worker):
        worker.send_early({"devicehost_configure": CONFIGURE, "devicehost_resources": {}})
        await worker.start(30)
        # The early sequence has run once its last answer is in: the calls below cannot
        # overlap it (a new call may run on another of the worker's call threads).
        await worker.call("devicehost_resources", 10)
        other = {**CONFIGURE, "config": {"mark": "late"}}
        await worker.call("devicehost_configure", 10, **other)
        return await worker.call("devicehost_notes", 10)

    notes = asyncio.run(with_worker(body))
    assert notes == ["configure(early),resources,configure(late),notes"]


RESOURCE = "test.example/ordered"


def device_id(answer):
    [device] = answer
    return device["id"]


def test_the_first_enumerate_takes_the_enumeration_the_worker_ran_after_the_early_calls():
    """With ``then_enumerate`` the worker enumerates each resource after the early calls,
    unasked; the host's first enumerate takes that answer, the next one asks again."""

    async def body(worker):
        worker.send_early(FIRST_CALLS, then_enumerate=True)
        await worker.start(30)
        await worker.call("devicehost_configure", 10, **CONFIGURE)
        await worker.call("devicehost_resources", 10)
        await worker.call("devicehost_notes", 10)
        first = await worker.call("devicehost_enumerate", 10, resource=RESOURCE)
        second = await worker.call("devicehost_enumerate", 10, resource=RESOURCE)
        return device_id(first), device_id(second)

    # configure, resources, notes, then the volunteered enumerate (4), then one asked (5)
    assert asyncio.run(with_worker(body)) == ("o-early-4", "o-early-5")


def test_a_volunteered_enumeration_is_dropped_when_configure_was_asked_again():
    """Configured again with other arguments, the driver's earlier enumeration is stale:
    the first enumerate asks the driver again."""

    async def body(worker):
        worker.send_early(FIRST_CALLS, then_enumerate=True)
        await worker.start(30)
        # The early sequence's answers are in (configure ran first): the late configure
        # cannot overlap it.
        await worker.call("devicehost_resources", 10)
        await worker.call("devicehost_notes", 10)
        await worker.call("devicehost_configure", 10, **{**CONFIGURE, "config": {"mark": "late"}})
        return device_id(await worker.call("devicehost_enumerate", 10, resource=RESOURCE))

    assert asyncio.run(with_worker(body)).startswith("o-late-")


async def configured_with_volunteering(worker, configure):
    """Send configure and resources early with ``then_enumerate``, start the worker and
    take both answers: the worker's unasked enumeration is next."""
    worker.send_early(
        {"devicehost_configure": configure, "devicehost_resources": {}}, then_enumerate=True
    )
    await worker.start(30)
    await worker.call("devicehost_configure", 10, **configure)
    await worker.call("devicehost_resources", 10)


def test_a_worker_that_dies_enumerating_unasked_fails_the_first_enumerate_at_once(tmp_path):
    """The volunteered enumeration kills the worker (``os._exit`` in enumerate): the first
    enumerate is refused with the worker's exit, not after its timeout."""
    configure = {"config": {"resources": {"test.example/dev": 1}}, "root": str(tmp_path)}

    async def body(worker):
        await configured_with_volunteering(worker, configure)
        with pytest.raises(DriverError) as refused:
            await worker.call("devicehost_enumerate", 20, resource="test.example/dev")
        return str(refused.value)

    why = asyncio.run(with_worker(body, "testdrivers.wrecking:ExitInEnumerate"))
    assert "exited with code 3" in why, why


def test_a_volunteered_enumeration_that_hangs_is_a_stuck_call(tmp_path):
    """The worker's unasked enumeration never returns: the first enumerate times out
    without asking the driver again, and that call thread counts as stuck — so the
    worker is killed as hung once its other call threads are stuck too."""
    resource = "test.example/dev"
    configure = {
        "config": {"resources": {resource: 1}, "hang": ["devicehost_enumerate"]},
        "root": str(tmp_path),
    }

    async def body(worker):
        await configured_with_volunteering(worker, configure)
        with pytest.raises(DriverTimeout):
            await worker.call("devicehost_enumerate", 0.5, resource=resource)
        entered = control_dir(tmp_path, "ordered").joinpath("calls.jsonl").read_text()
        for _ in range(WORKER_THREADS - 1):  # each hangs on a call thread of its own
            with pytest.raises(DriverTimeout):
                await worker.call("devicehost_enumerate", 0.5, resource=resource)
        return entered, await asyncio.wait_for(asyncio.shield(worker.exited), 10)

    entered, why = asyncio.run(with_worker(body, "testdrivers.scripted:Scripted"))
    assert [json.loads(line)[0] for line in entered.splitlines()] == [
        "devicehost_configure",
        "devicehost_resources",
        "devicehost_enumerate",
    ]
    assert f"all its {WORKER_THREADS} call threads are stuck" in why, why
