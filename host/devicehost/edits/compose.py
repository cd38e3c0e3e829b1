"""Compose one container's edits from what the driver declared: no driver call needed.

The kubelet asks for devices; each device carries its own container edits and the
resource carries the edits every container gets. Composition is strict where merging
would hide a mistake (Intel's framework lets the last env value win silently): the same
device node, mount, env variable or annotation declared twice with different contents
is a ``CompositionClash`` naming both sides, and the Allocate is refused.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

import pluggy

from devicehost.hookspecs import hookimpl
from devicehost.model import NO_EDITS, ContainerEdits, Device, DeviceNode, Mount, ResourceSpec

T = TypeVar("T")


class CompositionClash(ValueError):
    """Two edits for one container disagree (same key or path, different contents).

    It means the driver declared inconsistent edits: fix the driver, or list the env
    variable in ``ResourceSpec.joined_envs`` when several devices contribute to it.
    """


def _join(values: Iterable[str]) -> str:
    """Comma-joined, de-duplicated, first occurrence first (``"0,1"`` counts as two)."""
    seen: dict[str, None] = {}
    for value in values:
        for part in value.split(","):
            if part:
                seen.setdefault(part, None)
    return ",".join(seen)


class _Composer:
    def __init__(self, joined: Iterable[str], indexed: Iterable[str] = ()) -> None:
        self.joined = frozenset(joined)
        self.indexed = frozenset(indexed)
        self.envs: dict[str, str] = {}
        self.joined_parts: dict[str, list[str]] = {}
        self.numbered: dict[str, int] = {}
        self.annotations: dict[str, str] = {}
        self.nodes: dict[str, DeviceNode] = {}
        self.mounts: dict[str, Mount] = {}
        self.cdi: dict[str, None] = {}

    def add(self, edits: ContainerEdits, source: str, device: bool = False) -> None:
        for key, value in edits.envs.items():
            if key in self.joined:
                self.joined_parts.setdefault(key, []).append(value)
            elif key in self.indexed:
                if not device:
                    raise CompositionClash(
                        f"env {key!r} is indexed: only devices set it (the container gets "
                        f"{key}0, {key}1, …), but {source} sets it"
                    )
                number = self.numbered.get(key, 0)
                self.numbered[key] = number + 1
                self._put(self.envs, "env", f"{key}{number}", value, source)
            else:
                self._put(self.envs, "env", key, value, source)
        for key, value in edits.annotations.items():
            self._put(self.annotations, "annotation", key, value, source)
        for node in edits.devices:
            self._put(self.nodes, "device node", node.container_path, node, source)
        for mount in edits.mounts:
            self._put(self.mounts, "mount", mount.container_path, mount, source)
        for name in edits.cdi_devices:
            self.cdi.setdefault(name, None)

    @staticmethod
    def _put(table: dict[str, T], kind: str, key: str, value: T, source: str) -> None:
        before = table.setdefault(key, value)
        if before != value:
            raise CompositionClash(
                f"{kind} {key!r} is declared twice with different contents ({before!r} and, "
                f"from {source}, {value!r})"
            )

    def result(self) -> ContainerEdits:
        envs = dict(self.envs)
        for key, parts in self.joined_parts.items():
            envs[key] = _join(parts)
        return ContainerEdits(
            envs=envs,
            annotations=self.annotations,
            devices=tuple(self.nodes.values()),
            mounts=tuple(self.mounts.values()),
            cdi_devices=tuple(self.cdi),
        )


def compose(
    spec: ResourceSpec,
    devices: Mapping[str, Device],
    device_ids: Sequence[str],
    extra: ContainerEdits = NO_EDITS,
) -> ContainerEdits:
    """The edits of one container that gets ``device_ids``: the resource's edits once, then
    each device's in request order (an indexed variable numbered in that order), then
    ``extra`` (the driver's ``allocate`` answer), merged by the same rules.

    Raises ``CompositionClash`` for contradicting edits and ``KeyError`` for an unknown ID
    (the servicer has refused those already).
    """
    composer = _Composer(spec.joined_envs, spec.indexed_envs)
    composer.add(spec.edits, f"resource {spec.name!r}")
    for device_id in device_ids:
        composer.add(devices[device_id].edits, f"device {device_id!r}", device=True)
    if extra:
        composer.add(extra, "the driver's allocate answer")
    return composer.result()


_COMPOSED: contextvars.ContextVar[ContainerEdits] = contextvars.ContextVar("composed")


class _Composed:
    """The innermost ``devicehost_allocate`` in the host: the composed edits themselves."""

    @hookimpl
    def devicehost_allocate(self) -> ContainerEdits:
        return _COMPOSED.get()


class PolicyChain:
    """Policy plugins (``devicehost.policies``) wrap the composed allocation, in the host.

    Policies are the operator's own code, loaded into the host: they see every driver's
    composed answer through pluggy's ``wrapper=True`` hooks and may add to it.
    """

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        self.active = any(
            impl.wrapper or impl.hookwrapper for impl in pm.hook.devicehost_allocate.get_hookimpls()
        )
        if self.active and pm.get_plugin("devicehost:composed") is None:
            pm.register(_Composed(), name="devicehost:composed")

    def apply(
        self, resource: str, device_ids: Sequence[str], edits: ContainerEdits
    ) -> ContainerEdits:
        """``edits`` as every policy shaped them; ``TypeError`` if one returned junk."""
        if not self.active:
            return edits
        token = _COMPOSED.set(edits)
        try:
            result = self.pm.hook.devicehost_allocate(resource=resource, device_ids=device_ids)
        finally:
            _COMPOSED.reset(token)
        if not isinstance(result, ContainerEdits):
            raise TypeError(
                f"a policy plugin returned {type(result).__name__}, expected Allocation"
            )
        return result
