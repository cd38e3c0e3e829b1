"""What a hostile or careless driver, or a hostile neighbour on the node, cannot make the host
do: hand the kubelet a path outside what the driver declared, serve an ID with '/' or NUL,
leave its socket open to others, or follow a symlink planted at its socket path.
"""

from __future__ import annotations

import os
import posixpath
import socket
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from devicehost import Device
from devicehost._proto.deviceplugin.v1beta1 import api_pb2 as pb
from devicehost._proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from devicehost.config.host_config import HostConfig
from devicehost.testing import HostThread, KubeletStandIn, write_distribution
from support import SCRIPTED, eventually
from support import scripted as scripted_control

RES = "test.example/dev"
SOCKET = "devicehost-test.example_dev.sock"
PATHS = "test.example/paths"
ECHO = "test.example/echo"
#: IDs a careless driver might report; the ones with '/' or NUL never reach the kubelet.
HOSTILE_IDS = ["..", ".", "...", "../../etc/shadow", "/etc/shadow", "a\x00b", "x/../..", "..\\.."]


def safe_path(path: str) -> bool:
    """Absolute, normalised, no '..' component, no NUL: what the model lets through."""
    return (
        path.startswith("/")
        and "\x00" not in path
        and ".." not in path.split("/")
        and posixpath.normpath(path) == path.rstrip("/")
        and "//" not in path
    )


# These tests read the wire message (allocate_raw): what the kubelet would receive,
# before the kit's model types apply checks of their own.
def response_paths(response: pb.ContainerAllocateResponse) -> list[str]:
    return [
        *(m.host_path for m in response.mounts),
        *(m.container_path for m in response.mounts),
        *(d.host_path for d in response.devices),
        *(d.container_path for d in response.devices),
    ]


@pytest.fixture(scope="module")
def hostile() -> Iterator[SimpleNamespace]:
    """One host for the module: PathBuilder (paths from device IDs) and Echo (allocate
    answers whatever the test sets), found through real entry points."""
    site = Path(tempfile.mkdtemp(prefix="dh-site-"))
    write_distribution(
        site,
        "devicehost-paths",
        {"devicehost.drivers": {"paths": "testdrivers.faulty:PathBuilder"}},
    )
    write_distribution(
        site, "devicehost-echo", {"devicehost.drivers": {"echo": "testdrivers.faulty:Echo"}}
    )
    sys.path.insert(0, str(site))
    plugin_dir = Path(tempfile.mkdtemp(prefix="dh-"))
    config = HostConfig(
        plugin_dir=plugin_dir,
        root=Path(tempfile.mkdtemp(prefix="dh-root-")),
        pod_resources_socket=None,
        metrics_address="",
        hook_timeout=5.0,
        initial_backoff=0.05,
        max_backoff=0.5,
        enabled_drivers=("paths", "echo"),
        drivers={
            "paths": {"resources": {PATHS: 2}, "ids": HOSTILE_IDS},
            "echo": {"resources": {ECHO: 1}},
        },
    )
    kubelet = KubeletStandIn(plugin_dir, start=True)
    host = HostThread(config).start()
    try:
        kubelet.wait_registered(PATHS)
        kubelet.wait_registered(ECHO)
        kubelet.wait_devices(ECHO, lambda d: len(d) == 1)
        yield SimpleNamespace(host=host, kubelet=kubelet, echo=scripted_control(host, ECHO))
    finally:
        host.stop()
        kubelet.close()
        sys.path.remove(str(site))


# -- paths in Allocate answers ---------------------------------------------------------------


def test_ids_with_slash_or_nul_are_dropped_at_enumeration(hostile):
    """Of the hostile IDs, those with '/' or NUL are never listed; '..', '.', '...' and
    '..\\..' are legal IDs (no '/'), so they are listed."""
    listed = hostile.kubelet.wait_devices(PATHS, lambda d: len(d) >= 2)
    assert sorted(listed) == sorted(["dev-0", "dev-1", "..", ".", "...", "..\\.."])
    assert not any("/" in i or "\x00" in i for i in listed)


@pytest.mark.parametrize("device_id", ["dev-0", "..", ".", "...", "..\\.."])
def test_paths_built_from_device_ids_never_leave_the_declared_tree(hostile, device_id):
    """A driver turning the ID into /dev/pathbuilder/<id>: for '..' and '.' the model
    refuses the path inside the driver (INTERNAL, no path at all); every path the kubelet
    does receive is absolute, normalised and under the driver's own directories."""
    try:
        response = hostile.kubelet.allocate_raw(PATHS, [[device_id]])
    except grpc.RpcError as refused:
        assert refused.code() == grpc.StatusCode.INTERNAL
        assert "not a normalised path" in refused.details()
        assert device_id in (".", "..")
        return
    assert device_id not in (".", "..")
    paths = response_paths(response.container_responses[0])
    assert paths and all(safe_path(p) for p in paths), paths
    assert all(
        p.startswith(("/dev/pathbuilder/", "/var/lib/pathbuilder/", "/data/")) for p in paths
    )


