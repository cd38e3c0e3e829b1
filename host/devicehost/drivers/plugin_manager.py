"""The pluggy plugin manager both sides use: the host for policy plugins, a worker for its
driver. One place decides what a valid plugin is, so both refuse the same mistakes."""

from __future__ import annotations

from typing import Any

import pluggy

from devicehost import hookspecs


def new_plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


def register(pm: pluggy.PluginManager, plugin: Any, name: str) -> str | None:
    """Register ``plugin``; return pluggy's message (or the unknown hook) when it is refused."""
    try:
        pm.register(plugin, name=name)
    except (pluggy.PluginValidationError, ValueError) as exc:
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
