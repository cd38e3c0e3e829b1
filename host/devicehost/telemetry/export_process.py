"""Span export in a process of its own, so encoding OTLP never competes with Allocate.

The SDK's exporters encode every span to protobuf in Python: about 0.1 ms per span. In the
host that work holds the GIL, and under sustained load it shows up in Allocate's tail (the
p99 tripled with tracing on). Here the host only turns each finished span into plain data
(``span_to_plain``) and sends it over a ``SOCK_SEQPACKET`` pair to
``python -m devicehost.telemetry.export_process``, a fresh interpreter that rebuilds the
spans and exports them with the SDK's own OTLP exporter (``tracing.otlp_exporter``: the same
endpoint, protocol, headers and ``OTEL_*`` variables). Spans that end on the event loop
within ``HOLD_SECONDS`` of each other share one datagram (fewer system calls and wake-ups
of the exporter under load). Sending never blocks: when the
child falls behind and the socket buffer is full, new spans are dropped and counted, as the
SDK's batch processor drops them when its queue is full.

The exporter batches what arrives and exports after ``QUIET_SECONDS`` without a new span
or at ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` spans. It runs at a lower CPU priority
(``NICENESS``): on a busy node the kubelet's requests come first and spans wait.

When the host closes its end, the child exports what is left and exits; the host waits
``flush_seconds`` for that, then kills it.
The endpoint reaches the child in its environment, never on its command line, where
``ps`` would show credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import marshal
import os
import socket
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from devicehost.subprocesses import (
    die_with_parent,
    host_environment,
    name_process,
    start_helper,
)

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import Span

log = logging.getLogger(__name__)

ENDPOINT_VARIABLE = "DEVICEHOST_EXPORT_ENDPOINT"
QUIET_SECONDS = 0.005
BATCH_SIZE = 512
SEND_BUFFER_BYTES = 1 << 21
NICENESS = 10
HOLD_SECONDS = 0.002
HOLD_SPANS = 64
RECEIVE_BYTES = 1 << 20


def span_to_plain(span: ReadableSpan) -> tuple[Any, ...]:
    """A finished span as a tuple of plain values (what ``marshal`` can carry)."""
    context = span.context
    parent = span.parent
    status = span.status
    return (
        span.name,
        context.trace_id if context else 0,
        context.span_id if context else 0,
        (parent.span_id, parent.is_remote) if parent is not None else None,
        context.trace_state.to_header() if context and context.trace_state else "",
        span.kind.value,
        span.start_time,
        span.end_time,
        dict(span.attributes or {}),
        [(e.name, e.timestamp, dict(e.attributes or {})) for e in span.events],
        [(k.context.trace_id, k.context.span_id, dict(k.attributes or {})) for k in span.links],
        status.status_code.value,
        status.description,
    )


class ProcessSpanProcessor(SpanProcessor):
    """Sends every sampled span to the export process; never blocks the caller."""

    def __init__(self, endpoint: str, resource: dict[str, Any], scope: tuple[str, str]) -> None:
        self.dropped = 0
        ours, self.process = start_helper(
            __name__, host_environment(**{ENDPOINT_VARIABLE: endpoint})
        )
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        ours.sendall(marshal.dumps((resource, scope)))
        ours.setblocking(False)
        self._socket: socket.socket | None = ours
        self._held: list[ReadableSpan] = []
        self._lock = threading.Lock()  # spans may end on other threads than the loop's

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self._socket is None or not span.context or not span.context.trace_flags.sampled:
            return
        with self._lock:  # converted when sent: after the request's answer has gone
            held = self._held
            held.append(span)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on the event loop: send at once
            self._send()
            return
        if len(held) == HOLD_SPANS:
            loop.call_soon(self._send)
        elif len(held) == 1:
            loop.call_later(HOLD_SECONDS, self._send)

    def _send(self) -> None:
        with self._lock:
            held, self._held = self._held, []
        if not held or self._socket is None:
            return
        try:
            self._socket.send(marshal.dumps([span_to_plain(span) for span in held]))
        except (BlockingIOError, OSError) as exc:
            if not self.dropped:
                log.warning("tracing: the span exporter is not keeping up (%s); spans dropped", exc)
            self.dropped += len(held)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self._send()  # the export process batches and exports what it receives
        return True

    def close(self, timeout: float) -> bool:
        """Send EOF and wait ``timeout`` for the last export; False if it was cut short."""
        if self._socket is None:
            return True
        self._send()
        self._socket.close()
        self._socket = None
        try:
            self.process.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return False

    def shutdown(self) -> None:
        self.close(0)


# -- the export process ------------------------------------------------------------------


def _rebuild(
    plain: tuple[Any, ...], resource: Any, scope: Any, flags: Any, classes: dict[str, Any]
) -> ReadableSpan:
    (name, trace_id, span_id, parent, state, kind, start, end, attrs, events, links, code, why) = (
        plain
    )
    SpanContext, TraceState = classes["SpanContext"], classes["TraceState"]
    trace_state = TraceState.from_header([state]) if state else None
    context = SpanContext(trace_id, span_id, False, flags, trace_state)
    return ReadableSpan(
        name=name,
        context=context,
        parent=SpanContext(trace_id, parent[0], parent[1], flags) if parent else None,
        resource=resource,
        attributes=attrs,
        events=[classes["Event"](n, a, t) for n, t, a in events],
        links=[classes["Link"](SpanContext(t, s, True, flags), a) for t, s, a in links],
        kind=classes["SpanKind"](kind),
        status=classes["Status"](classes["StatusCode"](code), why),
        start_time=start,
        end_time=end,
        instrumentation_scope=scope,
    )


def serve(channel: socket.socket) -> None:
    """Rebuild and export spans until the host closes the channel."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
    from opentelemetry.trace.span import TraceState

    from devicehost.telemetry.tracing import otlp_exporter

    classes = {
        "SpanContext": SpanContext,
        "TraceState": TraceState,
        "Event": Event,
        "Link": Link,
        "SpanKind": SpanKind,
        "Status": Status,
        "StatusCode": StatusCode,
    }
    attributes, (scope_name, scope_version) = marshal.loads(channel.recv(RECEIVE_BYTES))
    resource = Resource(attributes)
    scope = InstrumentationScope(scope_name, scope_version)
    flags = TraceFlags(TraceFlags.SAMPLED)
    exporter = otlp_exporter(os.environ.pop(ENDPOINT_VARIABLE, ""))
    try:
        limit = max(1, int(os.environ.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", BATCH_SIZE)))
    except ValueError:
        limit = BATCH_SIZE
    batch: list[ReadableSpan] = []

    def export() -> None:
        if batch:
            try:
                exporter.export(batch)
            except Exception:
                log.exception("tracing: exporting %d spans failed", len(batch))
            batch.clear()

    while True:
        channel.settimeout(QUIET_SECONDS if batch else None)
        try:
            data = channel.recv(RECEIVE_BYTES)
        except TimeoutError:
            export()
            continue
        if not data:
            break
        try:
            batch.extend(_rebuild(p, resource, scope, flags, classes) for p in marshal.loads(data))
        except (ValueError, TypeError, EOFError):
            log.exception("tracing: a span could not be rebuilt; dropped")
        if len(batch) >= limit:
            export()
    export()
    exporter.shutdown()


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog=f"python -m {__name__}")
    parser.add_argument("--fd", type=int, required=True, help="the channel's file descriptor")
    args = parser.parse_args(argv)
    die_with_parent()
    name_process("dh-spans")
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    logging.basicConfig(stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        serve(socket.socket(fileno=args.fd))


if __name__ == "__main__":
    main()
