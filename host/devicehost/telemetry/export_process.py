"""Span export in a process of its own, so encoding OTLP never competes with Allocate.

The SDK's exporters encode every span to protobuf in Python: about 0.1 ms per span. In the
host that work holds the GIL, and under sustained load it shows up in Allocate's tail (the
p99 tripled with tracing on). Here the host only turns each finished span into plain data
(``span_to_plain``, then bytes) and sends it over a ``SOCK_SEQPACKET`` pair to
``python -m devicehost.telemetry.export_process``, a fresh interpreter that rebuilds the
spans and exports them with the SDK's own OTLP exporter (``export_settings.otlp_exporter``: the same
endpoint, protocol, headers and ``OTEL_*`` variables). Sending never blocks: when
the child falls behind and the socket buffer is full, new spans are dropped and counted,
as the SDK's batch processor drops them when its queue is full.

Pods start in bursts, and any work beside a burst slows it, even at a lower priority and
even in another process (docs/performance.md measured it); a pause costs nothing. So the
host holds spans until requests pause (``QUIET_SECONDS`` after the last one ended), then
sends them and the exporter encodes and exports them at once, in batches of
``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``. Bounds keep the wait finite under sustained load: at
``OTEL_BSP_MAX_QUEUE_SIZE`` spans (2048) the host hands them over and the exporter holds
them, and once the oldest has waited ``OTEL_BSP_SCHEDULE_DELAY`` (5 s, the SDK's own
default) everything is exported, pause or not. The exporter also holds at most
``HOLD_BYTES`` and runs at a lower CPU priority (``NICENESS``).

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
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import SpanKind, StatusCode

from devicehost.system.subprocesses import (
    add_parent_pid_argument,
    die_with_parent,
    host_environment,
    name_process,
    start_helper,
)
from devicehost.telemetry.export_settings import env_int, max_queue_size, schedule_delay_seconds

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import Span

log = logging.getLogger(__name__)

ENDPOINT_VARIABLE = "DEVICEHOST_EXPORT_ENDPOINT"
#: How long no request span must end before the host calls it a pause and the spans leave.
#: Longer than a scheduling hiccup: at 5 ms, a stall of the client or of a virtual CPU in
#: the middle of a burst looked like a pause, and the export that followed (~0.1 s of CPU)
#: ran beside the rest of the burst and slowed its p99 in most rounds (docs/performance.md).
QUIET_SECONDS = 0.05
BATCH_SIZE = 512
SEND_BUFFER_BYTES = 1 << 21
NICENESS = 10
SEND_SPANS = 256
RECEIVE_BYTES = 1 << 20
HOLD_BYTES = 8 << 20
FIRST_RESTART_SECONDS = 1.0
MAX_RESTART_SECONDS = 60.0


def span_to_plain(span: ReadableSpan) -> tuple[Any, ...]:
    """A finished span as a tuple of plain values (what ``marshal`` can carry)."""
    context = span.context
    parent = span.parent
    status = span.status
    attributes = span.attributes
    return (
        span.name,
        context.trace_id if context else 0,
        context.span_id if context else 0,
        (parent.span_id, parent.is_remote) if parent is not None else None,
        context.trace_state.to_header() if context and context.trace_state else "",
        _VALUE[span.kind],
        span.start_time,
        span.end_time,
        # a request span's own dict is marshalled as it is; the SDK's bounded mapping is not
        # a dict and is copied
        attributes if type(attributes) is dict else dict(attributes or {}),
        [(e.name, e.timestamp, dict(e.attributes or {})) for e in span.events],
        [(k.context.trace_id, k.context.span_id, dict(k.attributes or {})) for k in span.links],
        _VALUE[status.status_code],
        status.description,
    )


#: A request span recorded as a row (``Tracing.record_answered``): the name and attributes
#: every span of its method and resource shares (one object, not copied: ``marshal``
#: writes it once per message and refers back to it), trace and span IDs, start and end
#: (ns), and this request's own attributes. The export process builds the span, and
#: draws its IDs when they are 0 (nothing in the host needed them).
AnsweredRow = tuple[tuple[str, dict[str, Any]], int, int, int, int, dict[str, Any]]


def answered_to_plain(row: AnsweredRow, new_ids: Callable[[], tuple[int, int]]) -> tuple[Any, ...]:
    """A row as ``span_to_plain`` would give its span: a SERVER root, status unset, no
    events or links."""
    (name, shared), trace_id, span_id, start, end, own = row
    if not trace_id:
        trace_id, span_id = new_ids()
    attrs = {**shared, **own}
    return (name, trace_id, span_id, None, "", _SERVER, start, end, attrs, [], [], _UNSET, None)


#: Enum members to their values: ``member.value`` is a descriptor call, this a dict lookup.
_VALUE: dict[Any, int] = {
    member: member.value for enum in (SpanKind, StatusCode) for member in enum
}
_SERVER, _UNSET = _VALUE[SpanKind.SERVER], _VALUE[StatusCode.UNSET]


class ProcessSpanProcessor(SpanProcessor):
    """Sends every sampled span to the export process; never blocks the caller.

    Each span becomes bytes as it ends (a request recorded as a row stays a row, built into
    its span by the export process). Those that end on the event loop wait in the host
    until requests pause (``QUIET_SECONDS`` after the last span ended), so a burst of pod
    starts wakes no other process; then the host sends them and tells the exporter to
    export. At ``OTEL_BSP_MAX_QUEUE_SIZE`` held spans the host sends them during the burst
    but tells the exporter to hold them; and once the oldest span has waited
    ``OTEL_BSP_SCHEDULE_DELAY``, everything is exported, burst or not. A message carries
    ``SEND_SPANS`` and the loop runs between messages, so a request that arrives meanwhile
    waits for one small message at most."""

    def __init__(self, endpoint: str, resource: dict[str, Any], scope: tuple[str, str]) -> None:
        self.dropped = 0
        #: called with each number of spans dropped (``devicehost_spans_dropped_total``)
        self.on_dropped: Callable[[int], None] | None = None
        #: times the export process was started again after it died
        self.restarts = 0
        self._endpoint, self._first = endpoint, (resource, scope)
        self._restart_delay = FIRST_RESTART_SECONDS
        self._restart_at = 0.0
        self._socket: socket.socket | None = None
        self._start_process()
        self.max_wait = schedule_delay_seconds()
        self.max_held = max_queue_size()
        self._held: list[bytes | AnsweredRow] = []
        self._last_at = 0.0
        self._waiting_since = 0.0  # when the oldest span not yet exported ended; 0: none
        self._timer: asyncio.TimerHandle | None = None
        self._lock = threading.Lock()  # spans may end on other threads than the loop's

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self._socket is None or not span.context or not span.context.trace_flags.sampled:
            return
        # Held as bytes: a held span object (with its dicts and context) would stay
        # tracked by the garbage collector, and a burst of them made gen-0 collections
        # twice as frequent on the request path (docs/performance.md).
        self._hold(marshal.dumps(span_to_plain(span)))

    def hold_answered(self, row: AnsweredRow) -> None:
        """Hold a request span recorded as a row (``Tracing.record_answered``); it becomes
        a span's bytes only when it is sent, after the burst."""
        if self._socket is not None:
            self._hold(row)

    def _hold(self, item: bytes | AnsweredRow) -> None:
        now = time.monotonic()
        with self._lock:
            self._held.append(item)
            self._last_at = now
            if not self._waiting_since:
                self._waiting_since = now
            full = len(self._held) >= self.max_held
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on the event loop: send at once
            self._send()
            return
        if full:
            self._send_in_steps(loop, False)
        if self._timer is None:
            self._timer = loop.call_at(loop.time() + QUIET_SECONDS, self._check, loop)

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        """Export when requests have paused or the oldest span waited long enough."""
        self._timer = None
        if not self._waiting_since:
            return
        now = time.monotonic()
        due = min(self._last_at + QUIET_SECONDS, self._waiting_since + self.max_wait)
        if now >= due:
            self._send_in_steps(loop, True)
        else:
            self._timer = loop.call_at(loop.time() + due - now, self._check, loop)

    def _send_in_steps(self, loop: asyncio.AbstractEventLoop, export: bool) -> None:
        """Send what is held, one message per loop turn; ``export``: the last message tells
        the exporter to export everything it holds."""
        with self._lock:
            spans, self._held = self._held[:SEND_SPANS], self._held[SEND_SPANS:]
            left = bool(self._held)
            if export and not left:
                self._waiting_since = 0.0
        self._send_message(spans, export and not left)
        if left:
            loop.call_soon(self._send_in_steps, loop, export)

    def _send(self) -> None:
        """Send everything held now and have it exported (a span off the loop, a flush)."""
        with self._lock:
            spans, self._held = self._held, []
            self._waiting_since = 0.0
        for start in range(0, len(spans), SEND_SPANS):
            self._send_message(spans[start : start + SEND_SPANS], False)
        self._send_message([], True)

    def _start_process(self) -> None:
        ours, self.process = start_helper(
            __name__, host_environment(**{ENDPOINT_VARIABLE: self._endpoint})
        )
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        ours.sendall(marshal.dumps(self._first))
        ours.setblocking(False)
        self._socket = ours

    def _restart_if_dead(self) -> bool:
        """The export process is supervised: one that died is started again, at most
        once per back-off (1 s doubling to 60 s), when the next message finds it gone. True when
        a process is running to send to."""
        if self.process.poll() is None:
            return True
        now = time.monotonic()
        if now < self._restart_at:
            return False
        log.error(
            "tracing: the span export process (pid %d) %s; starting it again%s",
            self.process.pid,
            _describe_code(self.process.returncode),
            f" (restart {self.restarts + 1})",
        )
        if self._socket is not None:
            self._socket.close()
        try:
            self._start_process()
        except OSError as exc:
            log.error("tracing: the span export process could not be started: %s", exc)
            self._restart_at = now + self._restart_delay
            self._restart_delay = min(self._restart_delay * 2, MAX_RESTART_SECONDS)
            return False
        self.restarts += 1
        self._restart_at = now + self._restart_delay
        self._restart_delay = min(self._restart_delay * 2, MAX_RESTART_SECONDS)
        return True

    def _send_message(self, spans: list[bytes | AnsweredRow], export: bool) -> None:
        if self._socket is None:
            return
        try:
            self._socket.send(marshal.dumps((export, spans)))
            return
        except BlockingIOError as exc:
            why = f"the span exporter is not keeping up ({exc})"
        except OSError as exc:  # it died: the next message goes to a fresh one
            why = f"the span exporter is gone ({exc})"
            if self._restart_if_dead() and spans:
                with contextlib.suppress(OSError):
                    assert self._socket is not None
                    self._socket.send(marshal.dumps((export, spans)))
                    return
        self._dropped(len(spans), why)

    def _dropped(self, count: int, why: str) -> None:
        if not count:
            return
        if not self.dropped:
            log.warning("tracing: %s; spans dropped (devicehost_spans_dropped_total)", why)
        self.dropped += count
        if self.on_dropped is not None:
            self.on_dropped(count)

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


