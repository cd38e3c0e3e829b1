"""Fuzzing with hypothesis: every DevicePlugin RPC, and config files.

One host serves two resources for the whole module (a driver with pre_start and its own
preferred_allocation, and one without), over real unix sockets; each example sends one
request and checks the answer against a model of what the host must say:

- Allocate / GetPreferredAllocation / PreStartContainer with arbitrary device-ID lists
  (unicode, empty strings, 64 to 5000-character IDs, duplicates), sizes (negative, zero,
  huge), no containers, many containers, 10 000 IDs: the answer is OK or exactly the
  refusal the model predicts (INVALID_ARGUMENT or FAILED_PRECONDITION), never UNKNOWN or
  INTERNAL, and the host keeps answering.
- ListAndWatch: streams opened, read or not, and dropped in any number at once.
- Raw bytes on every method: only protobuf decoding (in gRPC, before the host) may refuse.
- Config files: arbitrary YAML documents and arbitrary values for every known key load as a
  HostConfig or fail with a ConfigError naming the key, never another exception.

The clients allow 16 MiB of response metadata, as the kubelet's gRPC (Go) does: the
default gRPC-core limit of 16 KiB is test_refusal_of_a_huge_request_stays_short's subject.
"""

from __future__ import annotations

import string
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from devicehost._proto.deviceplugin.v1beta1 import api_pb2 as pb
from devicehost._proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from devicehost.config.host_config import SETTINGS, HostConfig, load_config
from devicehost.errors import ConfigError
from devicehost.model import ResourceSpec
from devicehost.testing import HostThread, KubeletStandIn, write_distribution
from support import SCRIPTED
from support import scripted as scripted_control

WITH_HOOKS = "test.example/fuzz"  # ScriptedWithPreStart: pre_start + preferred_allocation
PLAIN = "test.example/plain"  # Scripted: the host's default preference
PREFIX = {WITH_HOOKS: "f", PLAIN: "p"}
COUNT = 8
UNHEALTHY = {6, 7}
BIG_METADATA = [
    ("grpc.max_metadata_size", 16 << 20),
    ("grpc.absolute_max_metadata_size", 16 << 20),
]
OK = grpc.StatusCode.OK
INVALID = grpc.StatusCode.INVALID_ARGUMENT
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION

FAST = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass
class FuzzHost:
    host: HostThread
    kubelet: KubeletStandIn
    stubs: dict[str, pb_grpc.DevicePluginStub]
    channels: dict[str, grpc.Channel]
    health: dict[str, dict[str, bool]] = field(default_factory=dict)

    def ids(self, resource: str) -> list[str]:
        return list(self.health[resource])

    def still_answering(self) -> None:
        """The host answers both resources and the kubelet's streams still match the truth."""
        for resource in (WITH_HOOKS, PLAIN):
            first = f"{PREFIX[resource]}-0"
            answer = self.stubs[resource].Allocate(
                pb.AllocateRequest(
                    container_requests=[pb.ContainerAllocateRequest(devices_ids=[first])]
                ),
                timeout=10,
            )
            assert len(answer.container_responses) == 1
            truth = {i: "Healthy" if ok else "Unhealthy" for i, ok in self.health[resource].items()}
            self.kubelet.wait_devices(
                resource, lambda d, t=truth: {i: x.health for i, x in d.items()} == t
            )


