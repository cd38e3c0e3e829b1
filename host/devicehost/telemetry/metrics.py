"""Prometheus metrics, exposed through ``prometheus_client``.

The library owns the exposition format (escaping, histogram buckets, content type), so
nothing here writes protocol text. Each host gets a registry of its own: several hosts in
one process (tests, the demo) never share a counter. Gauges that describe current state
(devices per health, driver info) are computed at scrape time by a custom collector from
the host itself, never kept in two places.

The library is imported on first need — a scrape, a read, or ``Metrics.bind()``, which the
host calls once its drivers have settled — not at start-up: it brings ``http.server``, the
email parser and ``datetime``, about 20 ms of every cold start before the first
registration. Until then counts and observations are kept as plain numbers and handed to
the library when it arrives (``MAX_PENDING`` observations at most: more bind at once).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

#: The ``Content-Type`` of ``Metrics.render()``: ``generate_latest`` writes the classic
#: text format, version 0.0.4, which every Prometheus reads (the library's
#: ``CONTENT_TYPE_PLAIN_0_0_4``; a test holds them equal).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_PENDING = 10_000
FLUSH_SECONDS = 1.0

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


class Series:
    """One labelled series of a counter or histogram for the Allocate path: ``add`` keeps
    the value as a plain number, handed to the library within ``FLUSH_SECONDS``, at the
    next read or scrape (``Metrics.bind``), or at ``MAX_PENDING`` values. Timed inside a
    running host, the library's update with its label lookup cost 11 to 18 µs of each
    Allocate; an append costs next to nothing, and the hand-over runs after the burst."""

    __slots__ = ("_labels", "_metric", "_metrics", "_pending")

    def __init__(
        self, metrics: Metrics, metric: Counter | Histogram, labels: dict[str, str]
    ) -> None:
        self._metrics, self._metric, self._labels = metrics, metric, labels
        self._pending: list[float] = []

    def add(self, value: float = 1.0) -> None:
        pending = self._pending
        pending.append(value)
        if len(pending) == 1:
            self._metrics.owe()
        elif len(pending) >= MAX_PENDING:
            self._metrics.bind()

    def hand_over(self) -> None:
        """Give the (bound) library what was added since the last hand-over. The list is
        never replaced, only its head removed: a value added meanwhile from another thread
        stays for the next hand-over."""
        pending = self._pending
        values = pending[: len(pending)]
        del pending[: len(values)]
        if values:
            self._metric.add_all(self._labels, values)


class Counter:
    """A counter with named labels; ``value`` reads one series back (tests, the demo)."""

    def __init__(
        self, metrics: Metrics, name: str, help_text: str, label_names: Sequence[str] = ()
    ) -> None:
        self.name, self.help = name, help_text
        self.label_names = tuple(label_names)
        self._metrics = metrics
        self._counter: Any = None
        self._children: dict[tuple[str, ...], Any] = {}
        self._pending: dict[tuple[str, ...], float] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        if self._counter is None:
            key = tuple(labels[n] for n in self.label_names)
            self._pending[key] = self._pending.get(key, 0.0) + amount
            return
        _child(self._counter, self._children, self.label_names, labels).inc(amount)

    def series(self, **labels: str) -> Series:
        return self._metrics.series_of(self, labels)

    def add_all(self, labels: dict[str, str], values: list[float]) -> None:
        self.inc(sum(values), **labels)

    def bind(self, registry: CollectorRegistry) -> None:
        import prometheus_client

        # prometheus_client appends ``_total`` itself: give it the name without.
        self._counter = prometheus_client.Counter(
            self.name.removesuffix("_total"), self.help, self.label_names, registry=registry
        )
        for key, amount in self._pending.items():
            self.inc(amount, **dict(zip(self.label_names, key, strict=True)))
        self._pending.clear()

    def value(self, **labels: str) -> float:
        wanted = {n: labels[n] for n in self.label_names}
        return self._metrics.bind().get_sample_value(self.name, wanted) or 0.0


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
    key = tuple([labels[n] for n in names])  # a list is built faster than a generator runs
    child = children.get(key)
    if child is None:
        child = children[key] = metric.labels(*key)
    return child


class Histogram:
    """A histogram with named labels; ``count`` reads one series' observation count."""

    def __init__(
        self,
        metrics: Metrics,
        name: str,
        help_text: str,
        label_names: Sequence[str] = (),
        buckets: Sequence[float] = DURATION_BUCKETS,
    ) -> None:
        self.name, self.help = name, help_text
        self.label_names = tuple(label_names)
        self.buckets = tuple(buckets)
        self._metrics = metrics
        self._histogram: Any = None
        self._children: dict[tuple[str, ...], Any] = {}
        self._pending: list[tuple[float, dict[str, str]]] = []

    def observe(self, value: float, **labels: str) -> None:
        if self._histogram is None:
            self._pending.append((value, labels))
            if len(self._pending) >= MAX_PENDING:
                self._metrics.bind()
            return
        _child(self._histogram, self._children, self.label_names, labels).observe(value)

    def series(self, **labels: str) -> Series:
        return self._metrics.series_of(self, labels)

    def add_all(self, labels: dict[str, str], values: list[float]) -> None:
        observe = _child(self._histogram, self._children, self.label_names, labels).observe
        for value in values:
            observe(value)

    def bind(self, registry: CollectorRegistry) -> None:
        import prometheus_client

        self._histogram = prometheus_client.Histogram(
            self.name, self.help, self.label_names, registry=registry, buckets=self.buckets
        )
        for value, labels in self._pending:
            self.observe(value, **labels)
        self._pending.clear()

    def count(self, **labels: str) -> int:
        wanted = {n: labels[n] for n in self.label_names}
        return int(self._metrics.bind().get_sample_value(f"{self.name}_count", wanted) or 0)


