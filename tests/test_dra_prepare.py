"""The DRA face over real unix sockets: registration, then prepare and unprepare of claims.

A real gRPC client plays the kubelet's calls (GetInfo on the registration socket, then
NodePrepareResources on the endpoint it names). Claims come through the ``ClaimSource``
interface from a dict of ResourceClaim documents shaped as the API server returns them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest
from test_cdi import cdi_problems

from devicehost._proto.dra.v1 import api_pb2 as dra
from devicehost._proto.dra.v1 import api_pb2_grpc as dra_grpc
from devicehost._proto.dra.v1beta1 import api_pb2 as dra_beta
from devicehost._proto.dra.v1beta1 import api_pb2_grpc as dra_beta_grpc
from devicehost._proto.pluginregistration.v1 import api_pb2 as reg
from devicehost._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from devicehost.kubelet.dra.checkpoint import Checkpoint
from devicehost.kubelet.dra.claims import ClaimProblem
from devicehost.kubelet.dra.naming import device_name
from devicehost.kubelet.dra.plugin import DraPlugin, driver_dir
from devicehost.kubelet.dra.prepare import PoolView, Preparer
from devicehost.model import ContainerEdits, Device, DeviceNode, Health, ResourceSpec

DRIVER = "example.devicehost.io"
NODE = "node-1"
RESOURCE = "example.com/gpu"
SPEC = ResourceSpec(
    name=RESOURCE,
    edits=ContainerEdits(devices=(DeviceNode(host_path="/dev/examplectl"),)),
    joined_envs=("EXAMPLE_VISIBLE_DEVICES",),
)


def gpu(index: int, health: Health = Health.HEALTHY) -> Device:
    return Device(
        id=f"GPU-{index}",
        health=health,
        edits=ContainerEdits(
            envs={"EXAMPLE_VISIBLE_DEVICES": f"GPU-{index}"},
            devices=(DeviceNode(host_path=f"/dev/example{index}"),),
        ),
    )


class DictClaims:
    """A ``ClaimSource`` holding ResourceClaim documents (the API server's stand-in)."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}

    async def get(self, namespace: str, name: str) -> Mapping[str, Any]:
        try:
            return self.claims[namespace, name]
        except KeyError:
            raise ClaimProblem(f"claim {namespace}/{name} not found") from None

    def add(self, name: str, uid: str, devices: list[str], driver: str = DRIVER) -> None:
        results = [
            {"request": "gpus", "driver": driver, "pool": NODE, "device": d} for d in devices
        ]
        self.claims["default", name] = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"namespace": "default", "name": name, "uid": uid},
            "spec": {"devices": {"requests": []}},
            "status": {"allocation": {"devices": {"results": results}}},
        }


class Node:
    """The kubelet's directories, the CDI directory and a DRA plugin over them."""

    def __init__(self, tmp_path: Path) -> None:
        self.kubelet_dir = tmp_path / "kubelet"
        self.cdi_dir = tmp_path / "cdi"
        self.cdi_dir.mkdir(parents=True)
        self.claims = DictClaims()
        self.devices = {d.id: d for d in (gpu(0), gpu(1), gpu(2))}

    @property
    def checkpoint_path(self) -> Path:
        """Where the plugin keeps its prepared claims."""
        return driver_dir(self.kubelet_dir, DRIVER) / "checkpoint.json"

    def view(self) -> PoolView:
        return PoolView(pool=NODE, specs={RESOURCE: SPEC}, snapshots={RESOURCE: self.devices})

    def plugin(self, **preparer_options: Any) -> DraPlugin:
        checkpoint = Checkpoint(self.checkpoint_path)
        preparer = Preparer(
            DRIVER, self.claims, self.view, self.cdi_dir, checkpoint, **preparer_options
        )
        return DraPlugin(DRIVER, preparer, self.kubelet_dir)


def name_of(index: int) -> str:
    return device_name(RESOURCE, f"GPU-{index}")


def run(node: Node, body: Callable[[DraPlugin], Awaitable[None]]) -> None:
    """Serve a fresh plugin on ``node`` while ``body`` runs, then stop it."""

    async def main() -> None:
        plugin = node.plugin()
        await plugin.start()
        try:
            await body(plugin)
        finally:
            await plugin.stop()

    asyncio.run(main())


