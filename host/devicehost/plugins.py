"""Find drivers and policy plugins by entry point, load each in isolation, hand out handles.

A driver that cannot load never stops the others: a missing vendor library makes it
*unavailable* (with the reason), any other import error or a hook that fails pluggy's
validation makes it *failed* (logged with the traceback or pluggy's message). Each loaded
driver gets a ``Driver`` handle whose calls reach only that driver's hooks, plus every
policy plugin's wrappers.
"""

from __future__ import annotations

import enum
import inspect
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pluggy
from importlib_metadata import EntryPoint, entry_points

from devicehost import hookspecs
from devicehost.calls import WorkerPool, run_with_timeout
from devicehost.errors import DriverError, DriverTimeout, DriverUnavailable, RequestRefused

log = logging.getLogger(__name__)

DRIVER_GROUP = "devicehost.drivers"
POLICY_GROUP = "devicehost.policies"


class DriverStatus(enum.StrEnum):
    ACTIVE = "active"
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


def _distribution_of(ep: EntryPoint) -> tuple[str, str]:
    dist = ep.dist
    if dist is None:
        return "?", "?"
    return dist.metadata["Name"] or dist.name, dist.version


def _instantiate(obj: Any) -> Any:
    """An entry point may name a module, an object, or a class to instantiate."""
    return obj() if inspect.isclass(obj) else obj


def _missing_vendor_module(exc: BaseException, ep: EntryPoint) -> str | None:
    """The name of a missing third-party module, if that is why the import failed."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    own_package = ep.value.split(":", 1)[0].split(".", 1)[0]
    if exc.name.split(".", 1)[0] == own_package:
        return None
    return exc.name


class Driver:
    """One driver's handle: calls reach its hooks only (and policy wrappers around them)."""

    def __init__(
        self, info: DriverInfo, plugin: Any, pm: pluggy.PluginManager, others: Iterable[Any]
    ) -> None:
        self.info = info
        self.name = info.name
        self.plugin = plugin
        self._pm = pm
        self._others = set(others)
        self._callers: dict[str, pluggy.HookCaller] = {}
        self.pool = WorkerPool(f"driver-{info.name}")

    def implements(self, hook: str) -> bool:
        """True when this driver itself (not a policy) implements ``hook``."""
        caller = getattr(self._pm.hook, hook)
        return any(impl.plugin is self.plugin for impl in caller.get_hookimpls())

    def _caller(self, hook: str) -> pluggy.HookCaller:
        caller = self._callers.get(hook)
        if caller is None:
            caller = self._pm.subset_hook_caller(hook, self._others)
            self._callers[hook] = caller
        return caller

    def call(self, hook: str, **kwargs: Any) -> Any:
        """Call ``hook`` synchronously; exceptions become ``DriverError`` naming the driver."""
        try:
            return self._caller(hook)(**kwargs)
        except (DriverError, DriverUnavailable, RequestRefused):
            raise
        except Exception as exc:
            raise DriverError(self.name, hook, f"{type(exc).__name__}: {exc}") from exc

    async def acall(self, hook: str, timeout: float, **kwargs: Any) -> Any:
        """Call ``hook`` in this driver's worker threads; ``DriverTimeout`` after ``timeout``."""
        try:
            return await run_with_timeout(self.pool, lambda: self.call(hook, **kwargs), timeout)
        except TimeoutError:
            raise DriverTimeout(self.name, hook, f"did not return within {timeout:g} s") from None

    def __repr__(self) -> str:
        return f"<Driver {self.name} {self.info.distribution} {self.info.version}>"


@dataclass
class PluginSet:
    """The outcome of discovery: runnable drivers, and the status of every entry point."""

    pm: pluggy.PluginManager
    drivers: list[Driver] = field(default_factory=list)
    infos: list[DriverInfo] = field(default_factory=list)

    def mark(self, driver: Driver, status: DriverStatus, reason: str) -> None:
        """Record that a loaded driver became unavailable or failed after start."""
        driver.info.status, driver.info.reason = status, reason
        if driver in self.drivers:
            self.drivers.remove(driver)


def new_plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


