"""Tracing, metrics, the status endpoints and logs. Used by the rest of the host; uses
none of it (the pod resolver and the registration verdict are handed in).

``Telemetry`` is imported on first use: ``devicehost run`` sets up logging from here
before it spawns the drivers' workers, and must not wait for OpenTelemetry first.
"""

from typing import Any

__all__ = ["Telemetry"]


def __getattr__(name: str) -> Any:
    if name == "Telemetry":
        from devicehost.telemetry.facade import Telemetry

        return Telemetry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