async def prepare(plugin: DraPlugin, *claims: tuple[str, str]) -> dra.NodePrepareResourcesResponse:
    async with grpc.aio.insecure_channel(f"unix:{plugin.dra_socket}") as channel:
        request = dra.NodePrepareResourcesRequest(
            claims=[dra.Claim(namespace="default", name=n, uid=u) for n, u in claims]
        )
        response: dra.NodePrepareResourcesResponse = await dra_grpc.DRAPluginStub(
            channel
        ).NodePrepareResources(request, timeout=30)
        return response


async def unprepare(plugin: DraPlugin, uid: str) -> dra.NodeUnprepareResourcesResponse:
    async with grpc.aio.insecure_channel(f"unix:{plugin.dra_socket}") as channel:
        request = dra.NodeUnprepareResourcesRequest(
            claims=[dra.Claim(namespace="default", name="c", uid=uid)]
        )
        response: dra.NodeUnprepareResourcesResponse = await dra_grpc.DRAPluginStub(
            channel
        ).NodeUnprepareResources(request, timeout=30)
        return response


def prepare_one(node: Node) -> dra.NodePrepareResourcesResponse:
    """Claim ``one`` (device 1) prepared once by a fresh plugin on ``node``."""
    node.claims.add("one", "uid-one", [name_of(1)])
    answers: list[dra.NodePrepareResourcesResponse] = []

    async def body(plugin: DraPlugin) -> None:
        answers.append(await prepare(plugin, ("one", "uid-one")))

    run(node, body)
    return answers[0]


def claim_specs(node: Node) -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in node.cdi_dir.glob("*.json")}


@pytest.fixture
def node(plugin_dir: Path) -> Node:
    """A node under a short directory: unix socket paths hold at most 107 bytes."""
    return Node(plugin_dir)


def test_get_info_names_the_driver_its_socket_and_services(node):
    """GetInfo answers DRAPlugin, the driver name, the DRA socket, and v1 and v1beta1."""
    seen: list[reg.PluginInfo] = []

    async def body(plugin: DraPlugin) -> None:
        assert plugin.registration_socket == node.kubelet_dir / "plugins_registry" / (
            f"{DRIVER}-reg.sock"
        )
        async with grpc.aio.insecure_channel(f"unix:{plugin.registration_socket}") as channel:
            stub = reg_grpc.RegistrationStub(channel)
            seen.append(await stub.GetInfo(reg.InfoRequest(), timeout=30))
            await stub.NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=True), timeout=30
            )
        await asyncio.wait_for(plugin.registration.registered.wait(), 30)

    run(node, body)
    (info,) = seen
    assert (info.type, info.name) == ("DRAPlugin", DRIVER)
    assert info.endpoint == str(node.kubelet_dir / "plugins" / DRIVER / "dra.sock")
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]


def test_stop_removes_the_registration_socket(node):
    """Stopping the plugin removes its registration socket, so the kubelet unregisters it."""

    async def body(plugin: DraPlugin) -> None:
        assert plugin.registration_socket.is_socket()
        await plugin.stop()
        assert not plugin.registration_socket.exists()

    run(node, body)


def test_prepare_answers_cdi_ids_of_a_spec_holding_the_composed_edits(node):
    """Two GPUs of a claim: one CDI ID each, and the claim's spec holds the edits Allocate
    would compose (the resource's node once, both device nodes, the joined env)."""
    node.claims.add("two", "uid-two", [name_of(0), name_of(2)])
    answers: list[dra.NodePrepareResourcesResponse] = []

    async def body(plugin: DraPlugin) -> None:
        answers.append(await prepare(plugin, ("two", "uid-two")))

    run(node, body)
    entry = answers[0].claims["uid-two"]
    assert entry.error == ""
    assert [(d.pool_name, d.device_name) for d in entry.devices] == [
        (NODE, name_of(0)),
        (NODE, name_of(2)),
    ]
    (spec,) = claim_specs(node).values()
    assert cdi_problems(spec) == []
    qualified = [f"{spec['kind']}={d['name']}" for d in spec["devices"]]
    assert [list(d.cdi_device_ids) for d in entry.devices] == [[q] for q in qualified]
    edits = spec["containerEdits"]
    assert [n["path"] for n in edits["deviceNodes"]] == [
        "/dev/examplectl",
        "/dev/example0",
        "/dev/example2",
    ]
    assert edits["env"] == ["EXAMPLE_VISIBLE_DEVICES=GPU-0,GPU-2"]