@pytest.fixture(scope="module")
def fz(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzHost]:
    """One host for the whole module: two drivers found through real entry points."""
    site = tmp_path_factory.mktemp("fuzz-site")
    write_distribution(
        site,
        "devicehost-fuzz",
        {"devicehost.drivers": {"fuzz": "testdrivers.scripted:ScriptedWithPreStart"}},
    )
    write_distribution(site, "devicehost-plain", {"devicehost.drivers": {"plain": SCRIPTED}})
    sys.path.insert(0, str(site))
    plugin_dir = Path(tempfile.mkdtemp(prefix="dh-"))
    config = HostConfig(
        plugin_dir=plugin_dir,
        root=tmp_path_factory.mktemp("root"),
        pod_resources_socket=None,
        metrics_address="",
        hook_timeout=5.0,
        initial_backoff=0.05,
        max_backoff=0.5,
        enabled_drivers=("fuzz", "plain"),
        drivers={
            "fuzz": {"resources": {WITH_HOOKS: COUNT}, "prefix": "f"},
            "plain": {"resources": {PLAIN: COUNT}, "prefix": "p"},
        },
    )
    kubelet = KubeletStandIn(plugin_dir, start=True)
    host = HostThread(config).start()
    channels: dict[str, grpc.Channel] = {}
    try:
        fuzz = FuzzHost(host, kubelet, {}, channels)
        for resource, prefix in PREFIX.items():
            kubelet.wait_registered(resource)
            kubelet.wait_devices(resource, lambda d: len(d) == COUNT)
            driver = scripted_control(host, resource)
            for i in UNHEALTHY:
                driver.set_health(resource, f"{prefix}-{i}", False)
            fuzz.health[resource] = {f"{prefix}-{i}": i not in UNHEALTHY for i in range(COUNT)}
            socket = plugin_dir / ResourceSpec(name=resource).socket_name
            channels[resource] = grpc.insecure_channel(f"unix://{socket}", options=BIG_METADATA)
            fuzz.stubs[resource] = pb_grpc.DevicePluginStub(channels[resource])
        fuzz.still_answering()
        yield fuzz
        fuzz.still_answering()
    finally:
        for channel in channels.values():
            channel.close()
        host.stop()
        kubelet.close()
        sys.path.remove(str(site))


# -- strategies ------------------------------------------------------------------------------

TEXT = st.characters(exclude_categories=("Cs",))  # protobuf strings are UTF-8: no surrogates


def device_ids(resource: str) -> st.SearchStrategy[str]:
    prefix = PREFIX[resource]
    return st.one_of(
        st.sampled_from([f"{prefix}-{i}" for i in range(COUNT)]),  # known, some Unhealthy
        st.sampled_from([f"{PREFIX[r]}-0" for r in PREFIX if r != resource]),  # other resource's
        st.just(""),
        st.text(TEXT, max_size=40),
        st.text(string.printable, max_size=8).map(lambda s: f"{prefix}-0{s}"),
        st.builds(
            lambda c, n: c * n, st.characters(exclude_categories=("Cs",)), st.integers(63, 5000)
        ),
    )


def huge_list(resource: str) -> st.SearchStrategy[list[str]]:
    """Thousands of IDs, built from a few drawn parameters (drawing each would be slow)."""
    prefix = PREFIX[resource]
    healthy = [f"{prefix}-{i}" for i in range(COUNT) if i not in UNHEALTHY]

    def build(kind: str, n: int) -> list[str]:
        if kind == "unique unknown":
            return [f"{prefix}-x{i}" for i in range(n)]
        if kind == "one known repeated":
            return [healthy[0]] * n
        if kind == "known then unknown":
            return [*healthy, *(f"u{i}" for i in range(n))]
        return [f"{prefix}-{i % COUNT}" for i in range(n)]  # every known ID, cycled

    kinds = st.sampled_from(
        ["unique unknown", "one known repeated", "known then unknown", "cycled"]
    )
    return st.builds(build, kinds, st.sampled_from([1000, 10_000]))


def id_lists(resource: str) -> st.SearchStrategy[list[str]]:
    known = [f"{PREFIX[resource]}-{i}" for i in range(COUNT)]
    healthy = [k for i, k in enumerate(known) if i not in UNHEALTHY]
    return st.one_of(
        st.lists(device_ids(resource), max_size=10),
        st.lists(st.sampled_from(known), max_size=8),
        st.lists(st.sampled_from(known), min_size=1, max_size=8, unique=True),
        st.lists(st.sampled_from(healthy), min_size=1, max_size=6, unique=True),  # grantable
    )


