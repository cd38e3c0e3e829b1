"""Spans leave the process when the host is idle, never competing with a pod start."""

from __future__ import annotations

import time

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from devicehost.telemetry.span_export import QUIET_SECONDS, IdleSpanProcessor
from devicehost.telemetry.tracing import Activity
from support import eventually


@pytest.fixture
def pipeline(monkeypatch):
    def build(max_queue=2048):
        monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", str(max_queue))
        exporter, activity = InMemorySpanExporter(), Activity()
        processor = IdleSpanProcessor(exporter, activity)
        provider = TracerProvider()
        provider.add_span_processor(processor)
        return provider.get_tracer("test"), exporter, activity, processor

    return build


def spans(tracer, count):
    for index in range(count):
        with tracer.start_as_current_span(f"span-{index}"):
            pass


def test_spans_wait_while_a_request_is_in_flight(pipeline):
    """Finished spans are held while a request runs, and exported once the host is quiet."""
    tracer, exporter, activity, _ = pipeline()
    activity.begin()
    spans(tracer, 3)
    time.sleep(QUIET_SECONDS * 4)
    assert exporter.get_finished_spans() == ()
    activity.end()
    eventually(lambda: len(exporter.get_finished_spans()) == 3)


def test_high_water_mark_exports_even_when_busy(pipeline):
    """Three quarters of the queue is exported at once, busy or not."""
    tracer, exporter, activity, _ = pipeline(max_queue=8)
    activity.begin()
    spans(tracer, 6)
    eventually(lambda: len(exporter.get_finished_spans()) == 6)


def test_full_queue_drops_new_spans_and_counts_them(pipeline):
    """Past the queue's size new spans are dropped and counted; span creation never blocks."""
    tracer, exporter, _, processor = pipeline(max_queue=4)
    with processor._export_lock:  # the exporter is stuck: nothing leaves the queue
        spans(tracer, 10)
        assert processor.dropped == 6
    eventually(lambda: len(exporter.get_finished_spans()) == 4)


def test_force_flush_exports_everything_now(pipeline):
    """force_flush (shutdown) sends every buffered span whatever the load."""
    tracer, exporter, activity, processor = pipeline()
    activity.begin()
    spans(tracer, 5)
    assert processor.force_flush() is True
    assert len(exporter.get_finished_spans()) == 5


def test_the_export_process_is_named_for_ps_and_top():
    """The span exporter shows as dh-spans in ps -o comm and top, beside dh-zygote and the
    dh-<driver> workers."""
    from pathlib import Path

    from devicehost.telemetry.export_process import ProcessSpanProcessor
    from devicehost.testing import OtlpReceiver

    with OtlpReceiver() as receiver:
        processor = ProcessSpanProcessor(receiver.endpoint, {"service.name": "t"}, ("t", "1"))
        try:
            comm = Path(f"/proc/{processor.process.pid}/comm")
            eventually(lambda: comm.read_text().strip() == "dh-spans", timeout=20)
        finally:
            processor.close(5.0)
