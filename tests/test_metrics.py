"""The Prometheus client arrives after start-up; nothing counted before it is lost."""

from __future__ import annotations

import asyncio

import prometheus_client.exposition
from prometheus_client.parser import text_string_to_metric_families

from devicehost.telemetry import metrics as metrics_module
from devicehost.telemetry.metrics import CONTENT_TYPE, Gauge, Metrics
from support import python_probe


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_counts_and_observations_before_the_client_arrives_are_kept():
    metrics = Metrics()
    metrics.registrations.inc(resource="r", result="ok")
    metrics.registrations.inc(resource="r", result="ok")
    metrics.registrations.inc(resource="r", result="UNAVAILABLE")
    metrics.kubelet_restarts.inc()
    metrics.allocate_duration.observe(0.0007, resource="r")
    metrics.allocate_duration.observe(0.3, resource="r")
    metrics.add_gauge(Gauge("devicehost_test_devices", "help", lambda: [({"a": "b"}, 4.0)]))
    metrics.allocations.inc(resource="r", result="ok")  # counted after the first read too
    found = samples(metrics.render())
    metrics.allocations.inc(resource="r", result="ok")
    assert found[("devicehost_registrations_total", (("resource", "r"), ("result", "ok")))] == 2
    assert (
        found[("devicehost_registrations_total", (("resource", "r"), ("result", "UNAVAILABLE")))]
        == 1
    )
    assert found[("devicehost_kubelet_restarts_total", ())] == 1
    assert found[("devicehost_allocate_duration_seconds_count", (("resource", "r"),))] == 2
    assert (
        found[("devicehost_allocate_duration_seconds_bucket", (("le", "0.001"), ("resource", "r")))]
        == 1
    )
    assert found[("devicehost_test_devices", (("a", "b"),))] == 4.0
    assert metrics.allocations.value(resource="r", result="ok") == 2


def test_a_series_counts_into_its_labels_before_and_after_the_client_arrives():
    """A series looked up once (the Allocate path's) counts like ``inc``/``observe`` with
    its labels, whether the client is bound yet or not; other labels are untouched."""
    metrics = Metrics()
    ok = metrics.allocations.series(resource="r", result="ok")
    seconds = metrics.allocate_duration.series(resource="r")
    ok.add()
    seconds.add(0.0007)
    metrics.bind()
    ok.add()
    seconds.add(0.3)
    metrics.allocations.inc(resource="r", result="INTERNAL")
    found = samples(metrics.render())
    assert metrics.allocations.value(resource="r", result="ok") == 2
    assert metrics.allocations.value(resource="r", result="INTERNAL") == 1
    assert found[("devicehost_allocate_duration_seconds_count", (("resource", "r"),))] == 2
    assert (
        found[("devicehost_allocate_duration_seconds_bucket", (("le", "0.001"), ("resource", "r")))]
        == 1
    )


def raw(metrics, name, **labels):
    """A sample as the library holds it now, without the hand-over a read makes."""
    assert metrics._registry is not None
    return metrics._registry.get_sample_value(name, labels) or 0.0


def test_a_series_hands_its_values_over_on_the_loop_without_a_read(monkeypatch):
    """Kept as plain numbers on the request path, a series' values reach the library
    within FLUSH_SECONDS even if nobody reads."""
    monkeypatch.setattr(metrics_module, "FLUSH_SECONDS", 0.05)
    metrics = Metrics()
    metrics.bind()
    ok = metrics.allocations.series(resource="r", result="ok")

    async def count() -> tuple[float, float]:
        ok.add()
        ok.add()
        before = raw(metrics, "devicehost_allocations_total", resource="r", result="ok")
        await asyncio.sleep(0.2)
        return before, raw(metrics, "devicehost_allocations_total", resource="r", result="ok")

    assert asyncio.run(count()) == (0.0, 2.0)


def test_a_series_hands_over_at_max_pending(monkeypatch):
    monkeypatch.setattr(metrics_module, "MAX_PENDING", 3)
    metrics = Metrics()
    metrics.bind()
    seconds = metrics.allocate_duration.series(resource="r")
    for _ in range(3):
        seconds.add(0.001)
    assert raw(metrics, "devicehost_allocate_duration_seconds_count", resource="r") == 3


def test_one_series_per_labels_however_often_asked():
    metrics = Metrics()
    assert metrics.allocations.series(resource="r", result="ok") is metrics.allocations.series(
        resource="r", result="ok"
    )


def test_a_long_wait_for_the_client_keeps_no_more_than_max_pending(monkeypatch):
    """Observations are not buffered without bound: at MAX_PENDING the client is brought in
    and they are handed over."""
    monkeypatch.setattr(metrics_module, "MAX_PENDING", 5)
    metrics = Metrics()
    for _ in range(12):
        metrics.allocate_duration.observe(0.001, resource="r")
    assert len(metrics.allocate_duration._pending) == 0
    assert metrics.allocate_duration.count(resource="r") == 12


def test_the_content_type_is_the_clients():
    assert CONTENT_TYPE == prometheus_client.exposition.CONTENT_TYPE_PLAIN_0_0_4


def test_the_host_starts_without_the_prometheus_client():
    """Importing the host and counting leave the client out (its import pulls http.server,
    the email parser and datetime: ~20 ms of every cold start); the first read brings it."""
    probe = (
        "import sys, devicehost.cli.main, devicehost.host; "
        "from devicehost.telemetry.facade import Telemetry; "
        "t = Telemetry(); t.metrics.registrations.inc(resource='r', result='ok'); "
        "print('prometheus_client' in sys.modules); t.metrics.render(); "
        "print('prometheus_client' in sys.modules)"
    )
    out = python_probe(probe)
    assert out.stdout.split() == ["False", "True"], out.stderr