def _describe_code(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


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


class HeldSpans:
    """Spans the exporter holds until the host says requests paused, within bounds."""

    def __init__(
        self, max_wait: float, max_bytes: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_wait, self.max_bytes, self.clock = max_wait, max_bytes, clock
        self.spans: list[bytes | AnsweredRow] = []
        self.size = 0
        self.first_at = 0.0
        self.export_now = False

    def add(
        self, spans: list[bytes | AnsweredRow], export_now: bool, size: int | None = None
    ) -> None:
        """Hold ``spans``; ``size``: the bytes they arrived in (by default, theirs)."""
        if spans and not self.spans:
            self.first_at = self.clock()
        self.spans.extend(spans)
        self.size += sum(len(s) for s in spans if isinstance(s, bytes)) if size is None else size
        self.export_now = self.export_now or export_now

    def wait(self) -> float | None:
        """Seconds until the held spans are due (0: now); None when nothing is held."""
        if not self.spans:
            self.export_now = False
            return None
        if self.export_now or self.size >= self.max_bytes:
            return 0.0
        return max(0.0, self.first_at + self.max_wait - self.clock())

    def take(self) -> list[bytes | AnsweredRow]:
        spans, self.spans, self.size, self.export_now = self.spans, [], 0, False
        return spans


def serve(channel: socket.socket) -> None:
    """Rebuild and export spans until the host closes the channel."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import Link, SpanContext, Status, TraceFlags
    from opentelemetry.trace.span import TraceState

    from devicehost.telemetry.export_settings import otlp_exporter

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
    limit = env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", BATCH_SIZE)
    held = HeldSpans(schedule_delay_seconds(), HOLD_BYTES)
    ids = RandomIdGenerator()  # the host's TracerProvider's own generator

    def new_ids() -> tuple[int, int]:
        return ids.generate_trace_id(), ids.generate_span_id()

    def export() -> None:
        spans: list[ReadableSpan] = []
        for span in held.take():
            try:
                plain = (
                    marshal.loads(span)
                    if isinstance(span, bytes)
                    else answered_to_plain(span, new_ids)
                )
                spans.append(_rebuild(plain, resource, scope, flags, classes))
            except (ValueError, TypeError, EOFError):
                log.exception("tracing: a span could not be rebuilt; dropped")
        for start in range(0, len(spans), limit):
            try:
                exporter.export(spans[start : start + limit])
            except Exception:
                log.exception(
                    "tracing: exporting %d spans failed", len(spans[start : start + limit])
                )

    while True:
        wait = held.wait()
        if wait == 0.0:
            export()
            continue
        channel.settimeout(wait)
        try:
            data = channel.recv(RECEIVE_BYTES)
        except TimeoutError:
            export()
            continue
        if not data:
            break
        try:
            export_now, spans = marshal.loads(data)
            held.add(list(spans), bool(export_now), len(data))
        except (ValueError, TypeError, EOFError):
            log.exception("tracing: a message from the host could not be read; dropped")
    export()
    exporter.shutdown()


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog=f"python -m {__name__}")
    parser.add_argument("--fd", type=int, required=True, help="the channel's file descriptor")
    add_parent_pid_argument(parser)
    args = parser.parse_args(argv)
    die_with_parent(args.parent_pid)
    name_process("dh-spans")
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    logging.basicConfig(stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        serve(socket.socket(fileno=args.fd))


if __name__ == "__main__":
    main()
