"""Spans leave the process when the host is idle, never competing with a pod start."""

from __future__ import annotations

import time

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from devicehost.telemetry.export_settings import Activity
from devicehost.telemetry.span_export import QUIET_SECONDS, IdleSpanProcessor
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


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def held_spans(clock, max_wait=5.0, max_bytes=1000):
    from devicehost.telemetry.export_process import HeldSpans

    return HeldSpans(max_wait, max_bytes, clock)


def test_the_exporter_holds_spans_until_the_host_says_requests_paused():
    """Spans handed over during a burst (the host's queue was full) wait in the exporter;
    the host's word that requests paused makes them due."""
    clock = Clock()
    held = held_spans(clock)
    assert held.wait() is None
    held.add([b"span"] * 10, export_now=False)
    clock.now += 1.0
    assert held.wait() == pytest.approx(4.0)
    held.add([], export_now=True)
    assert held.wait() == 0.0
    assert held.take() == [b"span"] * 10
    assert held.wait() is None


def test_no_span_waits_in_the_exporter_past_the_schedule_delay():
    """Without word from the host, the oldest held span is exported after
    OTEL_BSP_SCHEDULE_DELAY."""
    clock = Clock()
    held = held_spans(clock, max_wait=1.0)
    held.add([b"span"], export_now=False)
    clock.now += 0.999
    held.add([b"span"], export_now=False)
    assert held.wait() > 0
    clock.now += 0.001
    assert held.wait() == 0.0


def test_held_spans_are_bounded_in_bytes():
    """However fast spans arrive, no more than max_bytes wait in the exporter."""
    held = held_spans(Clock(), max_bytes=10)
    held.add([b"12345"], export_now=False)
    assert held.wait() > 0
    held.add([b"67890"], export_now=False)
    assert held.wait() == 0.0


@pytest.fixture
def process_pipeline(monkeypatch):
    """A tracer whose spans go through the real export process to a real receiver."""
    from devicehost.telemetry.export_process import ProcessSpanProcessor
    from devicehost.testing import OtlpReceiver

    def build(**env):
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        receiver = stack.enter_context(OtlpReceiver())
        processor = ProcessSpanProcessor(receiver.endpoint, {"service.name": "t"}, ("t", "1"))
        stack.callback(processor.close, 5.0)
        provider = TracerProvider()
        provider.add_span_processor(processor)
        return provider.get_tracer("test"), processor, receiver

    import contextlib

    with contextlib.ExitStack() as stack:
        yield build


def test_spans_of_a_burst_wait_in_the_host_until_requests_pause(process_pipeline):
    """Spans that end back to back on the event loop stay in the host (no message, no
    wake-up of the exporter); once the loop has been quiet they all reach the collector."""
    import asyncio

    tracer, processor, receiver = process_pipeline()

    async def burst():
        spans(tracer, 50)  # one loop turn: no timer can fire in between
        held = len(processor._held)
        deadline = time.monotonic() + 20
        while len(receiver.spans) < 50 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # the loop runs: the quiet timer fires
        return held, len(receiver.spans)

    assert asyncio.run(burst()) == (50, 50)


def test_a_gap_shorter_than_the_quiet_time_is_not_a_pause(process_pipeline):
    """Spans ending 10 ms apart — a hiccup of the client or the machine in a burst, not a
    pause — stay in the host: nothing is handed over until the quiet time has passed."""
    import asyncio

    gap, void_after = 0.01, 0.04  # a try where the loop itself stalled 40 ms is void
    tracer, processor, receiver = process_pipeline()

    async def burst():
        for tries in range(1, 4):
            longest, last = 0.0, time.monotonic()
            for _ in range(20):
                await asyncio.sleep(gap)
                spans(tracer, 1)
                now = time.monotonic()
                longest, last = max(longest, now - last), now
            if longest < void_after:
                return len(processor._held), len(receiver.spans)
            deadline = time.monotonic() + 20
            while len(receiver.spans) < 20 * tries and time.monotonic() < deadline:
                await asyncio.sleep(0.01)  # this try's spans leave; then try again
        pytest.skip("the event loop stalled for 40 ms in every try")

    held, received = asyncio.run(burst())
    assert held == 20
    assert received % 20 == 0  # nothing of the last try reached the collector


def test_a_full_queue_is_handed_over_but_not_exported_during_the_burst(process_pipeline):
    """At OTEL_BSP_MAX_QUEUE_SIZE the host hands spans to the exporter, which holds them
    while the burst goes on and exports them when the host reports the pause."""
    import asyncio

    tracer, processor, receiver = process_pipeline(OTEL_BSP_MAX_QUEUE_SIZE="10")

    async def burst():
        spans(tracer, 25)  # 2 hand-overs of 10; 5 stay in the host
        await asyncio.sleep(0)  # let the hand-over finish, the quiet timer not yet fire
        handed_over = 25 - len(processor._held)
        time.sleep(0.3)  # the burst "goes on": the loop is busy, the exporter waits
        exported_meanwhile = len(receiver.spans)
        deadline = time.monotonic() + 20
        while len(receiver.spans) < 25 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # the pause: the host sends the rest and says so
        return handed_over, exported_meanwhile, len(receiver.spans)

    assert asyncio.run(burst()) == (20, 0, 25)


def test_a_long_burst_reaches_the_collector_while_it_goes_on(process_pipeline):
    """Through the real export process to a real receiver: spans that never pause arrive
    once the oldest has waited OTEL_BSP_SCHEDULE_DELAY, before the burst ends."""
    import asyncio

    tracer, _, receiver = process_pipeline(OTEL_BSP_SCHEDULE_DELAY="200")

    async def burst():
        deadline = time.monotonic() + 20
        while not receiver.spans and time.monotonic() < deadline:
            spans(tracer, 1)
            await asyncio.sleep(0.001)  # never the 5 ms pause that would export
        return len(receiver.spans)

    assert asyncio.run(burst()) > 0, "no span arrived while the burst went on"


def kill_exporter(processor) -> int:
    """SIGKILL the export process and wait for it to be gone; return its pid."""
    import os
    import signal

    pid = processor.process.pid
    os.kill(pid, signal.SIGKILL)
    processor.process.wait(10)
    return pid


def test_a_killed_export_process_is_started_again_and_spans_flow(process_pipeline):
    """The export process is supervised: after a ``kill -9`` the next spans find it gone,
    a fresh one is started (counted in ``restarts``) and those spans reach the collector."""
    tracer, processor, receiver = process_pipeline()
    spans(tracer, 5)  # off the event loop: sent at once
    eventually(lambda: len(receiver.spans) == 5)
    first = kill_exporter(processor)
    spans(tracer, 5)
    eventually(lambda: len(receiver.spans) == 10)
    assert processor.restarts == 1
    assert processor.process.pid != first


def test_spans_dropped_while_the_exporter_is_down_are_counted(process_pipeline, monkeypatch):
    """Within the restart back-off a dead exporter is not started again: the spans meant
    for it are dropped and each one is counted (``devicehost_spans_dropped_total``)."""
    from devicehost.telemetry import export_process

    monkeypatch.setattr(export_process, "FIRST_RESTART_SECONDS", 600.0)
    tracer, processor, receiver = process_pipeline()
    dropped: list[int] = []
    processor.on_dropped = dropped.append
    kill_exporter(processor)
    spans(tracer, 2)  # the first restart is at once
    eventually(lambda: len(receiver.spans) == 2)
    kill_exporter(processor)
    spans(tracer, 3)  # the next one waits out the back-off: these are dropped
    assert sum(dropped) == 3
    assert processor.dropped == 3
    assert processor.restarts == 1
