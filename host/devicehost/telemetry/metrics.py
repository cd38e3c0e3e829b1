"""Prometheus metrics, exposed through ``prometheus_client``.

The library owns the exposition format (escaping, histogram buckets, content type), so
nothing here writes protocol text. Each host gets a registry of its own: several hosts in
one process (tests, the demo) never share a counter. Gauges that describe current state
(devices per health, driver info) are computed at scrape time by a custom collector from
the host itself, never kept in two places.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import prometheus_client
import prometheus_client.exposition
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

#: The ``Content-Type`` of ``Metrics.render()``: ``generate_latest`` writes the classic
#: text format, version 0.0.4, which every Prometheus reads.
CONTENT_TYPE = prometheus_client.exposition.CONTENT_TYPE_PLAIN_0_0_4

# A ``_created`` series beside every counter and histogram doubles the series count for a
# start time Prometheus already has from the process; the names stay the documented ones.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

DURATION_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

Samples = Iterable[tuple[dict[str, str], float]]


class Counter:
    """A counter with named labels; ``value`` reads one series back (tests, the demo)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        name: str,
        help_text: str,
        label_names: Sequence[str] = (),
    ) -> None:
        # prometheus_client appends ``_total`` itself: give it the name without.
        self.name = name
        self.label_names = tuple(label_names)
        self._registry = registry
        self._counter = prometheus_client.Counter(
            name.removesuffix("_total"), help_text, self.label_names, registry=registry
        )
        self._children: dict[tuple[str, ...], Any] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        _child(self._counter, self._children, self.label_names, labels).inc(amount)

    def value(self, **labels: str) -> float:
        wanted = {n: labels[n] for n in self.label_names}
        return self._registry.get_sample_value(self.name, wanted) or 0.0


def _child(
    metric: Any,
    children: dict[tuple[str, ...], Any],
    names: tuple[str, ...],
    labels: Mapping[str, str],
) -> Any:
    """The labelled series, looked up once per label values: ``labels()`` validates and
    locks on every call, on the Allocate path."""
    if not names:
        return metric
    key = tuple(labels[n] for n in names)
    child = children.get(key)
    if child is None:
        child = children[key] = metric.labels(*key)
    return child


class Histogram:
    """A histogram with named labels; ``count`` reads one series' observation count."""

    def __init__(
        self,
        registry: CollectorRegistry,
        name: str,
        help_text: str,
        label_names: Sequence[str] = (),
        buckets: Sequence[float] = DURATION_BUCKETS,
    ) -> None:
        self.name = name
        self.label_names = tuple(label_names)
        self._registry = registry
        self._histogram = prometheus_client.Histogram(
            name, help_text, self.label_names, registry=registry, buckets=tuple(buckets)
        )
        self._children: dict[tuple[str, ...], Any] = {}

    def observe(self, value: float, **labels: str) -> None:
        _child(self._histogram, self._children, self.label_names, labels).observe(value)

    def count(self, **labels: str) -> int:
        wanted = {n: labels[n] for n in self.label_names}
        return int(self._registry.get_sample_value(f"{self.name}_count", wanted) or 0)


class Gauge:
    """A gauge whose samples come from ``collect()`` at scrape time."""

    def __init__(self, name: str, help_text: str, collect: Callable[[], Samples]) -> None:
        self.name, self.help, self.collect = name, help_text, collect


class _ScrapeTimeGauges(Collector):
    """The custom collector behind every ``Gauge``: asks the host at each scrape."""

    def __init__(self) -> None:
        self.gauges: list[Gauge] = []

    def collect(self) -> Iterator[Metric]:
        for gauge in self.gauges:
            samples = list(gauge.collect())
            names = list(dict.fromkeys(k for labels, _ in samples for k in labels))
            family = GaugeMetricFamily(gauge.name, gauge.help, labels=names)
            for labels, value in samples:
                family.add_metric([labels.get(n, "") for n in names], value)
            yield family

    def describe(self) -> Iterator[Metric]:
        # Describing would call the host at registration time; an empty answer tells the
        # registry not to check names up front.
        return iter(())


class Metrics:
    """Every devicehost metric. Names and labels are documented in docs/observability.md."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.allocations = Counter(
            self.registry,
            "devicehost_allocations_total",
            "Container allocations answered, by resource and result (ok or the gRPC code).",
            ("resource", "result"),
        )
        self.allocate_duration = Histogram(
            self.registry,
            "devicehost_allocate_duration_seconds",
            "Time to answer one Allocate request, driver included.",
            ("resource",),
        )
        self.registrations = Counter(
            self.registry,
            "devicehost_registrations_total",
            "Registration attempts with the kubelet, by resource and result.",
            ("resource", "result"),
        )
        self.kubelet_restarts = Counter(
            self.registry,
            "devicehost_kubelet_restarts_total",
            "Times kubelet.sock was (re-)created while devicehost ran.",
        )
        self.driver_errors = Counter(
            self.registry,
            "devicehost_driver_errors_total",
            "Driver hook calls that raised, timed out or returned invalid data.",
            ("driver", "hook"),
        )
        self.driver_restarts = Counter(
            self.registry,
            "devicehost_driver_restarts_total",
            "Times a driver's worker process was started again after it went down.",
            ("driver",),
        )
        self._gauges = _ScrapeTimeGauges()
        self.registry.register(self._gauges)

    def add_gauge(self, gauge: Gauge) -> None:
        self._gauges.gauges.append(gauge)

    def render(self) -> str:
        """Every metric in the Prometheus text format."""
        return generate_latest(self.registry).decode()
