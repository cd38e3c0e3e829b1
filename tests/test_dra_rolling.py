"""Two instances of one DRA driver on a node, as a DaemonSet rolling with surge runs them
(kubelet 1.33+ talks to both): sockets named per pod, and claims changed one call at a
time across both, each reading what the other wrote. Real gRPC over real unix sockets."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
from pathlib import Path

import grpc
import pytest
from test_dra_prepare import DRIVER, Node, name_of, prepare, unprepare

from devicehost._proto.pluginregistration.v1 import api_pb2 as reg
from devicehost._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from devicehost.kubelet.dra.checkpoint import Checkpoint
from devicehost.kubelet.dra.plugin import UNIX_PATH_MAX, DraPlugin, driver_dir, registration_socket
from devicehost.kubelet.dra.prepare import Preparer

#: Pod UIDs as the downward API gives them.
OLD, NEW = "7f1c0c5e-0000-4000-8000-00000000000a", "7f1c0c5e-0000-4000-8000-00000000000b"


def instance(node: Node, pod_uid: str) -> DraPlugin:
    """One devicehost pod's DRA plugin for the driver: its own sockets, the shared
    checkpoint, CDI directory and lock file."""
    directory = driver_dir(node.kubelet_dir, DRIVER)
    preparer = Preparer(
        DRIVER,
        node.claims,
        node.view,
        node.cdi_dir,
        Checkpoint(directory / "checkpoint.json"),
        lock_path=directory / "serialize.lock",
    )
    return DraPlugin(DRIVER, preparer, node.kubelet_dir, pod_uid=pod_uid)


async def endpoint(plugin: DraPlugin) -> str:
    async with grpc.aio.insecure_channel(f"unix:{plugin.registration_socket}") as channel:
        info = await reg_grpc.RegistrationStub(channel).GetInfo(reg.InfoRequest(), timeout=30)
    return str(info.endpoint)


@pytest.fixture
def node(plugin_dir: Path) -> Node:
    return Node(plugin_dir)


def test_two_instances_serve_on_sockets_named_by_their_pods(node):
    """Both register at once, each naming its own DRA socket; stopping the old one leaves
    the new one's sockets serving."""

    async def main() -> None:
        old, new = instance(node, OLD), instance(node, NEW)
        await old.start()
        await new.start()
        try:
            assert old.registration_socket.is_socket() and new.registration_socket.is_socket()
            assert old.registration_socket != new.registration_socket
            directory = driver_dir(node.kubelet_dir, DRIVER)
            assert await endpoint(old) == str(directory / f"dra-{OLD}.sock")
            assert await endpoint(new) == str(directory / f"dra-{NEW}.sock")
            await old.stop()
            assert not old.registration_socket.exists()
            assert await endpoint(new) == str(new.dra_socket)
        finally:
            await old.stop()
            await new.stop()

    asyncio.run(main())


def test_each_instance_keeps_the_claims_the_other_prepared(node):
    """The old instance prepares one claim, the new one (started before that) another:
    the shared checkpoint names both, so neither instance's write loses the other's."""
    node.claims.add("one", "uid-one", [name_of(1)])
    node.claims.add("two", "uid-two", [name_of(2)])

    async def main() -> None:
        old, new = instance(node, OLD), instance(node, NEW)
        await old.start()
        await new.start()
        try:
            await prepare(old, ("one", "uid-one"))
            await prepare(new, ("two", "uid-two"))
            claims = json.loads(node.checkpoint_path.read_text())["claims"]
            assert sorted(claims) == ["uid-one", "uid-two"]
        finally:
            await old.stop()
            await new.stop()

    asyncio.run(main())


def test_a_claim_prepared_by_one_instance_is_answered_and_unprepared_by_the_other(node):
    """The kubelet may prepare through the old instance and unprepare through the new:
    the new answers the prepared claim as it was and its unprepare leaves neither
    checkpoint entry nor spec."""
    node.claims.add("one", "uid-one", [name_of(1)])

    async def main() -> None:
        old, new = instance(node, OLD), instance(node, NEW)
        await old.start()
        await new.start()
        try:
            first = await prepare(old, ("one", "uid-one"))
            (spec,) = node.cdi_dir.glob("*.json")
            written = spec.stat().st_mtime_ns
            again = await prepare(new, ("one", "uid-one"))
            assert again.claims["uid-one"] == first.claims["uid-one"]
            assert spec.stat().st_mtime_ns == written
            assert (await unprepare(new, "uid-one")).claims["uid-one"].error == ""
            assert not spec.exists()
            claims = json.loads(node.checkpoint_path.read_text())["claims"]
            assert claims == {}
        finally:
            await old.stop()
            await new.stop()

    asyncio.run(main())


def test_a_prepare_waits_while_another_instance_holds_the_lock(node):
    """Another instance mid-call (the lock file held): a prepare here writes nothing until
    it lets go, then completes."""
    node.claims.add("one", "uid-one", [name_of(1)])
    lock = driver_dir(node.kubelet_dir, DRIVER) / "serialize.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)

    async def main() -> None:
        plugin = instance(node, NEW)
        await plugin.start()
        held = os.open(lock, os.O_RDWR | os.O_CREAT)
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            call = asyncio.create_task(prepare(plugin, ("one", "uid-one")))
            await asyncio.sleep(0.5)
            assert not call.done()
            assert list(node.cdi_dir.glob("*.json")) == []
        finally:
            os.close(held)
        answer = await call
        assert answer.claims["uid-one"].error == ""
        assert len(list(node.cdi_dir.glob("*.json"))) == 1
        await plugin.stop()

    asyncio.run(main())


def test_a_registration_socket_too_long_for_the_uid_is_named_by_its_hash():
    """As kubeletplugin's RollingUpdateRegistrarSocketFile: the UID when the path fits,
    else 8 bytes of its SHA-256, else 16 bytes of the driver's and UID's; each fits."""
    short = registration_socket(Path("/var/lib/kubelet"), "gpu.example.com", OLD)
    assert short.name == f"gpu.example.com-{OLD}-reg.sock"
    deep = Path("/" + "d" * (UNIX_PATH_MAX - 70))
    hashed = registration_socket(deep, "gpu.example.com", OLD)
    assert hashed.name.startswith("gpu.example.com-") and OLD not in hashed.name
    deeper = Path("/" + "d" * (UNIX_PATH_MAX - 45))
    shortest = registration_socket(deeper, "gpu.example.com", OLD)
    assert shortest.name.startswith("dra-") and shortest.name.endswith("-reg.sock")
    for path in (short, hashed, shortest):
        assert len(str(path)) <= UNIX_PATH_MAX or path is shortest
    assert registration_socket(deeper, "gpu.example.com", NEW) != shortest
