"""The drivers' node labels, written as a node-feature-discovery local feature file.

Each driver may describe its hardware (``devicehost_labels``); the host writes every label
as ``devicehost.feature.node.kubernetes.io/<driver>.<key>=<value>`` into one file in NFD's
``features.d`` directory, and NFD's worker turns the lines into node labels. devicehost
itself needs no Kubernetes API access for that.

The format and namespace follow node-feature-discovery's customization guide ("Local
feature source": one ``<name>[=<value>]`` per line, ``#`` comments, files whose names start
with a dot are ignored; kubernetes-sigs/node-feature-discovery
``docs/usage/customization-guide.md`` and ``source/local/local.go``) and its label rules
(``feature.node.kubernetes.io`` and its sub-namespaces are allowed without extra
nfd-master flags, so ``devicehost.feature.node.kubernetes.io`` needs none). The file is
replaced atomically — written under a dot-name NFD skips, then renamed — so NFD never reads
half a file; it is rewritten after every scan that changed a driver's devices, and removed
when the host stops cleanly, so a node without devicehost loses the labels.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devicehost.errors import DriverError

if TYPE_CHECKING:
    from devicehost.drivers.snapshots import ResourceState
    from devicehost.drivers.supervisor import DriverHandle as Driver

log = logging.getLogger(__name__)

NAMESPACE = "devicehost.feature.node.kubernetes.io"
HOOK = "devicehost_labels"
#: A failed write of the file is tried again after this long, doubling up to the cap.
FIRST_RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 60.0

# The shared vocabulary's rules (docs/hooks.md): keys lower case, values as Kubernetes label
# values (which must also start and end with a letter or digit, or be empty).
_KEY = re.compile(r"[a-z0-9]([a-z0-9.-]{0,38}[a-z0-9])?")
_VALUE = re.compile(r"([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?")
# The name part after the namespace: a Kubernetes qualified name, at most 63 characters.
_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")


def clean_labels(driver: str, answer: Any) -> dict[str, str]:
    """The valid labels of one driver's ``devicehost_labels`` answer (plain data from its
    worker), as full label names; every bad entry is dropped with a log line naming the
    driver, the key and the rule."""
    if answer is None:
        return {}
    if not isinstance(answer, Mapping):
        log.error(
            "driver %r, hook %s: returned %s, expected a mapping of key to value; ignored",
            driver,
            HOOK,
            type(answer).__name__,
        )
        return {}
    labels: dict[str, str] = {}
    for key, value in answer.items():
        problem = _problem(driver, key, value)
        if problem:
            log.error("driver %r, hook %s: %s; label dropped", driver, HOOK, problem)
            continue
        labels[f"{NAMESPACE}/{driver}.{key}"] = value
    return labels


def _problem(driver: str, key: Any, value: Any) -> str | None:
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        return f"key {key!r} is not 1-40 characters of [a-z0-9.-] starting and ending alphanumeric"
    if not isinstance(value, str) or not _VALUE.fullmatch(value):
        return (
            f"key {key!r}: value {value!r} is not a string of at most 63 characters of "
            "[A-Za-z0-9._-] starting and ending alphanumeric"
        )
    if not _NAME.fullmatch(f"{driver}.{key}"):
        return f"label name {driver}.{key!r} is not a valid Kubernetes label name"
    return None


def render(labels: Mapping[str, str]) -> str:
    """The feature file's text: a comment saying who wrote it, then one label per line."""
    lines = ["# Written by devicehost from its drivers' labels; removed when it stops."]
    lines += [f"{name}={value}" for name, value in sorted(labels.items())]
    return "\n".join(lines) + "\n"


