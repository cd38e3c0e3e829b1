"""Tracing, metrics, the status endpoints and logs. Used by the rest of the host; uses
none of it (the pod resolver and the registration verdict are handed in)."""

from devicehost.telemetry.facade import Telemetry

__all__ = ["Telemetry"]
