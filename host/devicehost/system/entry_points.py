"""Reading entry points without the costly parts of the metadata reader: the name and
version from a distribution's header lines, and the object a value names. Drivers, policies
and contributed machines are all found this way."""

from __future__ import annotations

import importlib
from typing import Any


def name_and_version(metadata: str) -> tuple[str, str]:
    """``Name`` and ``Version`` from core metadata's header lines (``?`` when missing).

    Both are mandatory single-line fields, so the header lines suffice; the headers end at
    the first blank line, where the description begins. ``Distribution.metadata`` would
    import and run the email parser instead: about 15 ms of every cold start.
    """
    fields: dict[str, str] = {}
    for line in metadata.splitlines():
        if not line.strip():
            break
        key, colon, value = line.partition(":")
        if colon and key in ("Name", "Version"):
            fields.setdefault(key, value.strip())
    return fields.get("Name") or "?", fields.get("Version") or "?"


def load_object(value: str) -> Any:
    """The object an entry-point value (``module:attribute``) names, as
    ``EntryPoint.load`` finds it."""
    module, _, attribute = value.partition(":")
    obj = importlib.import_module(module.strip())
    for part in filter(None, attribute.strip().split(".")):
        obj = getattr(obj, part)
    return obj
