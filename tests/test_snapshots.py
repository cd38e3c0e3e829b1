"""Resource snapshots compared a device at a time, and background work paced on the loop."""

from __future__ import annotations

import asyncio
import time

from devicehost import ContainerEdits, Device, Health
from devicehost.drivers.snapshots import Comparison, ResourceState
from devicehost.system import pacing


def test_a_long_list_is_worked_through_with_the_loop_running_between_slices():
    """Each item here takes longer than a slice: the loop gets a turn every CLOCK_EVERY."""
    order: list[str] = []

    async def ticker() -> None:
        while True:
            order.append("tick")
            await asyncio.sleep(0)

    def work(item: int) -> None:
        time.sleep(0.001)
        order.append("item")

    async def main() -> None:
        ticking = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        await pacing.in_slices(range(5 * pacing.CLOCK_EVERY), work)
        ticking.cancel()

    asyncio.run(main())
    runs = "".join("i" if o == "item" else "." for o in order).split(".")
    assert max(len(run) for run in runs) == pacing.CLOCK_EVERY
    assert order.count("item") == 5 * pacing.CLOCK_EVERY


def test_a_comparison_made_against_a_replaced_snapshot_is_made_again():
    """The supervisor may mark the devices Unhealthy while a scan's comparison is under
    way: the new list is then compared with what the state holds now."""

    async def main() -> None:
        state = ResourceState("r")
        healthy = Device(id="a")
        state.update([healthy])
        comparison = Comparison(state.devices)
        comparison.see(healthy)  # the scan saw no change against the Healthy list
        state.mark_unhealthy()  # meanwhile, its worker went down
        change = state.replace({"a": healthy}, comparison)
        assert change.healthy == ("a",)
        assert state.devices["a"].health is Health.HEALTHY

    asyncio.run(main())


def test_an_edit_change_reaches_observers_without_a_new_device_list():
    async def main() -> None:
        state = ResourceState("r")
        seen: list[str] = []
        state.subscribe(lambda devices: seen.append(devices["a"].edits.envs["X"]))
        state.update([Device(id="a", edits=ContainerEdits(envs={"X": "1"}))])
        version = state.version
        state.update([Device(id="a", edits=ContainerEdits(envs={"X": "2"}))])
        assert seen == ["1", "2"]
        assert state.version == version

    asyncio.run(main())
