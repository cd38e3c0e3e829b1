"""Run one driver's ``devicehost_watch`` as the host does, to test what makes it notify.

The host calls the hook through pluggy with every argument its spec has (a driver takes
the ones it names) in a thread of the driver's worker. ``watch_notifies`` does the same in
a thread of the test, with ``enumerated`` answering what the test says the host was last
told, and reports whether ``notify()`` came within ``timeout``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pluggy

from devicehost import hookspecs
from devicehost.model import Device


def watch_notifies(
    plugin: Any, resource: str, enumerated: Sequence[Device], timeout: float = 5.0
) -> bool:
    """Whether ``plugin``'s watch of ``resource`` calls ``notify()`` within ``timeout``
    seconds while the host's last enumeration is ``enumerated``; the watch is stopped
    (and joined) either way. ``plugin`` is what the driver's entry point names (a module
    or an object with hook implementations)."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(plugin, name="driver")  # a hook the spec does not have: pluggy says so
    told = tuple(enumerated)
    notified, stop = threading.Event(), threading.Event()
    watch = threading.Thread(
        target=pm.hook.devicehost_watch,
        kwargs={
            "resource": resource,
            "notify": notified.set,
            "stop": stop,
            "enumerated": lambda: told,
        },
        name="watch",
        daemon=True,
    )
    watch.start()
    try:
        return notified.wait(timeout)
    finally:
        stop.set()
        watch.join(timeout)
