"""NodePrepareResources and NodeUnprepareResources for one DRA driver, off the wire.

A claim's devices are composed exactly as an Allocate composes them (the driver's
``allocate`` hook where it has one, ``compose``, then the policy plugins), per resource of
the driver, its ``pre_start`` hook called as before a container starts (both through
``DriverHooks``, outside the driver's lock), and the result is written as one CDI
spec per claim under the project's vendor: the composed edits are the spec's
``containerEdits``, applied once when any of the claim's devices is requested, and each
device is an entry of its own. The kubelet is answered with those entries' CDI names
(and any CDI names the driver's devices declare themselves). DRA has no channel for
container annotations, so those are left out with a log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from devicehost.edits.cdi import VENDOR, container_edits, minimum_version, write_atomically
from devicehost.edits.compose import CompositionClash, PolicyChain, compose
from devicehost.kubelet.dra.checkpoint import UID_RE, Checkpoint, PreparedClaim, PreparedDevice
from devicehost.kubelet.dra.claims import (
    ClaimAllocation,
    ClaimProblem,
    ClaimSource,
    allocation_of,
)
from devicehost.kubelet.dra.naming import device_name
from devicehost.model import NO_EDITS, ContainerEdits, Device, ResourceSpec

log = logging.getLogger(__name__)

MAX_CLASS_LENGTH = 63
#: A claim UID as the API server makes them (a UUID); it is part of a file name here.
_UID_RE = UID_RE
#: How long one claim's read may take (the kubelet's own call has no deadline of its own
#: worth waiting for: it retries a failed prepare).
CLAIM_READ_SECONDS = 10.0
#: How often a call waiting for another instance's lock tries again.
LOCK_POLL_SECONDS = 0.01


class PrepareError(Exception):
    """One claim could not be prepared; the message goes to the kubelet."""


#: The driver's hooks for one resource's devices of a claim: its allocation-time edits
#: (``allocate``; empty when it has none), after ``pre_start`` where it has one.
#: ``PrepareError`` when a hook fails or answers what the host refuses.
DriverHooks = Callable[[str, list[str]], Awaitable[ContainerEdits]]
#: Told the claim as the API server gave it, once read (the pod it is reserved for).
ClaimRead = Callable[[Mapping[str, Any]], None]


@dataclass(frozen=True, kw_only=True)
class PoolView:
    """The driver's pool as it is now: each resource's spec and device snapshot."""

    pool: str
    specs: Mapping[str, ResourceSpec]
    snapshots: Mapping[str, Mapping[str, Device]]

    @cached_property
    def names(self) -> dict[str, tuple[str, str]]:
        """DRA device name → (resource, device ID), for every device in the pool now."""
        return {
            device_name(resource, device_id): (resource, device_id)
            for resource, devices in self.snapshots.items()
            for device_id in devices
        }


def claim_class(driver: str) -> str:
    """The CDI class of this driver's claim specs: ``dra.<driver>`` (a hash if too long)."""
    name = f"dra.{driver}"
    if len(name) <= MAX_CLASS_LENGTH:
        return name
    return "dra." + hashlib.sha256(driver.encode()).hexdigest()[:32]