def test_unknown_hostile_ids_in_a_request_are_refused(hostile):
    """IDs that were dropped at enumeration (or never existed) are INVALID_ARGUMENT: the
    driver is never asked to build a path from them."""
    driver = scripted_control(hostile.host, PATHS)
    for device_id in ("../../etc/shadow", "/etc/shadow", "a\x00b", "x/../.."):
        with pytest.raises(grpc.RpcError) as refused:
            hostile.kubelet.allocate(PATHS, [[device_id]])
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    asked = [c[1]["device_ids"] for c in driver.calls if c[0] == "devicehost_allocate"]
    assert not any(set(ids) & {"../../etc/shadow", "/etc/shadow", "a\x00b"} for ids in asked)


PATH_PARTS = st.sampled_from(["", ".", "..", "dev", "etc", "shadow", "a\x00b", "x y", "…"])
PATH_TEXT = st.one_of(
    st.lists(PATH_PARTS, max_size=5).map("/".join),
    st.lists(PATH_PARTS, max_size=5).map(lambda parts: "/" + "/".join(parts)),
    st.text(st.sampled_from("/.a\x00"), max_size=12),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=20),
)


KINDS = st.sampled_from(["device", "mount", "env", "annotation"])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=KINDS, host_path=PATH_TEXT, container_path=PATH_TEXT)
def test_allocation_paths_fuzz(hostile, kind, host_path, container_path):
    """Whatever paths (or env/annotation text) a driver puts in its Allocation: either the
    model refuses them inside the driver and the kubelet gets INTERNAL, or every path the
    kubelet gets is absolute, normalised, without '..' or NUL — never anything else."""
    check_allocation_paths(hostile, kind, host_path, container_path)


@pytest.mark.slow
@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=KINDS, host_path=PATH_TEXT, container_path=PATH_TEXT)
def test_allocation_paths_fuzz_soak(hostile, kind, host_path, container_path):
    """test_allocation_paths_fuzz's check (INTERNAL, or only safe paths reach the kubelet)
    over 2000 examples."""
    check_allocation_paths(hostile, kind, host_path, container_path)


def check_allocation_paths(hostile, kind: str, host_path: str, container_path: str) -> None:
    paths = {"host_path": host_path, "container_path": container_path}
    answer = {
        "device": {"devices": [{**paths, "permissions": "rw"}]},
        "mount": {"mounts": [paths]},
        "env": {"envs": {host_path or "K": container_path}},
        "annotation": {"annotations": {host_path or "K": container_path}},
    }[kind]
    hostile.echo.answer(answer)
    try:
        response = hostile.kubelet.allocate_raw(ECHO, [["dev-0"]])
    except grpc.RpcError as refused:
        event("refused")
        assert refused.code() == grpc.StatusCode.INTERNAL, refused.details()
        return
    event("granted")
    granted = response.container_responses[0]
    assert all(safe_path(p) for p in response_paths(granted)), response_paths(granted)
    texts = [*granted.envs.items(), *granted.annotations.items()]
    assert not any("\x00" in k + v for k, v in texts)


@pytest.mark.parametrize("field", ["devices", "mounts"])
def test_look_alike_mount_or_device_cannot_smuggle_a_path(hostile, field):
    """An Allocation holding an object that merely looks like a DeviceNode or Mount (same
    attribute names: a vendor SDK's type, a namedtuple) with '/../etc/shadow' is refused
    with INTERNAL; the path never reaches the kubelet."""
    hostile.echo.answer({"look_alike": field})
    try:
        response = hostile.kubelet.allocate_raw(ECHO, [["dev-0"]])
    except grpc.RpcError as refused:
        assert refused.code() == grpc.StatusCode.INTERNAL
        return
    paths = response_paths(response.container_responses[0])
    assert all(safe_path(p) for p in paths), f"the kubelet was given {paths}"


# -- the socket ------------------------------------------------------------------------------


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def serve(install, run_host, kubelet, count=2):
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    host = run_host(enabled_drivers=("alpha",), drivers={"alpha": {"resources": {RES: count}}})
    kubelet.wait_registered(RES)
    return host


def test_socket_is_0600_every_time_it_is_created(install, run_host, kubelet):
    """Our socket is mode 0600 when first served, after a kubelet restart re-creates it, and
    after it was deleted under us."""
    serve(install, run_host, kubelet)
    path = kubelet.plugin_dir / SOCKET
    assert stat.S_ISSOCK(os.lstat(path).st_mode) and mode_of(path) == 0o600
    for remove in (kubelet.restart, path.unlink):
        # A restart can bring two registrations (the socket deleted, kubelet.sock made
        # anew), so wait for the socket itself, not for a registration count.
        count = kubelet.registration_count(RES)
        remove()
        kubelet.wait_registered(RES, count=count + 1)
        eventually(path.exists)
        assert stat.S_ISSOCK(os.lstat(path).st_mode) and mode_of(path) == 0o600