@st.composite
def allocate_requests(draw: st.DrawFn) -> tuple[str, list[list[str]]]:
    resource = draw(st.sampled_from([WITH_HOOKS, PLAIN]))
    shape = draw(st.sampled_from(["few", "few", "none", "huge", "many"]))
    if shape == "none":
        return resource, []
    if shape == "huge":
        return resource, [draw(huge_list(resource))]
    if shape == "many":  # many containers, each asking for one of the same few devices
        ids = draw(
            st.lists(
                st.sampled_from([f"{PREFIX[resource]}-{i}" for i in range(3)]),
                min_size=1,
                max_size=2,
                unique=True,
            )
        )
        return resource, [ids] * draw(st.integers(20, 300))
    return resource, draw(st.lists(id_lists(resource), min_size=1, max_size=5))


SIZES = st.one_of(
    st.integers(-3, 10),
    st.sampled_from([-(2**31), 2**31 - 1, 10_000]),
    st.integers(-(2**31), 2**31 - 1),
)


@st.composite
def preferred_requests(draw: st.DrawFn) -> tuple[str, list[tuple[list[str], list[str], int]]]:
    resource = draw(st.sampled_from([WITH_HOOKS, PLAIN]))
    containers = []
    for _ in range(draw(st.integers(0, 3))):
        available = draw(st.one_of(huge_list(resource), id_lists(resource)))
        choices = list(dict.fromkeys(available))
        if choices and draw(st.booleans()):  # a request the kubelet could really send
            must = draw(st.lists(st.sampled_from(choices), max_size=3, unique=True))
            size = draw(st.integers(max(1, len(must)), len(choices)))
        else:
            must = draw(
                st.one_of(
                    st.lists(st.sampled_from(choices or [""]), max_size=3), id_lists(resource)
                )
            )
            size = draw(SIZES)
        containers.append((available, must, size))
    return resource, containers


# -- the model -------------------------------------------------------------------------------


def expected_allocate(
    health: dict[str, bool], containers: Sequence[Sequence[str]]
) -> grpc.StatusCode:
    """What the host must answer: a device named in two containers, else the first
    container's first problem, in order."""
    seen: set[str] = set()
    for ids in containers:
        if seen & set(ids):
            return INVALID
        seen |= set(ids)
    for ids in containers:
        code = expected_known(health, ids, healthy=True)
        if code is not OK:
            return code
    return OK


def expected_known(health: dict[str, bool], ids: Sequence[str], healthy: bool) -> grpc.StatusCode:
    if not ids or len(set(ids)) != len(ids):
        return INVALID
    for device_id in ids:
        if device_id not in health:
            return INVALID
        if healthy and not health[device_id]:
            return PRECONDITION
    return OK


def expected_preferred(
    health: dict[str, bool], containers: Sequence[tuple[list[str], list[str], int]]
) -> grpc.StatusCode:
    for available, must, size in containers:
        available, must = list(dict.fromkeys(available)), list(dict.fromkeys(must))
        if size <= 0 or size > len(available):
            return INVALID
        if not set(must) <= set(available) or len(must) > size:
            return INVALID
        # IDs unknown to the device list are dropped: a preference never fails admission.
    return OK


def outcome(call: Any) -> tuple[grpc.StatusCode, Any]:
    """(OK, response) or (code, details); the code is recorded as a hypothesis event."""
    try:
        answer = OK, call()
    except grpc.RpcError as exc:
        answer = exc.code(), exc.details()
    event(answer[0].name)
    return answer


# -- the checks, shared by the fast tests and their soak variants --------------------


