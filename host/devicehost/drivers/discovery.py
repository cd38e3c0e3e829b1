"""Find drivers and policy plugins by entry point; load policies, never drivers, here.

A driver's code is imported only in its own worker process (``worker``): this module only
reads entry-point metadata, applies the enabled/disabled lists, and names conflicts (two
distributions using one entry-point name are both listed, the second refused). Policy
plugins are the operator's own code that shapes every driver's answer; they load into the
host, each in isolation, and may only wrap hooks.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pluggy
    from importlib_metadata import EntryPoint

from devicehost.errors import ConfigError
from devicehost.system.entry_points import load_object, name_and_version

log = logging.getLogger(__name__)

DRIVER_GROUP = "devicehost.drivers"
POLICY_GROUP = "devicehost.policies"


class DriverStatus(enum.StrEnum):
    ACTIVE = "active"
    STARTING = "starting"
    RESTARTING = "restarting"
    CRASH_LOOPING = "crash-looping"
    UNAVAILABLE = "unavailable"
    FAILED = "failed"
    DISABLED = "disabled"


@dataclass(kw_only=True)
class DriverInfo:
    """What ``devicehost drivers`` prints: who the driver is and whether it runs."""

    name: str
    distribution: str
    version: str
    status: DriverStatus
    reason: str = ""
    kind: str = "driver"
    notes: list[str] = field(default_factory=list)
    restarts: int = 0
    #: ``module:attribute`` of the entry point: the worker imports it without reading
    #: every distribution's metadata again.
    entry_point: str = ""


@dataclass
class PluginSet:
    """The outcome of discovery: the drivers to start, policies, every entry point's status."""

    pm: pluggy.PluginManager
    drivers: list[DriverInfo] = field(default_factory=list)
    infos: list[DriverInfo] = field(default_factory=list)


@dataclass(frozen=True, order=True)
class Listed:
    """One entry point as the installed metadata names it (plain data: the zygote reads
    the metadata at its fork and hands the host this, ``plan``)."""

    name: str
    distribution: str
    version: str
    value: str


@dataclass
class Listing:
    """Every driver and policy entry point installed, before any selection."""

    drivers: list[Listed] = field(default_factory=list)
    policies: list[Listed] = field(default_factory=list)

    def to_plain(self) -> dict[str, Any]:
        return {
            "drivers": [dataclasses.astuple(e) for e in self.drivers],
            "policies": [dataclasses.astuple(e) for e in self.policies],
        }

    @classmethod
    def from_plain(cls, data: Any) -> Listing:
        """The listing the zygote sent (our own process's data: checked for shape only)."""
        return cls(
            drivers=[Listed(*map(str, e)) for e in data["drivers"]],
            policies=[Listed(*map(str, e)) for e in data["policies"]],
        )


def read_listing() -> Listing:
    """Read the installed distributions' entry points: one pass over every distribution's
    metadata serves both groups (each pass reads them all, on every cold start's path)."""
    from importlib_metadata import entry_points  # ~15 ms: only where the listing is read

    installed = entry_points()
    return Listing(
        drivers=_listed(installed.select(group=DRIVER_GROUP)),
        policies=_listed(installed.select(group=POLICY_GROUP)),
    )


def _listed(found: Any) -> list[Listed]:
    return sorted(Listed(ep.name, *_distribution_of(ep), ep.value) for ep in found)


def _distribution_of(ep: EntryPoint) -> tuple[str, str]:
    dist = ep.dist
    if dist is None:
        return "?", "?"
    return name_and_version(dist.read_text("METADATA") or dist.read_text("PKG-INFO") or "")


def _selected(name: str, allow: Sequence[str] | None, deny: Sequence[str]) -> str | None:
    if name in deny:
        return "blocked by the disabled-drivers list"
    if allow is not None and name not in allow:
        return "not in the enabled-drivers list"
    return None


def _check_selection(allow: Sequence[str] | None, deny: Sequence[str], installed: set[str]) -> None:
    """A misspelt name in either list is refused, naming what is installed: in the enabled
    list it would silently disable every driver, in the disabled list it would leave the
    driver meant to be kept off serving."""
    known = ", ".join(sorted(installed)) or "none"
    for key, names in (("enabledDrivers", allow or ()), ("disabledDrivers", deny)):
        unknown = sorted(set(names) - installed)
        if unknown:
            raise ConfigError(
                "config",
                key,
                f"no installed driver is named {', '.join(map(repr, unknown))}; installed: {known}",
            )