def allocate_afresh(path: Path, device_id: str) -> pb.AllocateResponse:
    """Allocate over a new connection of its own, as the kubelet (gRPC-Go) dials a new one
    per registration. The stand-in's channels share gRPC core's connection per address,
    which may still be failing from the moment our path was a planted link."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    with grpc.insecure_channel(f"unix://{path}", options=options) as channel:
        request = pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devices_ids=[device_id])]
        )
        return pb_grpc.DevicePluginStub(channel).Allocate(request, timeout=10)


def plant_symlink(path: Path, target: Path) -> None:
    """Atomically replace whatever is at ``path`` with a symlink to ``target``."""
    link = path.with_name(path.name + ".planted")
    link.symlink_to(target)
    os.replace(link, path)


@pytest.mark.parametrize("victim_kind", ["file", "directory", "socket"])
def test_symlink_planted_over_running_socket_is_replaced_not_followed(
    install, run_host, kubelet, tmp_path, victim_kind
):
    """While the host runs, its socket is swapped for a symlink to a victim (a file, a
    directory, another service's socket): the host serves a fresh socket in place of the
    link and re-registers; the victim keeps its content, type and mode."""
    serve(install, run_host, kubelet)
    path = kubelet.plugin_dir / SOCKET
    victim_dir = Path(tempfile.mkdtemp(prefix="dh-victim-"))
    victim = victim_dir / "victim"
    listener = None
    if victim_kind == "file":
        victim.write_text("keep me")
        victim.chmod(0o644)
    elif victim_kind == "directory":
        victim.mkdir()
        (victim / "inside").write_text("keep me")
        victim.chmod(0o755)
    else:
        # Bound, not listening yet: a connection attempt that lands on it is refused at once
        # instead of waiting for an HTTP/2 answer that never comes.
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(victim))
        victim.chmod(0o666)
    before = os.lstat(victim)
    try:
        plant_symlink(path, victim)
        kubelet.wait_registered(RES, count=2)
        eventually(lambda: stat.S_ISSOCK(os.lstat(path).st_mode))
        assert not path.is_symlink()
        assert mode_of(path) == 0o600
        after = os.lstat(victim)
        assert (stat.S_IFMT(after.st_mode), mode_of(victim), after.st_ino) == (
            stat.S_IFMT(before.st_mode),
            stat.S_IMODE(before.st_mode),
            before.st_ino,
        )
        if victim_kind == "file":
            assert victim.read_text() == "keep me"
        elif victim_kind == "directory":
            assert (victim / "inside").read_text() == "keep me"
        else:
            listener.listen()
            with socket.socket(socket.AF_UNIX) as client:
                client.connect(str(victim))  # the other service's socket still works
        assert allocate_afresh(path, "dev-0").container_responses
    finally:
        if listener is not None:
            listener.close()


def test_symlink_planted_then_kubelet_restart(install, run_host, kubelet, tmp_path):
    """A symlink planted at our path while running is replaced by a fresh socket; a kubelet
    restart after that (deleting sockets and links alike) gets our socket served again,
    and the link's target is untouched throughout. (Planting and restarting at the same
    instant is test_faults.py::test_socket_deleted_right_after_it_is_served_is_served_again.)"""
    serve(install, run_host, kubelet)
    path = kubelet.plugin_dir / SOCKET
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    plant_symlink(path, victim)
    kubelet.wait_registered(RES, count=2)
    eventually(lambda: path.exists() and stat.S_ISSOCK(os.lstat(path).st_mode))
    kubelet.restart()
    kubelet.wait_registered(RES, count=3)
    eventually(lambda: path.exists() and stat.S_ISSOCK(os.lstat(path).st_mode))
    assert victim.read_text() == "keep me"
    assert allocate_afresh(path, "dev-1").container_responses


def test_device_ids_with_traversal_from_enumerate_are_dropped(install, run_host, kubelet):
    """An enumeration with '../x', '/abs', 'nul\\0' IDs serves only the clean ones."""
    host = serve(install, run_host, kubelet)
    driver = scripted_control(host, RES)
    devices = [Device(id=i) for i in ("ok-0", "../x", "/abs", "nul\x00", "ok-1")]
    driver.set_devices(RES, devices)
    listed = kubelet.wait_devices(RES, lambda d: sorted(d) == ["ok-0", "ok-1"])
    assert set(listed) == {"ok-0", "ok-1"}