def check_allocate(fz: FuzzHost, request: tuple[str, list[list[str]]]) -> None:
    resource, containers = request
    message = pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devices_ids=ids) for ids in containers]
    )
    code, answer = outcome(lambda: fz.stubs[resource].Allocate(message, timeout=60))
    assert code == expected_allocate(fz.health[resource], containers), answer
    if code is OK:
        assert len(answer.container_responses) == len(containers)
        for ids, response in zip(containers, answer.container_responses, strict=True):
            assert response.envs["SCRIPTED_DEVICES"] == ",".join(ids)
            assert all(fz.health[resource][i] for i in ids)


def check_preferred(fz: FuzzHost, request: Any) -> None:
    resource, containers = request
    message = pb.PreferredAllocationRequest(
        container_requests=[
            pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size
            )
            for available, must, size in containers
        ]
    )
    code, answer = outcome(lambda: fz.stubs[resource].GetPreferredAllocation(message, timeout=60))
    assert code == expected_preferred(fz.health[resource], containers), answer
    if code is OK:
        assert len(answer.container_responses) == len(containers)
        for (available, must, size), response in zip(
            containers, answer.container_responses, strict=True
        ):
            chosen = list(response.deviceIDs)
            known = [d for d in dict.fromkeys(available) if d in fz.health[resource]]
            if len(known) < size:  # too few known devices left: no preference
                assert chosen == []
                continue
            assert len(chosen) == len(set(chosen)) == size
            assert set(must) & set(known) <= set(chosen) <= set(known)


def check_raw_bytes(fz: FuzzHost, method: str, payload: bytes) -> None:
    channel = fz.channels[WITH_HOOKS]
    path = f"/v1beta1.DevicePlugin/{method}"
    if method == "ListAndWatch":

        def call() -> Any:
            stream = channel.unary_stream(path)(payload, timeout=10)
            try:
                return next(stream)
            finally:
                stream.cancel()
    else:

        def call() -> Any:
            return channel.unary_unary(path)(payload, timeout=30)

    code, answer = outcome(call)
    if code == grpc.StatusCode.UNKNOWN:
        assert answer.startswith("Unexpected <class 'google.protobuf.message.DecodeError'>")
    else:
        assert code in (OK, INVALID, PRECONDITION), (code, answer)


def check_config_values(values: dict[str, Any]) -> None:
    header = {"apiVersion": "devicehost/v1", "kind": "HostConfig"}
    result = load(yaml.safe_dump({**header, **nest(values)}, allow_unicode=True))
    event(type(result).__name__)
    if isinstance(result, ConfigError):
        assert result.key in values, result
        assert result.key in str(result)
    else:
        for seconds in ("scan_interval", "hook_timeout", "initial_backoff", "max_backoff"):
            assert getattr(result, seconds) > 0
        assert result.log_level in ("debug", "info", "warning", "error")
        assert all(isinstance(v, dict) for v in result.drivers.values())


def check_config_document(document: str) -> None:
    result = load(document)
    event(type(result).__name__)
    if isinstance(result, ConfigError) and result.key:
        assert result.key in str(result)


# -- the RPCs --------------------------------------------------------------------------------


@FAST
@given(request=allocate_requests())
@example(request=(WITH_HOOKS, [["f-0"], ["f-6"]]))  # FAILED_PRECONDITION in the 2nd container
@example(request=(PLAIN, []))  # no container: an empty answer
@example(request=(PLAIN, [["p-0", "p-0"]]))
@example(request=(WITH_HOOKS, [["f-0"]] * 1000))  # many containers
@example(request=(WITH_HOOKS, [["f-0"] * 10_000]))  # 10 000 IDs, one repeated
@example(request=(WITH_HOOKS, [["\x00", "é" * 70, ""]]))
def test_allocate_fuzz(fz: FuzzHost, request: tuple[str, list[list[str]]]) -> None:
    """Allocate with arbitrary containers and IDs answers OK with one response per container
    for known Healthy IDs only, or exactly the predicted INVALID_ARGUMENT /
    FAILED_PRECONDITION; never UNKNOWN or INTERNAL."""
    check_allocate(fz, request)