def test_prepare_is_idempotent(node):
    """Preparing a prepared claim again answers the same and leaves one spec."""
    node.claims.add("one", "uid-one", [name_of(1)])
    answers: list[dra.NodePrepareResourcesResponse] = []

    async def body(plugin: DraPlugin) -> None:
        answers.append(await prepare(plugin, ("one", "uid-one")))
        answers.append(await prepare(plugin, ("one", "uid-one")))

    run(node, body)
    assert answers[0] == answers[1]
    assert len(claim_specs(node)) == 1


def test_a_restarted_plugin_answers_from_its_checkpoint(node):
    """After a restart a prepared claim is answered as before, even with the claim gone
    from the API, and its spec is still on disk."""
    node.claims.add("one", "uid-one", [name_of(1)])
    answers: list[dra.NodePrepareResourcesResponse] = []

    async def first(plugin: DraPlugin) -> None:
        answers.append(await prepare(plugin, ("one", "uid-one")))

    async def second(plugin: DraPlugin) -> None:
        answers.append(await prepare(plugin, ("one", "uid-one")))

    run(node, first)
    specs = claim_specs(node)
    node.claims.claims.clear()
    run(node, second)
    assert answers[1] == answers[0] and answers[1].claims["uid-one"].error == ""
    assert claim_specs(node) == specs


def test_unprepare_removes_the_spec_and_is_idempotent(node):
    """Unprepare removes the claim's spec; unpreparing it again (or a claim never seen) is fine."""
    node.claims.add("one", "uid-one", [name_of(1)])
    answers: list[dra.NodeUnprepareResourcesResponse] = []

    async def body(plugin: DraPlugin) -> None:
        await prepare(plugin, ("one", "uid-one"))
        answers.append(await unprepare(plugin, "uid-one"))
        answers.append(await unprepare(plugin, "uid-one"))
        answers.append(await unprepare(plugin, "uid-never"))

    run(node, body)
    assert [
        a.claims[u].error for a, u in zip(answers, ["uid-one", "uid-one", "uid-never"], strict=True)
    ] == ["", "", ""]
    assert claim_specs(node) == {}


def test_a_restart_removes_a_spec_its_checkpoint_does_not_name(node):
    """A claim spec left by a crash before the checkpoint was written is removed at start."""
    orphan = node.cdi_dir / f"k8s.devicehost.io-dra.{DRIVER}_uid-lost.json"
    orphan.write_text("{}")
    other = node.cdi_dir / "k8s.devicehost.io-dra.other.devicehost.io_uid-x.json"
    other.write_text("{}")

    async def body(plugin: DraPlugin) -> None:
        pass

    run(node, body)
    assert not orphan.exists() and other.exists()


def test_a_recreated_claim_is_refused_by_uid(node):
    """A claim whose UID is not the kubelet's (deleted and created again) gets an error."""
    node.claims.add("one", "uid-new", [name_of(1)])
    answers: list[dra.NodePrepareResourcesResponse] = []

    async def body(plugin: DraPlugin) -> None:
        answers.append(await prepare(plugin, ("one", "uid-old")))

    run(node, body)
    assert "has UID 'uid-new', not 'uid-old'" in answers[0].claims["uid-old"].error
    assert claim_specs(node) == {}


def test_one_bad_claim_does_not_fail_the_others(node):
    """A claim naming a device not in the pool fails alone; the other claim is prepared."""
    node.claims.add("good", "uid-good", [name_of(0)])
    node.claims.add("bad", "uid-bad", ["no-such-device"])
    answers: list[dra.NodePrepareResourcesResponse] = []

    async def body(plugin: DraPlugin) -> None:
        answers.append(await prepare(plugin, ("good", "uid-good"), ("bad", "uid-bad")))

    run(node, body)
    claims = answers[0].claims
    assert "'no-such-device'" in claims["uid-bad"].error
    assert claims["uid-good"].error == "" and len(claims["uid-good"].devices) == 1