def _register(pm: pluggy.PluginManager, plugin: Any, name: str) -> str | None:
    """Register ``plugin``; on a validation problem unregister it and return the message."""
    try:
        pm.register(plugin, name=name)
    except (pluggy.PluginValidationError, ValueError) as exc:
        if pm.get_plugin(name) is not None:
            pm.unregister(name=name)
        return str(exc)
    unknown = [
        hook
        for hook in dir(pm.hook)
        if hook.startswith("devicehost_")
        and getattr(pm.hook, hook).spec is None
        and any(impl.plugin is plugin for impl in getattr(pm.hook, hook).get_hookimpls())
    ]
    if unknown:
        pm.unregister(name=name)
        known = ", ".join(hookspecs.HOOK_NAMES)
        return f"plugin {name!r}: unknown hook {unknown[0]!r}; the hooks are: {known}"
    return None


def _load_entry_point(ep: EntryPoint, kind: str) -> tuple[Any, DriverInfo]:
    dist, version = _distribution_of(ep)
    info = DriverInfo(
        name=ep.name, distribution=dist, version=version, status=DriverStatus.ACTIVE, kind=kind
    )
    try:
        return _instantiate(ep.load()), info
    except DriverUnavailable as exc:
        info.status, info.reason = DriverStatus.UNAVAILABLE, str(exc)
    except Exception as exc:
        missing = _missing_vendor_module(exc, ep)
        if missing:
            info.status = DriverStatus.UNAVAILABLE
            info.reason = f"vendor library {missing!r} is not installed"
        else:
            info.status = DriverStatus.FAILED
            info.reason = f"import of {ep.value} failed: {type(exc).__name__}: {exc}"
            log.error("%s %r (%s %s): %s", kind, ep.name, dist, version, info.reason, exc_info=True)
    return None, info


def _selected(name: str, allow: Sequence[str] | None, deny: Sequence[str]) -> str | None:
    if name in deny:
        return "blocked by the disabled-drivers list"
    if allow is not None and name not in allow:
        return "not in the enabled-drivers list"
    return None


def load_plugins(
    allow: Sequence[str] | None = None,
    deny: Sequence[str] = (),
    select_entry_points: Callable[..., Iterable[EntryPoint]] = entry_points,
) -> PluginSet:
    """Discover, load and validate drivers and policy plugins.

    ``allow``/``deny`` filter drivers by entry-point name (``None`` allows every driver).
    """
    pm = new_plugin_manager()
    plugins = PluginSet(pm)
    loaded: list[tuple[Any, DriverInfo]] = []
    seen: set[str] = set()
    for ep in sorted(select_entry_points(group=DRIVER_GROUP), key=lambda e: e.name):
        if ep.name in seen:
            continue  # the same distribution seen twice on sys.path
        seen.add(ep.name)
        skip = _selected(ep.name, allow, deny)
        if skip:
            dist, version = _distribution_of(ep)
            plugins.infos.append(
                DriverInfo(
                    name=ep.name,
                    distribution=dist,
                    version=version,
                    status=DriverStatus.DISABLED,
                    reason=skip,
                )
            )
            continue
        loaded.append(_load_entry_point(ep, "driver"))
    for plugin, info in loaded:
        plugins.infos.append(info)
        if plugin is None:
            continue
        problem = _register(pm, plugin, info.name)
        if problem:
            info.status, info.reason = DriverStatus.FAILED, problem
            log.error(
                "driver %r (%s %s) failed validation: %s",
                info.name,
                info.distribution,
                info.version,
                problem,
            )
    _load_policies(plugins, select_entry_points)
    driver_objects = [
        pm.get_plugin(i.name)
        for i in plugins.infos
        if i.kind == "driver" and i.status is DriverStatus.ACTIVE
    ]
    for info in plugins.infos:
        if info.kind == "driver" and info.status is DriverStatus.ACTIVE:
            plugin = pm.get_plugin(info.name)
            others = [d for d in driver_objects if d is not plugin]
            plugins.drivers.append(Driver(info, plugin, pm, others))
    return plugins


def _load_policies(plugins: PluginSet, select: Callable[..., Iterable[EntryPoint]]) -> None:
    """Policy plugins may only wrap hooks: they shape every driver's answer, never give one."""
    for ep in sorted(select(group=POLICY_GROUP), key=lambda e: e.name):
        plugin, info = _load_entry_point(ep, "policy")
        plugins.infos.append(info)
        if plugin is None:
            continue
        name = f"policy:{ep.name}"
        problem = _register(plugins.pm, plugin, name)
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
            log.error(
                "policy %r (%s %s) refused: %s", ep.name, info.distribution, info.version, problem
            )