class Gauge:
    """A gauge whose samples come from ``collect()`` at scrape time."""

    def __init__(self, name: str, help_text: str, collect: Callable[[], Samples]) -> None:
        self.name, self.help, self.collect = name, help_text, collect


def _scrape_time_collector(gauges: list[Gauge]) -> Any:
    """The custom collector behind every ``Gauge``: asks the host at each scrape."""
    from prometheus_client.core import GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector

    class ScrapeTimeGauges(Collector):
        def collect(self) -> Iterator[Metric]:
            for gauge in gauges:
                samples = list(gauge.collect())
                names = list(dict.fromkeys(k for labels, _ in samples for k in labels))
                family = GaugeMetricFamily(gauge.name, gauge.help, labels=names)
                for labels, value in samples:
                    family.add_metric([labels.get(n, "") for n in names], value)
                yield family

        def describe(self) -> Iterator[Metric]:
            # Describing would call the host at registration time; an empty answer tells
            # the registry not to check names up front.
            return iter(())

    return ScrapeTimeGauges()


class Metrics:
    """Every devicehost metric. Names and labels are documented in docs/observability.md."""

    def __init__(self) -> None:
        self._registry: CollectorRegistry | None = None
        self._gauges: list[Gauge] = []
        #: (metric name, label values) → its series: one per labels, however often asked
        self._series_kept: dict[tuple[str, tuple[str, ...]], Series] = {}
        self._hand_over: asyncio.TimerHandle | None = None
        self.allocations = Counter(
            self,
            "devicehost_allocations_total",
            "Container allocations answered, by resource and result (ok or the gRPC code).",
            ("resource", "result"),
        )
        self.allocate_duration = Histogram(
            self,
            "devicehost_allocate_duration_seconds",
            "Time to answer one Allocate request, driver included.",
            ("resource",),
        )
        self.registrations = Counter(
            self,
            "devicehost_registrations_total",
            "Registration attempts with the kubelet, by resource and result.",
            ("resource", "result"),
        )
        self.kubelet_restarts = Counter(
            self,
            "devicehost_kubelet_restarts_total",
            "Times kubelet.sock was (re-)created while devicehost ran.",
        )
        self.driver_errors = Counter(
            self,
            "devicehost_driver_errors_total",
            "Driver hook calls that raised, timed out or returned invalid data.",
            ("driver", "hook"),
        )
        self.driver_restarts = Counter(
            self,
            "devicehost_driver_restarts_total",
            "Times a driver's worker process was started again after it went down.",
            ("driver",),
        )
        self.task_restarts = Counter(
            self,
            "devicehost_task_restarts_total",
            "Times a long-running host task failed and was started again, by task.",
            ("task",),
        )
        self.node_file_errors = Counter(
            self,
            "devicehost_node_file_errors_total",
            "Failed writes of a node file (a CDI spec, the feature file), by file; retried.",
            ("file",),
        )
        self.spans_dropped = Counter(
            self,
            "devicehost_spans_dropped_total",
            "Finished spans dropped before export (exporter behind, down or restarting).",
        )
        self.driver_start_failures = Counter(
            self,
            "devicehost_driver_start_failures_total",
            "Times a driver's worker could not be started or brought up.",
            ("driver",),
        )
        self.helper_deaths = Counter(
            self,
            "devicehost_helper_deaths_total",
            "Times one of the host's helper processes died while the host ran.",
            ("helper",),
        )
        self.slice_publish_errors = Counter(
            self,
            "devicehost_dra_publish_errors_total",
            "Failed attempts to publish a DRA driver's ResourceSlices, by DRA driver; retried.",
            ("driver",),
        )
        self.pod_identity_unresolved = Counter(
            self,
            "devicehost_pod_identity_unresolved_total",
            "Allocated containers whose pod PodResources never listed within "
            "podIdentityTimeoutSeconds (their spans carry no pod), by resource.",
            ("resource",),
        )
        self._series: tuple[Counter | Histogram, ...] = (
            self.allocations,
            self.allocate_duration,
            self.registrations,
            self.kubelet_restarts,
            self.driver_errors,
            self.driver_restarts,
            self.task_restarts,
            self.node_file_errors,
            self.spans_dropped,
            self.driver_start_failures,
            self.helper_deaths,
            self.slice_publish_errors,
            self.pod_identity_unresolved,
        )

    def series_of(self, metric: Counter | Histogram, labels: dict[str, str]) -> Series:
        key = (metric.name, tuple(labels[n] for n in metric.label_names))
        series = self._series_kept.get(key)
        if series is None:
            series = self._series_kept[key] = Series(self, metric, labels)
        return series

    def owe(self) -> None:
        """A series has values for the library: hand them over within FLUSH_SECONDS, or at
        the next read (the only time, without an event loop)."""
        if self._hand_over is None:
            with contextlib.suppress(RuntimeError):
                loop = asyncio.get_running_loop()
                self._hand_over = loop.call_later(FLUSH_SECONDS, self._hand_over_owed)

    def _hand_over_owed(self) -> None:
        self._hand_over = None
        self.bind()

    def bind(self) -> CollectorRegistry:
        """Import the Prometheus client and make the registry (once), and hand it what was
        counted since the last time: every read and scrape comes through here."""
        if self._registry is None:
            import prometheus_client

            # A ``_created`` series beside every counter and histogram doubles the series
            # count for a start time Prometheus already has from the process.
            prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
            registry = prometheus_client.CollectorRegistry(auto_describe=False)
            for metric in self._series:
                metric.bind(registry)
            registry.register(_scrape_time_collector(self._gauges))
            self._registry = registry
        for series in list(self._series_kept.values()):
            series.hand_over()
        return self._registry

    @property
    def registry(self) -> CollectorRegistry:
        return self.bind()

    def add_gauge(self, gauge: Gauge) -> None:
        self._gauges.append(gauge)

    def render(self) -> str:
        """Every metric in the Prometheus text format."""
        from prometheus_client import generate_latest

        return generate_latest(self.bind()).decode()