def test_only_this_driver_s_devices_are_prepared(node):
    """Results of another driver in the same claim are not this driver's to prepare."""
    node.claims.add("mixed", "uid-mixed", [name_of(0)])
    results = node.claims.claims["default", "mixed"]["status"]["allocation"]["devices"]["results"]
    results.append({"request": "nic", "driver": "rdma.devicehost.io", "pool": NODE, "device": "x"})
    answers: list[dra.NodePrepareResourcesResponse] = []

    async def body(plugin: DraPlugin) -> None:
        answers.append(await prepare(plugin, ("mixed", "uid-mixed")))

    run(node, body)
    assert [d.device_name for d in answers[0].claims["uid-mixed"].devices] == [name_of(0)]


def test_v1beta1_is_served_on_the_same_socket(node):
    """A kubelet speaking v1beta1 prepares through the same socket and gets the same IDs."""
    node.claims.add("one", "uid-one", [name_of(1)])
    answers: list[dra_beta.NodePrepareResourcesResponse] = []

    async def body(plugin: DraPlugin) -> None:
        async with grpc.aio.insecure_channel(f"unix:{plugin.dra_socket}") as channel:
            request = dra_beta.NodePrepareResourcesRequest(
                claims=[dra_beta.Claim(namespace="default", name="one", uid="uid-one")]
            )
            stub = dra_beta_grpc.DRAPluginStub(channel)
            answers.append(await stub.NodePrepareResources(request, timeout=30))

    run(node, body)
    (device,) = answers[0].claims["uid-one"].devices
    assert device.device_name == name_of(1) and len(device.cdi_device_ids) == 1


def test_an_unreadable_checkpoint_is_kept_aside_and_the_plugin_starts(node, caplog):
    """A corrupt checkpoint is renamed .unreadable and logged; the plugin serves, empty."""
    path = node.checkpoint_path
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    answer = prepare_one(node)
    assert path.with_name("checkpoint.json.unreadable").read_text() == "{not json"
    assert "is unreadable" in caplog.text
    assert answer.claims["uid-one"].error == ""
    assert "uid-one" in json.loads(path.read_text())["claims"]


def _checkpoint_with(node, uid: str, spec_file: str) -> Path:
    """A checkpoint naming one prepared claim, written where the plugin reads it."""
    path = node.checkpoint_path
    path.parent.mkdir(parents=True, exist_ok=True)
    claim = {"namespace": "ns", "name": "one", "spec_file": spec_file, "devices": []}
    path.write_text(json.dumps({"format": 1, "claims": {uid: claim}}))
    return path


def test_unprepare_deletes_only_the_claim_s_own_spec_whatever_the_checkpoint_names(node, tmp_path):
    """A checkpoint whose spec_file points outside the CDI directory (a neighbour's file)
    does not make unprepare delete it: the spec's path comes from the claim's UID."""
    victim = tmp_path / "victim.json"
    victim.write_text("keep me")
    _checkpoint_with(node, "uid-one", str(victim))

    async def body(plugin: DraPlugin) -> None:
        await unprepare(plugin, "uid-one")

    run(node, body)
    assert victim.read_text() == "keep me"


@pytest.mark.parametrize(
    "content",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b"\xff\xfe not text",
        b'{"format": 1, "claims": {"uid-one": {"namespace": 1, "name": "n", '
        b'"spec_file": "s", "devices": []}}}',
        b'{"format": 1, "claims": {"../escape": {"namespace": "ns", "name": "n", '
        b'"spec_file": "s", "devices": []}}}',
        b'{"format": 1, "claims": {"uid-one": {"namespace": "ns", "name": "n", '
        b'"spec_file": "s", "devices": ["not a device"]}}}',
    ],
    ids=["deep", "not-utf8", "wrong-type", "not-a-uid", "bad-device"],
)
def test_a_checkpoint_that_is_no_checkpoint_is_kept_aside_and_the_plugin_prepares(
    node, caplog, content
):
    """Deep nesting, bytes that are not UTF-8, a field of the wrong type, a key that is no
    UID, a device that is no object: each is kept aside as .unreadable, and the plugin
    starts empty and prepares claims."""
    path = node.checkpoint_path
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    answer = prepare_one(node)
    assert path.with_name("checkpoint.json.unreadable").read_bytes() == content
    assert answer.claims["uid-one"].error == ""


def test_a_fifo_for_a_checkpoint_neither_blocks_nor_stops_the_plugin(node):
    """A FIFO where the checkpoint lies is not read (its open would block); the plugin
    prepares claims, writing its checkpoint over it."""
    import os

    path = node.checkpoint_path
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    answer = prepare_one(node)
    assert answer.claims["uid-one"].error == ""
    assert "uid-one" in json.loads(path.read_text())["claims"]


