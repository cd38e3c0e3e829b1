"""Export finished spans while the host is idle, so tracing stays off the pod-start path.

The SDK's BatchSpanProcessor exports whenever a batch fills or a timer fires. Encoding
spans to OTLP is pure-Python work; on a busy node it competes with Allocate for the GIL
and shows up in Allocate's tail latency. This processor holds spans until no kubelet
request has been in flight for ``QUIET_SECONDS``, and exports in small batches (about
3 ms of work each) so a request that arrives mid-export waits for one batch at most.

Two limits keep it honest under sustained load: a queue three quarters full
(``OTEL_BSP_MAX_QUEUE_SIZE``, default 2048) is drained to a quarter at once, and no span
waits longer than ``OTEL_BSP_SCHEDULE_DELAY`` (default 5000 ms). A full queue drops new
spans, as the SDK's processor does, and says so once.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import TYPE_CHECKING

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from devicehost.telemetry.export_settings import (
    Activity,
    env_int,
    max_queue_size,
    schedule_delay_seconds,
)

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import Span
    from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger(__name__)

QUIET_SECONDS = 0.005
BATCH_SIZE = 32


class IdleSpanProcessor(SpanProcessor):
    """Buffers sampled spans and exports them in small batches when the host is idle."""

    def __init__(self, exporter: SpanExporter, activity: Activity) -> None:
        self.exporter = exporter
        self.activity = activity
        self.max_queue = max_queue_size()
        self.high_water = max(1, self.max_queue * 3 // 4)
        self.max_delay = schedule_delay_seconds()
        self.batch_size = min(env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", BATCH_SIZE), self.max_queue)
        self.dropped = 0
        self._draining = False
        self._queue: collections.deque[tuple[float, ReadableSpan]] = collections.deque()
        self._export_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="span-export", daemon=True)
        self._thread.start()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self._stopped or not span.context or not span.context.trace_flags.sampled:
            return
        if len(self._queue) >= self.max_queue:
            if not self.dropped:
                log.warning(
                    "tracing: %d spans are waiting for export; dropping new ones", self.max_queue
                )
            self.dropped += 1
            return
        self._queue.append((time.monotonic(), span))
        if len(self._queue) == 1 or len(self._queue) >= self.high_water:
            self._wake.set()

    def _due(self) -> bool:
        if not self._queue:
            self._draining = False
            return False
        if len(self._queue) >= self.high_water:
            self._draining = True  # drain to a quarter full: fewer, larger exports
        elif len(self._queue) <= self.max_queue // 4:
            self._draining = False
        if self._draining:
            return True
        if self.activity.quiet_for() >= QUIET_SECONDS:
            return True
        return time.monotonic() - self._queue[0][0] >= self.max_delay

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(QUIET_SECONDS if self._queue else None)
            self._wake.clear()
            while not self._stopped and self._due():
                self._export_batch()

    def _export_batch(self) -> bool:
        with self._export_lock:
            batch: list[ReadableSpan] = []
            while self._queue and len(batch) < self.batch_size:
                batch.append(self._queue.popleft()[1])
            if not batch:
                return False
            try:
                self.exporter.export(batch)
            except Exception:
                log.exception("tracing: exporting %d spans failed", len(batch))
            return True

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export everything buffered now, whatever the load (shutdown, tests)."""
        deadline = time.monotonic() + timeout_millis / 1000
        while self._export_batch():
            if time.monotonic() > deadline:
                return False
        return True

    def shutdown(self) -> None:
        self.force_flush()
        self._stopped = True
        self._wake.set()
        self._thread.join(5)
        self.exporter.shutdown()