@FAST
@given(request=preferred_requests())
@example(request=(PLAIN, [(["p-0", "p-1"], [], -(2**31))]))
@example(request=(PLAIN, [(["p-0", "p-1"], [], 2**31 - 1)]))
@example(request=(PLAIN, [(["p-0", "p-0", "p-1"], ["p-1", "p-1"], 2)]))  # repeats collapse
@example(request=(WITH_HOOKS, [([f"f-{i}" for i in range(8)] * 1250, ["f-7"], 3)]))
def test_get_preferred_allocation_fuzz(fz: FuzzHost, request: Any) -> None:
    """GetPreferredAllocation with arbitrary lists and sizes (negative, zero, huge) answers
    `size` distinct available IDs including every must-include one, or exactly the predicted
    INVALID_ARGUMENT; never UNKNOWN or INTERNAL."""
    check_preferred(fz, request)


@FAST
@given(data=st.data())
def test_pre_start_container_fuzz(fz: FuzzHost, data: st.DataObject) -> None:
    """PreStartContainer with arbitrary ID lists answers OK for known IDs (whatever their
    health) or INVALID_ARGUMENT; never UNKNOWN or INTERNAL."""
    resource = data.draw(st.sampled_from([WITH_HOOKS, PLAIN]))
    ids = data.draw(st.one_of(id_lists(resource), huge_list(resource)))
    message = pb.PreStartContainerRequest(devices_ids=ids)
    code, answer = outcome(lambda: fz.stubs[resource].PreStartContainer(message, timeout=60))
    assert code == expected_known(fz.health[resource], ids, healthy=False), answer


@settings(max_examples=20, deadline=None)
@given(streams=st.integers(1, 12), read=st.lists(st.booleans(), min_size=12, max_size=12))
def test_list_and_watch_opening_fuzz(fz: FuzzHost, streams: int, read: list[bool]) -> None:
    """Opening any number of ListAndWatch streams at once, reading the first list or not,
    then dropping them: each first list is the whole truth, and the kubelet's own stream
    still receives the next change."""
    resource = WITH_HOOKS
    truth = {i: "Healthy" if ok else "Unhealthy" for i, ok in fz.health[resource].items()}
    opened = [fz.stubs[resource].ListAndWatch(pb.Empty(), timeout=30) for _ in range(streams)]
    try:
        for stream, wanted in zip(opened, read, strict=False):
            if wanted:
                first = next(stream)
                assert {d.ID: d.health for d in first.devices} == truth
    finally:
        for stream in opened:
            stream.cancel()
    driver = scripted_control(fz.host, resource)
    driver.set_health(resource, "f-0", False)
    fz.kubelet.wait_health(resource, "f-0", "Unhealthy")
    driver.set_health(resource, "f-0", True)
    fz.kubelet.wait_health(resource, "f-0", "Healthy")


METHODS = ["Allocate", "GetPreferredAllocation", "PreStartContainer", "GetDevicePluginOptions"]
#: Well-formed requests to start mutations from, so that many payloads still decode.
SEEDS = [
    pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devices_ids=["f-0", "f-1"])]
    ).SerializeToString(),
    pb.PreferredAllocationRequest(
        container_requests=[
            pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=["f-0", "f-1", "f-2"],
                must_include_deviceIDs=["f-1"],
                allocation_size=2,
            )
        ]
    ).SerializeToString(),
    pb.PreStartContainerRequest(devices_ids=["f-3"]).SerializeToString(),
]


@st.composite
def mutated(draw: st.DrawFn, max_size: int) -> bytes:
    """A well-formed request with a few bytes replaced, inserted or cut off."""
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        action = draw(st.sampled_from(["replace", "insert", "truncate"]))
        if action == "truncate":
            del data[at:]
        elif action == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif at < len(data):
            data[at] = draw(st.integers(0, 255))
    return bytes(data[:max_size])