class HeldClaims(DictClaims):
    """An API server whose read of one claim answers only once the test releases it."""

    def __init__(self, held: str) -> None:
        super().__init__()
        self.held = held
        self.reading = asyncio.Event()
        self.release = asyncio.Event()

    async def get(self, namespace: str, name: str) -> Mapping[str, Any]:
        if name == self.held:
            self.reading.set()
            await self.release.wait()
        return await super().get(namespace, name)


def serve_plugin(node, body: Callable[[DraPlugin], Awaitable[None]], **options: Any) -> None:
    """``run``, with the preparer's options (e.g. its claim timeout)."""

    async def main() -> None:
        plugin = node.plugin(**options)
        await plugin.start()
        try:
            await body(plugin)
        finally:
            await plugin.stop()

    asyncio.run(main())


def test_a_claim_read_that_hangs_holds_no_other_claim(node):
    """While one claim's read from the API server hangs, another claim of the driver is
    prepared; the first is prepared once its read answers."""
    claims = node.claims = HeldClaims("stuck")
    claims.add("stuck", "uid-stuck", [name_of(1)])
    claims.add("free", "uid-free", [name_of(2)])
    answers: dict[str, dra.NodePrepareResourcesResponse] = {}

    async def body(plugin: DraPlugin) -> None:
        async def ask(name: str, uid: str) -> None:
            answers[name] = await prepare(plugin, (name, uid))

        stuck = asyncio.create_task(ask("stuck", "uid-stuck"))
        await claims.reading.wait()
        await ask("free", "uid-free")
        assert not stuck.done()
        claims.release.set()
        await stuck

    serve_plugin(node, body, claim_timeout=600.0)
    assert answers["free"].claims["uid-free"].error == ""
    assert answers["stuck"].claims["uid-stuck"].error == ""


def test_a_claim_read_that_never_answers_fails_after_the_claim_timeout(node):
    """A claim whose read never answers fails after the claim timeout, saying so."""
    claims = node.claims = HeldClaims("stuck")
    claims.add("stuck", "uid-stuck", [name_of(1)])
    answers: list[dra.NodePrepareResourcesResponse] = []

    async def body(plugin: DraPlugin) -> None:
        answers.append(await prepare(plugin, ("stuck", "uid-stuck")))

    serve_plugin(node, body, claim_timeout=0.5)
    assert "reading it took over 0.5 s" in answers[0].claims["uid-stuck"].error


def test_a_refused_registration_is_logged_with_the_kubelet_s_reason(node, caplog):
    """NotifyRegistrationStatus(false) logs the kubelet's error and clears 'registered'."""

    async def body(plugin: DraPlugin) -> None:
        async with grpc.aio.insecure_channel(f"unix:{plugin.registration_socket}") as channel:
            stub = reg_grpc.RegistrationStub(channel)
            await stub.NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=True), timeout=30
            )
            await stub.NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=False, error="no such version"),
                timeout=30,
            )
        assert not plugin.registration.registered.is_set()

    run(node, body)
    assert "the kubelet refused it: no such version" in caplog.text


def test_a_socket_path_too_long_is_a_clear_error(tmp_path):
    """A kubelet directory too deep for a unix socket fails start naming the path and limit."""
    node = Node(tmp_path / ("d" * 120))

    async def main() -> None:
        with pytest.raises(OSError, match="over the 107-byte limit"):
            await node.plugin().start()

    asyncio.run(main())


def test_a_checkpoint_that_cannot_be_written_fails_the_claim_and_leaves_no_spec(node):
    """If the checkpoint cannot be written the claim gets the error and its spec is removed,
    so nothing is prepared that a restart would not know of."""
    blocker = node.checkpoint_path
    blocker.mkdir(parents=True)  # a directory where the file must go: the write fails
    node.claims.add("one", "uid-one", [name_of(1)])
    answers: list[dra.NodePrepareResourcesResponse] = []

    async def body(plugin: DraPlugin) -> None:
        answers.append(await prepare(plugin, ("one", "uid-one")))
        answers.append(await prepare(plugin, ("one", "uid-one")))

    run(node, body)
    assert all("cannot write the checkpoint" in a.claims["uid-one"].error for a in answers)
    assert claim_specs(node) == {}
