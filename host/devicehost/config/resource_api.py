"""How each resource reaches the kubelet: the ``resources`` setting, ``{resource name:
{api: devicePlugin | dra}}``, read the same in the HostConfig and in a profile (which lays
its own over the base, resource by resource, so one ConfigMap can move one node to DRA).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: How a resource reaches the kubelet: the Device Plugin API (the default) or DRA.
DEVICE_PLUGIN_API = "devicePlugin"
DRA_API = "dra"
_RESOURCE_KEYS = {"api": (DEVICE_PLUGIN_API, DRA_API)}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def parse_resource_sections(value: Any) -> dict[str, dict[str, str]]:
    """``{resource name: {api: devicePlugin | dra}}``: how each resource is served."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("expected a mapping of resource name to its settings")
    sections: dict[str, dict[str, str]] = {}
    for name, section in value.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"expected a resource name, got {_short(name)}")
        if not isinstance(section, dict):
            raise ValueError(f"expected a mapping for resource {name!r}, got {_short(section)}")
        for key, raw in section.items():
            choices = _RESOURCE_KEYS.get(key)
            if choices is None:
                raise ValueError(
                    f"resource {name!r}: unknown key {key!r}; known keys: "
                    f"{', '.join(_RESOURCE_KEYS)}"
                )
            if raw not in choices:
                raise ValueError(
                    f"resource {name!r}: {key} must be one of {', '.join(choices)}, "
                    f"got {_short(raw)}"
                )
        sections[name] = {str(k): str(v) for k, v in section.items()}
    return sections


def lay_over(
    base: Mapping[str, Mapping[str, str]], over: Mapping[str, Mapping[str, str]]
) -> dict[str, dict[str, str]]:
    """``base`` with each resource ``over`` names replaced by its section there."""
    merged = {name: dict(section) for name, section in base.items()}
    merged.update({name: dict(section) for name, section in over.items()})
    return merged