def payloads(max_size: int) -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=max_size), mutated(max_size))


@settings(max_examples=60, deadline=None)
@given(method=st.sampled_from([*METHODS, "ListAndWatch"]), payload=payloads(300))
def test_raw_bytes_on_every_method(fz: FuzzHost, method: str, payload: bytes) -> None:
    """Arbitrary bytes as a request: the host answers OK, INVALID_ARGUMENT or
    FAILED_PRECONDITION; the only other answer allowed is gRPC's own refusal to decode a
    corrupt protobuf (UNKNOWN naming DecodeError), which happens before the host runs."""
    check_raw_bytes(fz, method, payload)


SOAK = settings(
    max_examples=1500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.slow
@SOAK
@given(request=allocate_requests())
def test_allocate_fuzz_soak(fz: FuzzHost, request: tuple[str, list[list[str]]]) -> None:
    """test_allocate_fuzz's check (exact refusal code, one answer per container, only
    Healthy known devices granted) over 1500 examples."""
    check_allocate(fz, request)


@pytest.mark.slow
@SOAK
@given(request=preferred_requests())
def test_get_preferred_allocation_fuzz_soak(fz: FuzzHost, request: Any) -> None:
    """test_get_preferred_allocation_fuzz's check (exact refusal code, a valid choice)
    over 1500 examples."""
    check_preferred(fz, request)


@pytest.mark.slow
@SOAK
@given(method=st.sampled_from([*METHODS, "ListAndWatch"]), payload=payloads(2000))
def test_raw_bytes_on_every_method_soak(fz: FuzzHost, method: str, payload: bytes) -> None:
    """test_raw_bytes_on_every_method's check (no status but OK, INVALID_ARGUMENT,
    FAILED_PRECONDITION or gRPC's decode refusal) over 1500 payloads of up to 2000 bytes."""
    check_raw_bytes(fz, method, payload)


def test_host_still_answers_after_the_fuzzing(fz: FuzzHost) -> None:
    """After every fuzz test above, both resources still allocate and stream the truth."""
    fz.still_answering()
    assert all(t.is_alive() for t in threading.enumerate() if t.name == "devicehost")


# -- config files ----------------------------------------------------------------------------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(TEXT, max_size=30),
    st.sampled_from(
        ["", "0", "1e400", "-1", "nan", "inf", "true", "no", "/", "a,b", ":9400", "json"]
    ),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(TEXT, max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
KEYS = [s.key for s in SETTINGS]
CONFIG_DIR = Path(tempfile.mkdtemp(prefix="dh-config-fuzz-"))


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """{"a.b": 1} → {"a": {"b": 1}}."""
    doc: dict[str, Any] = {}
    for key, value in flat.items():
        *parents, leaf = key.split(".")
        node = doc
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    return doc


def load(text: str) -> HostConfig | ConfigError:
    path = CONFIG_DIR / "config.yaml"
    path.write_text(text)
    try:
        return load_config(path, env={})
    except ConfigError as exc:
        return exc


SECONDS = st.one_of(
    st.floats(0.001, 1e6), st.integers(1, 10**6), st.from_regex(r"\A[0-9]{1,4}(\.[0-9]{1,3})?\Z")
)
NAMES = st.lists(st.from_regex(r"\A[a-z][a-z0-9_-]{0,10}\Z"), max_size=3)
#: Values an operator could mean, per key, to mix with the arbitrary ones.
PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "pluginDir": st.sampled_from(["/var/lib/kubelet/device-plugins", "/tmp/dp", "relative/dir"]),
    "root": st.sampled_from(["/", "/host"]),
    "podResourcesSocket": st.sampled_from(
        ["", None, "/var/lib/kubelet/pod-resources/kubelet.sock"]
    ),
    "nodeName": st.from_regex(r"\A[a-z0-9.-]{0,20}\Z"),
    "enabledDrivers": st.one_of(st.none(), NAMES, NAMES.map(",".join)),
    "disabledDrivers": st.one_of(NAMES, NAMES.map(",".join)),
    "scanIntervalSeconds": SECONDS,
    "watchedScanIntervalSeconds": SECONDS,
    "hookTimeoutSeconds": SECONDS,
    "podIdentityTimeoutSeconds": SECONDS,
    "driverStartTimeoutSeconds": SECONDS,
    "unavailableRetrySeconds": st.one_of(SECONDS, st.sampled_from([0, "0", "0.0"])),
    "registration.initialBackoffSeconds": SECONDS,
    "registration.maxBackoffSeconds": SECONDS,
    "registration.rejectedBackoffSeconds": SECONDS,
    "pluginDirHandoverSeconds": st.one_of(SECONDS, st.sampled_from([0, "0", "0.0"])),
    "podUid": st.sampled_from(["", "1f2e3d4c-0000-4000-8000-000000000001", "-x", "a b", 7]),
    "simulate": st.sampled_from([True, False, "true", "off", "1"]),
    "simulateNode": st.sampled_from(["", "dgx-h100", "atlas-800-9000"]),
    "simulateDir": st.sampled_from(["", None, "/var/lib/devicehost-simulation", "relative/dir"]),
    "log.format": st.sampled_from(["text", "json", "JSON"]),
    "log.level": st.sampled_from(["debug", "info", "warning", "error", "INFO"]),
    "metrics.address": st.sampled_from(["", "127.0.0.1:9400", ":9400", "[::1]:9400"]),
    "tracing.otlpEndpoint": st.sampled_from(["", "http://jaeger:4317"]),
    "labels.featureFile": st.sampled_from(["", "/etc/kubernetes/node-feature-discovery/x"]),
    "profiles": st.sampled_from(
        [
            None,
            [],
            [{"name": "p", "match": {"nodeNames": ["n-*"]}, "drivers": {"a": {}}}],
            [
                {
                    "name": "p",
                    "match": {"nodeLabels": {"x/y": "z"}},
                    "resources": {"a/b": {"api": "dra"}},
                }
            ],
            [{"name": "p", "match": {"nodeLabels": {"x/y": True}}, "resources": {"a/b": "dra"}}],
            [{"name": "p", "match": {"nodeLabels": []}}],
        ]
    ),
    "drivers": st.dictionaries(
        st.from_regex(r"\A[a-z]{1,8}\Z"),
        st.one_of(st.none(), st.dictionaries(st.text(max_size=5), SCALARS, max_size=3)),
        max_size=3,
    ),
    "cdi.enabled": st.sampled_from([True, False, "true", "off"]),
    "cdi.dir": st.sampled_from(["/var/run/cdi", "/host/var/run/cdi", "relative/dir"]),
    "cdi.drivers": st.one_of(NAMES, NAMES.map(",".join)),
    "limits.devicesPerResource": st.sampled_from([1, 10_000, 100_000, 0, 100_001, "500", -1]),
    "limits.resourcesPerDriver": st.sampled_from([1, 64, 256, 0, 257, "8", 2.5]),
    "limits.zombiesPerDriver": st.sampled_from([1, 100, 100_000, 0, 100_001, "5", -3]),
    "containerEdits.allow": st.sampled_from(
        [None, {}, {"a": ["LD_LIBRARY_PATH", "/etc/ld.so.conf.d"]}, {"a": "PATH"}, {"a": [""]}]
    ),
    "resources": st.sampled_from(
        [None, {}, {"a/b": {"api": "dra"}}, {"a/b": {"api": "x"}}, {"a/b": "dra"}, {1: {}}, []]
    ),
    "dra.kubeletDir": st.sampled_from(["/var/lib/kubelet", "relative", ""]),
    "dra.driverNames": st.sampled_from([None, {}, {"a": "gpu.example.com"}, {"a": ""}, {"a": 1}]),
    "dra.unhealthy": st.sampled_from(["withdraw", "taint", "TAINT", "drop", 1]),
    "dra.kubeconfig": st.sampled_from(["", None, "/etc/kube/config"]),
}
assert set(PLAUSIBLE) == set(KEYS)


@st.composite
def known_key_values(draw: st.DrawFn) -> dict[str, Any]:
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True))
    return {k: draw(st.one_of(PLAUSIBLE[k], PLAUSIBLE[k], VALUES)) for k in keys}