class Preparer:
    """Prepares and unprepares one DRA driver's claims; one call at a time."""

    def __init__(
        self,
        driver: str,
        claims: ClaimSource,
        pool: Callable[[], PoolView],
        cdi_dir: Path,
        checkpoint: Checkpoint,
        policies: PolicyChain | None = None,
        claim_timeout: float = CLAIM_READ_SECONDS,
        hooks: DriverHooks | None = None,
        lock_path: Path | None = None,
    ) -> None:
        """``claim_timeout``: how long one claim's read from the API server may take;
        ``hooks``: the driver's hooks (none: compose from the snapshot alone);
        ``lock_path``: the file every instance of this driver on the node locks around a
        change of its claims (two run during a rolling update)."""
        self.driver = driver
        self.hooks = hooks
        self.claim_timeout = claim_timeout
        self.claims = claims
        self.pool = pool
        self.cdi_dir = cdi_dir
        self.checkpoint = checkpoint
        self.policies = policies
        self.kind = f"{VENDOR}/{claim_class(driver)}"
        self.lock_path = lock_path
        self._lock = asyncio.Lock()
        self._orphans_removed = False
        fd = self._try_lock()
        if fd is not False:  # else another instance is mid-call: the first call here does it
            try:
                self.checkpoint.reload()
                self._remove_orphans()
            finally:
                _unlock(fd)

    def spec_path(self, uid: str) -> Path:
        return self.cdi_dir / f"{VENDOR}-{claim_class(self.driver)}_{uid}.json"

    def _try_lock(self) -> int | Literal[False] | None:
        """The lock file's descriptor, locked; None without a lock file; False when another
        instance holds it."""
        if self.lock_path is None:
            return None
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            self.lock_path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_path, flags, 0o600)
        except OSError as exc:
            raise PrepareError(
                f"cannot open the lock file {self.lock_path}: {exc.strerror or exc}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        return fd

    @contextlib.asynccontextmanager
    async def _shared(self) -> AsyncIterator[None]:
        """One change of this driver's claims at a time, in this process and across every
        instance of the driver on the node: the process's lock, then the lock file (waited
        for without blocking the loop), and the checkpoint read again under both, since
        another instance may have prepared or unprepared a claim meanwhile."""
        async with self._lock:
            while (fd := self._try_lock()) is False:
                await asyncio.sleep(LOCK_POLL_SECONDS)
            try:
                self.checkpoint.reload()
                if not self._orphans_removed:
                    self._remove_orphans()
                yield
            finally:
                _unlock(fd)

    def _remove_orphans(self) -> None:
        """Remove claim specs of this driver that no checkpointed claim names (a crash
        between writing a spec and the checkpoint)."""
        self._orphans_removed = True
        kept = {self.spec_path(uid) for uid in self.checkpoint.claims}
        for path in self.cdi_dir.glob(f"{VENDOR}-{claim_class(self.driver)}_*.json"):
            if path not in kept:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    log.info("DRA driver %s: removed the orphaned claim spec %s", self.driver, path)

    async def prepare(
        self, namespace: str, name: str, uid: str, on_read: ClaimRead | None = None
    ) -> PreparedClaim:
        """Prepare the claim (or answer as before when it is prepared already)."""
        if not _UID_RE.match(uid):
            raise PrepareError(f"claim {namespace}/{name}: UID {uid!r:.80} is not a UID")
        async with self._shared():
            done = self.checkpoint.claims.get(uid)
        if done is not None:
            return done
        # Read without the lock, and bounded: one claim whose read hangs must not hold every
        # other prepare and unprepare of this driver.
        try:
            async with asyncio.timeout(self.claim_timeout):
                claim = await self.claims.get(namespace, name)
            allocation = allocation_of(claim, self.driver, uid)
        except TimeoutError:
            raise PrepareError(
                f"claim {namespace}/{name}: reading it took over {self.claim_timeout:g} s; "
                "the kubelet asks again"
            ) from None
        except ClaimProblem as exc:
            raise PrepareError(str(exc)) from None
        if on_read is not None:
            on_read(claim)
        view = self.pool()
        by_resource, requests = self._resolve(view, allocation)
        extras = await self._driver_edits(by_resource)  # without the lock: hooks take time
        async with self._shared():
            done = self.checkpoint.claims.get(uid)  # prepared meanwhile by another call
            if done is not None:
                return done
            edits = self._compose(view, by_resource, extras, f"claim {namespace}/{name}")
            path = self.spec_path(uid)
            entries = {d: f"{uid}-{d}" for d in requests}
            extra_ids = list(edits.cdi_devices)
            devices = []
            for index, (device, names) in enumerate(requests.items()):
                ids = [f"{self.kind}={entries[device]}", *(extra_ids if index == 0 else [])]
                devices.append(
                    PreparedDevice(
                        requests=tuple(names), pool=view.pool, device=device, cdi_ids=tuple(ids)
                    )
                )
            if entries:
                try:
                    write_atomically(path, json.dumps(self._spec(edits, entries), indent=2) + "\n")
                except OSError as exc:
                    raise PrepareError(
                        f"claim {namespace}/{name}: cannot write the CDI spec {path}: "
                        f"{exc.strerror or exc}"
                    ) from None
            prepared = PreparedClaim(
                namespace=namespace, name=name, spec_file=str(path), devices=tuple(devices)
            )
            try:
                self.checkpoint.put(uid, prepared)
            except OSError as exc:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                raise PrepareError(
                    f"claim {namespace}/{name}: cannot write the checkpoint "
                    f"{self.checkpoint.path}: {exc.strerror or exc}"
                ) from None
            log.info(
                "DRA driver %s: claim %s/%s (%s) prepared: %s",
                self.driver,
                namespace,
                name,
                uid,
                ", ".join(entries) or "no device of this driver",
            )
            return prepared

    def _resolve(
        self, view: PoolView, allocation: ClaimAllocation
    ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """The claim's device IDs per resource, and each DRA device's request names; a
        device not in this driver's pool now is an error."""
        by_resource: dict[str, list[str]] = {}
        requests: dict[str, list[str]] = {}
        for allocated in allocation.devices:
            found = view.names.get(allocated.device) if allocated.pool == view.pool else None
            if found is None:
                raise PrepareError(
                    f"claim {allocation.namespace}/{allocation.name}: device "
                    f"{allocated.device!r} of pool {allocated.pool!r} is not in driver "
                    f"{self.driver}'s pool on this node"
                )
            resource, device_id = found
            if device_id not in by_resource.setdefault(resource, []):
                by_resource[resource].append(device_id)
            requests.setdefault(allocated.device, []).append(allocated.request)
        return by_resource, requests

    async def _driver_edits(
        self, by_resource: Mapping[str, list[str]]
    ) -> dict[str, ContainerEdits]:
        """Each resource's allocation-time edits from the driver's hooks."""
        if self.hooks is None:
            return {}
        return {resource: await self.hooks(resource, ids) for resource, ids in by_resource.items()}

    def _compose(
        self,
        view: PoolView,
        by_resource: Mapping[str, list[str]],
        extras: Mapping[str, ContainerEdits],
        where: str,
    ) -> ContainerEdits:
        """Each resource's devices composed as Allocate composes them, then joined; a
        key two resources set differently is a clash."""
        joined = ContainerEdits()
        for resource, ids in by_resource.items():
            try:
                extra = extras.get(resource, NO_EDITS)
                edits = compose(view.specs[resource], view.snapshots[resource], ids, extra)
                if self.policies is not None:
                    edits = self.policies.apply(resource, ids, edits)
            except CompositionClash as clash:
                raise PrepareError(f"{where}, resource {resource!r}: {clash}") from None
            for key, value in edits.envs.items():
                if joined.envs.get(key, value) != value:
                    raise PrepareError(
                        f"{where}: env {key!r} is {joined.envs[key]!r} from one resource and "
                        f"{value!r} from {resource!r}"
                    )
            joined = joined.merged(edits)
        if joined.annotations:
            log.warning(
                "DRA driver %s, %s: container annotations %s cannot be carried by DRA; left out",
                self.driver,
                where,
                ", ".join(sorted(joined.annotations)),
            )
        return joined

    def _spec(self, edits: ContainerEdits, entries: Mapping[str, str]) -> dict[str, Any]:
        """The claim's CDI spec: its composed edits once, and one entry per device (CDI
        refuses an entry without edits, so each names itself in one env variable)."""
        document: dict[str, Any] = {
            "cdiVersion": "",
            "kind": self.kind,
            "devices": [
                {"name": entry, "containerEdits": {"env": [self._marker(entry)]}}
                for entry in entries.values()
            ],
        }
        common = container_edits(edits)
        if common:
            document["containerEdits"] = common
        document["cdiVersion"] = minimum_version(document)
        return document

    def _marker(self, entry: str) -> str:
        """``DEVICEHOST_DRA_<hash>=<qualified name>``: one variable per entry, so two
        claims in one container never set the same one."""
        qualified = f"{self.kind}={entry}"
        digest = hashlib.sha256(qualified.encode()).hexdigest()[:16].upper()
        return f"DEVICEHOST_DRA_{digest}={qualified}"

    async def unprepare(self, uid: str) -> None:
        """Unprepare the claim: forget it, then remove its spec. A claim never prepared
        here, or unprepared already, is done."""
        if not _UID_RE.match(uid):
            raise PrepareError(f"UID {uid!r:.80} is not a UID")
        async with self._shared():
            claim = self.checkpoint.drop(uid)
            # Recomputed from the UID, never taken from the checkpoint: a file on the node
            # others can reach must not name what is deleted.
            with contextlib.suppress(FileNotFoundError):
                self.spec_path(uid).unlink()
            if claim is not None:
                log.info(
                    "DRA driver %s: claim %s/%s (%s) unprepared",
                    self.driver,
                    claim.namespace,
                    claim.name,
                    uid,
                )


def _unlock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # closing the descriptor releases its lock
