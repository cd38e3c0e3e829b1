"""Pod identity lookups stay bounded however many Allocates want one at once: one List
call in flight, its answer shared, an oversized answer refused."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from devicehost.kubelet.deviceplugin.podresources import PodResolver
from devicehost.testing import PodResourcesStandIn

RES = "example.com/widget"


def test_concurrent_lookups_share_one_list_call(tmp_path: Path) -> None:
    """Twenty lookups at once (twenty containers allocated together) are answered from
    one List call, each with its own container."""
    gate = threading.Event()
    with PodResourcesStandIn(tmp_path / "pr.sock", gate=gate) as pods:
        for index in range(20):
            pods.assign("shop", f"web-{index}", "main", RES, [f"dev-{index}"])
        resolver = PodResolver(tmp_path / "pr.sock")

        async def main() -> list:
            lookups = [asyncio.ensure_future(resolver.lookup(RES, [f"dev-{i}"])) for i in range(20)]
            await asyncio.sleep(0.2)  # every lookup is waiting on the held List
            gate.set()
            try:
                return await asyncio.gather(*lookups)
            finally:
                await resolver.close()

        found = asyncio.run(main())
        calls = pods.calls
    assert [identity.pod for identity in found] == [f"web-{i}" for i in range(20)]
    assert calls == 1


def test_a_costly_answer_is_reused_for_nine_times_what_it_cost(tmp_path: Path) -> None:
    """An answer that took 0.5 s to get and index serves the lookups of the next 4.5 s
    (FRESH_SECONDS alone would ask again after 25 ms): however large a node's answers,
    lookups take at most a tenth of the host's time."""
    with PodResourcesStandIn(tmp_path / "pr.sock", delay=0.5) as pods:
        pods.assign("shop", "web-0", "main", RES, ["dev-0"])
        resolver = PodResolver(tmp_path / "pr.sock")

        async def main() -> list:
            try:
                first = await resolver.lookup(RES, ["dev-0"])
                await asyncio.sleep(0.1)  # well past FRESH_SECONDS
                return [first, await resolver.lookup(RES, ["dev-0"])]
            finally:
                await resolver.close()

        found = asyncio.run(main())
        calls = pods.calls
    assert [identity.pod for identity in found] == ["web-0", "web-0"]
    assert calls == 1


def test_an_answer_over_the_bound_costs_only_the_identity(tmp_path: Path) -> None:
    """A List answer over the resolver's bound is refused by gRPC: the lookup finds no pod,
    and raises nothing."""
    with PodResourcesStandIn(tmp_path / "pr.sock") as pods:
        for index in range(500):
            pods.assign("shop", f"web-{index}", "main", RES, [f"dev-{index}"])
        resolver = PodResolver(tmp_path / "pr.sock", max_answer_bytes=4096)

        async def main():
            try:
                return await resolver.lookup(RES, ["dev-1"])
            finally:
                await resolver.close()

        assert asyncio.run(main()) is None


def test_devices_split_over_two_containers_name_no_container(tmp_path: Path) -> None:
    """A lookup names a container only when that one container holds every device asked
    about."""
    with PodResourcesStandIn(tmp_path / "pr.sock") as pods:
        pods.assign("shop", "web-0", "main", RES, ["dev-0"])
        pods.assign("shop", "web-1", "main", RES, ["dev-1"])
        resolver = PodResolver(tmp_path / "pr.sock")

        async def main():
            try:
                both = await resolver.lookup(RES, ["dev-0", "dev-1"])
                one = await resolver.lookup(RES, ["dev-1"])
                return both, one
            finally:
                await resolver.close()

        both, one = asyncio.run(main())
    assert both is None
    assert one is not None and (one.pod, one.container) == ("web-1", "main")