@settings(max_examples=100, deadline=None)
@given(values=known_key_values())
def test_config_values_for_known_keys_fuzz(values: dict[str, Any]) -> None:
    """Arbitrary values under known keys give a HostConfig whose values are sane, or a
    ConfigError naming one of those keys in its message; never another exception."""
    check_config_values(values)


DOCUMENTS = st.one_of(
    VALUES.map(lambda v: yaml.safe_dump(v, allow_unicode=True)),
    st.dictionaries(
        st.one_of(st.sampled_from([*KEYS, "apiVersion", "kind"]), st.text(TEXT, max_size=12)),
        VALUES,
        max_size=5,
    ).map(
        lambda d: yaml.safe_dump(
            {"apiVersion": "devicehost/v1", "kind": "HostConfig", **d}, allow_unicode=True
        )
    ),
    st.text(TEXT, max_size=200),
)


@settings(max_examples=100, deadline=None)
@given(document=DOCUMENTS)
def test_config_documents_fuzz(document: str) -> None:
    """An arbitrary YAML document (or arbitrary text) gives a HostConfig or a ConfigError
    whose message names its key when it has one; never another exception."""
    check_config_document(document)


@pytest.mark.slow
@settings(max_examples=3000, deadline=None)
@given(values=known_key_values())
def test_config_values_for_known_keys_fuzz_soak(values: dict[str, Any]) -> None:
    """test_config_values_for_known_keys_fuzz's check (HostConfig or a ConfigError naming
    the key) over 3000 examples."""
    check_config_values(values)