def load_plugins(
    allow: Sequence[str] | None = None, deny: Sequence[str] = (), listing: Listing | None = None
) -> PluginSet:
    """List drivers (without importing them) and load policy plugins.

    ``allow``/``deny`` filter drivers by entry-point name (``None`` allows every driver).
    A name in ``allow`` or ``deny`` that no installed driver has is a ``ConfigError``
    listing the installed names: a typo must not silently change what is served. ``listing``: the
    installed entry points when already read (by the zygote); read here otherwise.
    """
    listing = listing or read_listing()
    from devicehost.drivers.plugin_manager import new_plugin_manager  # pluggy: not to list

    plugins = PluginSet(new_plugin_manager())
    plugins.drivers, plugins.infos = _list_drivers(listing.drivers, allow, deny)
    _load_policies(plugins, listing.policies)
    return plugins


def drivers_to_start(
    listing: Listing, allow: Sequence[str] | None = None, deny: Sequence[str] = ()
) -> list[DriverInfo]:
    """The drivers ``load_plugins`` would start: no policy is loaded and nothing is logged
    (the zygote's prestart; the host lists them again, and reports)."""
    logging.disable(logging.CRITICAL)
    try:
        return _list_drivers(listing.drivers, allow, deny)[0]
    finally:
        logging.disable(logging.NOTSET)


def _list_drivers(
    found: list[Listed], allow: Sequence[str] | None, deny: Sequence[str]
) -> tuple[list[DriverInfo], list[DriverInfo]]:
    """The drivers to start, and every driver entry point with its status."""
    drivers: list[DriverInfo] = []
    infos: list[DriverInfo] = []
    owners: dict[str, str] = {}
    for ep in found:
        info = DriverInfo(
            name=ep.name,
            distribution=ep.distribution,
            version=ep.version,
            status=DriverStatus.ACTIVE,
            entry_point=ep.value,
        )
        owner = owners.get(ep.name)
        if owner == ep.distribution:
            continue  # the same distribution seen twice on sys.path
        if owner is not None:
            info.status = DriverStatus.FAILED
            info.reason = (
                f"entry-point name {ep.name!r} is also used by {owner}, which is served; "
                "uninstall or disable one of them"
            )
            log.error("driver %r (%s %s): %s", ep.name, ep.distribution, ep.version, info.reason)
            infos.append(info)
            continue
        owners[ep.name] = ep.distribution
        skip = _selected(ep.name, allow, deny)
        if skip:
            info.status, info.reason = DriverStatus.DISABLED, skip
        else:
            drivers.append(info)
        infos.append(info)
    _check_selection(allow, deny, set(owners))
    return drivers, infos


def _load_policies(plugins: PluginSet, policies: list[Listed]) -> None:
    """Policy plugins may only wrap hooks: they shape every driver's answer, never give one."""
    from devicehost import hookspecs
    from devicehost.drivers.plugin_manager import register

    for ep in policies:
        dist, version = ep.distribution, ep.version
        info = DriverInfo(
            name=ep.name,
            distribution=dist,
            version=version,
            status=DriverStatus.ACTIVE,
            kind="policy",
        )
        plugins.infos.append(info)
        try:
            obj = load_object(ep.value)
            plugin: Any = obj() if inspect.isclass(obj) else obj
        except Exception as exc:
            info.status = DriverStatus.FAILED
            info.reason = f"import of {ep.value} failed: {type(exc).__name__}: {exc}"
            log.error("policy %r (%s %s): %s", ep.name, dist, version, info.reason, exc_info=True)
            continue
        name = f"policy:{ep.name}"
        problem = register(plugins.pm, plugin, name)
        if problem is None:
            answering = [
                impl.function.__name__
                for hook in hookspecs.HOOK_NAMES
                for impl in getattr(plugins.pm.hook, hook).get_hookimpls()
                if impl.plugin is plugin and not (impl.wrapper or impl.hookwrapper)
            ]
            if answering:
                plugins.pm.unregister(name=name)
                problem = (
                    f"policy plugin {ep.name!r} implements {answering[0]} without "
                    "wrapper=True; policies may only wrap driver hooks"
                )
        if problem:
            info.status, info.reason = DriverStatus.FAILED, problem
            log.error("policy %r (%s %s) refused: %s", ep.name, dist, version, problem)
