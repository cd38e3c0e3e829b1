"""Which pod and container received some devices — from the kubelet's PodResources API.

Allocate carries device IDs only. After it returns, the kubelet records the assignment, and
``List`` on ``pod-resources/kubelet.sock`` shows it. The resolver asks there, off the
request path, with a few retries, and never longer than a short timeout per call: a
missing or hanging socket costs spans their pod attributes, never a pod its start.
PodResources has no pod UID; the kubelet's device-manager checkpoint has it
(``checkpoint``), written just after the assignment shows in ``List``, so a pod found
without its UID is looked for again while retries last.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import grpc

from devicehost._proto.podresources.v1 import api_pb2 as pr
from devicehost._proto.podresources.v1 import api_pb2_grpc as pr_grpc
from devicehost.kubelet.deviceplugin.checkpoint import DeviceCheckpoint
from devicehost.telemetry.pods import PodIdentity

log = logging.getLogger(__name__)

RETRY_DELAYS = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)
#: Look for this long (podIdentityTimeoutSeconds): after the delays above, every last one
#: again. A pod on a busy node can take tens of seconds to show in List (three pods
#: allocated together once got one identity of three within the delays alone).
TIMEOUT_SECONDS = 30.0
CALL_TIMEOUT_SECONDS = 1.0
#: A List answer is read at most this large: a pod with devices takes a few hundred bytes
#: (45 000 pods answered 2 MB), and a larger answer is refused by gRPC, costing spans
#: their pod attributes only.
MAX_ANSWER_BYTES = 4 * 1024 * 1024
#: An answer this fresh is reused by every lookup instead of asking again (half the first
#: retry delay, so a retry always asks anew).
FRESH_SECONDS = 0.025
#: ... or, when getting and indexing it took longer, for this many times what it took: on
#: a node whose answers are large (45 000 pods: 2 MB), lookups then take at most a tenth
#: of the host's time, and Allocates barely move (docs/reliability.md, the hostile_files
#: benchmark). A new pod's lookup waits for a fresh answer through its retries (3 s).
REUSE_PER_COST = 9.0

#: (resource, device ID) → (pod, namespace, container) of one List answer
Index = dict[tuple[str, str], tuple[str, str, str]]


def index_of(response: pr.ListPodResourcesResponse) -> Index:
    """Who holds each device, from one List answer: the first container that names it."""
    index: Index = {}
    for pod in response.pod_resources:
        for container in pod.containers:
            owner = (pod.name, pod.namespace, container.name)
            for devices in container.devices:
                for device_id in devices.device_ids:
                    index.setdefault((devices.resource_name, device_id), owner)
    return index


class PodResolver:
    """Looks device IDs up in the kubelet's PodResources List.

    However many Allocates want a pod at once, one List call is in flight at a time and
    its answer serves every one of them (and any lookup within ``FRESH_SECONDS``, or
    ``REUSE_PER_COST`` times what the answer cost); the answer, at most
    ``MAX_ANSWER_BYTES``, is indexed in a thread, never on the event loop.
    """

    def __init__(
        self,
        socket: Path | None,
        retry_delays: Sequence[float] = RETRY_DELAYS,
        call_timeout: float = CALL_TIMEOUT_SECONDS,
        checkpoint: Path | None = None,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        timeout: float = TIMEOUT_SECONDS,
    ) -> None:
        """``checkpoint``: the kubelet's ``kubelet_internal_checkpoint``, for pod UIDs
        (None: spans carry none)."""
        self.socket = socket
        self.checkpoint = DeviceCheckpoint(checkpoint) if checkpoint is not None else None
        self.retry_delays = tuple(retry_delays)
        self.timeout = timeout
        self.call_timeout = call_timeout
        self.max_answer_bytes = max_answer_bytes
        self._channel: grpc.aio.Channel | None = None
        self._said_absent = False
        self._listing: asyncio.Future[Index | None] | None = None
        self._answer: tuple[float, Index] | None = None
        self._fresh_for = FRESH_SECONDS

    @property
    def enabled(self) -> bool:
        return self.socket is not None

    def _available(self) -> bool:
        if self.socket is None:
            return False
        if self.socket.exists():
            self._said_absent = False
            return True
        if not self._said_absent:
            self._said_absent = True
            log.info(
                "PodResources socket %s is absent: spans carry no pod identity until it appears",
                self.socket,
            )
        return False

    async def lookup(self, resource: str, device_ids: Sequence[str]) -> PodIdentity | None:
        """The container holding all of ``device_ids``, from a List answer; or None."""
        if not self._available():
            return None
        index = await self._index()
        if index is None:
            return None
        owners = {index.get((resource, device_id)) for device_id in device_ids}
        if len(owners) != 1 or None in owners:
            return None
        owner = owners.pop()
        assert owner is not None
        pod, namespace, container = owner
        uid = None
        if self.checkpoint is not None:  # a file on the node: off the loop
            uid = await asyncio.to_thread(self.checkpoint.pod_uid, resource, container, device_ids)
        return PodIdentity(pod, namespace, container, uid or "")

    async def _index(self) -> Index | None:
        """A fresh List answer's index: the one just taken, the one being taken, or a new
        one; None when the kubelet did not answer."""
        loop = asyncio.get_running_loop()
        if self._answer is not None and loop.time() - self._answer[0] <= self._fresh_for:
            return self._answer[1]
        if self._listing is None or self._listing.done():
            self._listing = asyncio.ensure_future(self._list())
        return await asyncio.shield(self._listing)

    async def _list(self) -> Index | None:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(
                f"unix://{self.socket}",
                options=[("grpc.max_receive_message_length", self.max_answer_bytes)],
            )
        stub = pr_grpc.PodResourcesListerStub(self._channel)
        loop = asyncio.get_running_loop()
        asked = loop.time()
        try:
            response = await stub.List(pr.ListPodResourcesRequest(), timeout=self.call_timeout)
        except grpc.aio.AioRpcError as exc:
            log.debug("PodResources List failed: %s", exc.details())
            return None
        index = await asyncio.to_thread(index_of, response)
        now = loop.time()
        self._answer = (now, index)
        self._fresh_for = max(FRESH_SECONDS, REUSE_PER_COST * (now - asked))
        return index

    async def resolve(self, resource: str, device_ids: Sequence[str]) -> PodIdentity | None:
        """Retry ``lookup`` while the kubelet records the assignment (for ``timeout``
        seconds); None if it never shows.
        A pod found without its UID is asked for again while the checkpoint exists, for
        as long as ``retry_delays`` add up to (the kubelet writes the checkpoint just
        after List shows the pod), and returned as found then."""
        found = None
        uid_deadline = None
        loop = asyncio.get_running_loop()
        for delay in self._delays():
            await asyncio.sleep(delay)
            identity = await self.lookup(resource, device_ids) or found
            found = identity
            if identity is not None and (identity.uid or not self._checkpoint_exists()):
                return identity
            if not self._available():
                return found
            if found is not None:
                uid_deadline = uid_deadline or loop.time() + sum(self.retry_delays)
                if loop.time() >= uid_deadline:
                    return found
        return found

    def _delays(self) -> Iterator[float]:
        """``retry_delays``, then the last of them again, until ``timeout`` is spent."""
        spent = 0.0
        delays = list(self.retry_delays)
        while delays and spent < self.timeout:
            delay = min(delays.pop(0) if len(delays) > 1 else delays[0], self.timeout - spent)
            spent += delay
            yield delay

    def _checkpoint_exists(self) -> bool:
        return self.checkpoint is not None and self.checkpoint.path.exists()

    async def close(self) -> None:
        if self._listing is not None:
            self._listing.cancel()
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