class FeatureFile:
    """The one file devicehost owns in NFD's features.d directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.written: str | None = None

    def write(self, labels: Mapping[str, str]) -> bool:
        """Replace the file atomically when its content would change; True when written."""
        text = render(labels)
        if text == self.written:
            return False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # A dot name: NFD skips it while it is being written.
        fd, temporary = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(temporary, 0o644)  # NFD's worker may run as another user
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        self.written = text
        log.info("node feature file %s: %d labels", self.path, len(labels))
        return True

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
            log.info("node feature file %s removed", self.path)
        self.written = None


class NodeLabels:
    """Keeps the feature file equal to what the drivers say now.

    Drivers join as each comes up (``add``), with the states of their resources: when a
    state's version moves (a scan changed a device), that driver's labels are asked for
    again and the file is rewritten if anything differs.
    """

    def __init__(
        self, path: Path, timeout: float, on_error: Callable[[str], None] | None = None
    ) -> None:
        self.file = FeatureFile(path)
        self.timeout = timeout
        self.on_error = on_error
        #: why the last write failed ("" when the file is current): retried with back-off
        self.error = ""
        self._retry_in = FIRST_RETRY_SECONDS
        self.drivers: list[Driver] = []
        self.resources: list[tuple[Driver, ResourceState]] = []
        self.by_driver: dict[str, dict[str, str]] = {}
        self._joined = asyncio.Event()

    async def refresh(self, driver: Driver) -> None:
        try:
            answers = await driver.acall(HOOK, self.timeout)
        except DriverError as exc:
            # Keep the last good labels: a hiccup must not relabel the node.
            log.error("%s; keeping its previous labels", exc)
            return
        self.by_driver[driver.name] = clean_labels(driver.name, answers)

    def labels(self) -> dict[str, str]:
        return {k: v for labels in self.by_driver.values() for k, v in labels.items()}

    async def add(
        self, driver: Driver, states: Iterable[ResourceState], write: bool = True
    ) -> None:
        """A driver came up (again): ask for its labels and watch its resources."""
        if not driver.implements(HOOK):
            return
        if driver not in self.drivers:
            self.drivers.append(driver)
        for state in states:
            if (driver, state) not in self.resources:
                self.resources.append((driver, state))
        await self.refresh(driver)
        if write:
            self.write()
        self._joined.set()

    def write(self) -> bool:
        """Write the file; a failure (a full or read-only disk) is logged, counted and
        kept in ``error``, never raised: ``run`` tries again with back-off, and the
        file heals once the disk does, with no device change needed. True when current."""
        try:
            self.file.write(self.labels())
        except OSError as exc:
            error = f"cannot write the node feature file {self.file.path}: {exc.strerror or exc}"
            if error != self.error:
                log.error("%s; trying again with back-off", error)
            self.error = error
            if self.on_error is not None:
                self.on_error(self.file.path.name)
            return False
        if self.error:
            log.info("node feature file %s written again", self.file.path)
        self.error, self._retry_in = "", FIRST_RETRY_SECONDS
        return True

    async def run(self) -> None:
        """Refresh a driver's labels after each change to one of its resources' devices."""
        versions: dict[int, int] = {}
        while True:
            waits: dict[asyncio.Future[Any], tuple[Driver, ResourceState]] = {
                asyncio.ensure_future(s.wait_newer(versions.setdefault(id(s), s.version))): (d, s)
                for d, s in self.resources
                if not s.closed
            }
            self._joined.clear()
            joined = asyncio.ensure_future(self._joined.wait())
            retry_in = self._retry_in if self.error else None
            try:
                done, _ = await asyncio.wait(
                    [*waits, joined], timeout=retry_in, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                for task in [*waits, joined]:
                    task.cancel()
            if self.error and not done:  # the retry's time
                self._retry_in = min(self._retry_in * 2, MAX_RETRY_SECONDS)
                self.write()
                continue
            changed: dict[str, Driver] = {}
            for task in done:
                if task in waits:
                    driver, state = waits[task]
                    versions[id(state)] = state.version
                    changed[driver.name] = driver
            for driver in changed.values():
                await self.refresh(driver)
            if changed:
                self.write()

    def close(self) -> None:
        """Remove the file (a stop must finish: a failure is only logged)."""
        try:
            self.file.remove()
        except OSError as exc:
            log.warning("cannot remove the node feature file %s: %s", self.file.path, exc)


async def labels_of(drivers: Iterable[Driver], timeout: float) -> dict[str, str]:
    """The labels the drivers that are up report now, written nowhere (a profile's facts)."""
    collected = NodeLabels(Path("/dev/null"), timeout)
    for driver in drivers:
        if driver.up:
            await collected.add(driver, (), write=False)
    return collected.labels()