@pytest.mark.slow
@settings(max_examples=3000, deadline=None)
@given(document=DOCUMENTS)
def test_config_documents_fuzz_soak(document: str) -> None:
    """test_config_documents_fuzz's check (HostConfig or ConfigError, nothing else) over
    3000 documents."""
    check_config_document(document)


HEADER = "apiVersion: devicehost/v1\nkind: HostConfig\n"


@pytest.mark.parametrize(
    ("document", "key"),
    [
        pytest.param(
            HEADER + "scanIntervalSeconds: " + "9" * 400, "scanIntervalSeconds", id="float-overflow"
        ),
        pytest.param(HEADER + "hookTimeoutSeconds: " + "9" * 5000, "", id="int-digit-limit"),
        pytest.param(HEADER + "drivers: " + "[" * 2000 + "]" * 2000, "", id="deep-nesting"),
    ],
)
def test_config_edge_documents_are_config_errors(document: str, key: str) -> None:
    """Documents at the edges of YAML and Python (huge integers, very deep nesting) are a
    ConfigError (naming the key when there is one), not an OverflowError, ValueError or
    RecursionError out of load_config."""
    result = load(document)
    assert isinstance(result, ConfigError), type(result)
    assert key in str(result)


# -- the size of a refusal -------------------------------------------------------------------


def test_refusal_of_a_huge_request_stays_short(fz: FuzzHost) -> None:
    """A 10 000-ID request with a repeated ID, or a 100 000-character unknown ID, is refused
    with INVALID_ARGUMENT and a message of a few hundred bytes, which every gRPC client
    receives as such (here the stand-in's, with gRPC's default metadata limit)."""
    for ids in (["f-0"] * 10_000, ["x" * 100_000]):
        with pytest.raises(grpc.RpcError) as refused:
            fz.kubelet.allocate(WITH_HOOKS, [ids])
        assert refused.value.code() == INVALID
        assert len(refused.value.details()) < 1000
