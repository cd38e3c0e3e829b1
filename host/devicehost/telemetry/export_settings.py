"""How spans leave the host: the OTLP exporter for an endpoint, the ``OTEL_BSP_*``
settings both span processors honour, and the count of kubelet requests in flight that
lets them wait for a quiet moment. Shared by ``tracing`` and the two processors
(``span_export``, ``export_process``), which import it and not each other.
"""

from __future__ import annotations

import base64
import logging
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlparse

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger(__name__)


def env_int(name: str, default: int) -> int:
    """A positive integer from an ``OTEL_BSP_*``-style variable; a bad value is logged."""
    try:
        return max(1, int(os.environ.get(name, default)))
    except ValueError:
        log.warning("%s=%r is not an integer; using %d", name, os.environ[name], default)
        return default


def max_queue_size() -> int:
    """``OTEL_BSP_MAX_QUEUE_SIZE``: the most spans held before they must leave (the SDK's
    default, 2048)."""
    return env_int("OTEL_BSP_MAX_QUEUE_SIZE", 2048)


def schedule_delay_seconds() -> float:
    """``OTEL_BSP_SCHEDULE_DELAY``: the longest a span waits for export (the SDK's default,
    5000 ms)."""
    return env_int("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000


def traces_endpoint(env: Mapping[str, str]) -> str:
    """The standard variables' endpoint for traces: the traces-specific one first."""
    return env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT", ""
    )


def _protocol(endpoint: str, env: Mapping[str, str]) -> str:
    chosen = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if chosen:
        return chosen
    url = urlparse(endpoint if "://" in endpoint else f"http://{endpoint}")
    return "http/protobuf" if url.port == 4318 or url.path.endswith("/v1/traces") else "grpc"


def _split_credentials(endpoint: str) -> tuple[str, dict[str, str]]:
    """The endpoint without ``user:password@``, and those credentials as a Basic
    ``authorization`` header: what the URL meant, without the secret in the URL that
    exporters and their errors may print."""
    url = urlparse(endpoint)
    if url.username is None and url.password is None:
        return endpoint, {}
    token = f"{url.username or ''}:{url.password or ''}".encode()
    netloc = url.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    if url.port is not None:
        netloc += f":{url.port}"
    header = {"authorization": "Basic " + base64.b64encode(token).decode()}
    return url._replace(netloc=netloc).geturl(), header


def otlp_exporter(endpoint: str, env: Mapping[str, str] | None = None) -> SpanExporter:
    """The OTLP span exporter for ``endpoint``; imported lazily to keep start-up fast."""
    env = os.environ if env is None else env
    given_for_traces = endpoint == env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    protocol = _protocol(endpoint, env)
    endpoint, headers = _split_credentials(endpoint)
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        insecure = not endpoint.startswith("https://")
        return OTLPSpanExporter(endpoint=endpoint, insecure=insecure, headers=headers or None)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    if given_for_traces or endpoint.endswith("/v1/traces"):
        url = endpoint
    else:
        url = endpoint.rstrip("/") + "/v1/traces"
    return HttpExporter(endpoint=url, headers=headers or None)


class Activity:
    """Counts kubelet requests in flight; the exporter waits for a quiet moment."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.last_end = 0.0

    def begin(self) -> None:
        self.in_flight += 1

    def end(self) -> None:
        self.in_flight -= 1
        self.last_end = time.monotonic()

    def quiet_for(self) -> float:
        return 0.0 if self.in_flight else time.monotonic() - self.last_end
