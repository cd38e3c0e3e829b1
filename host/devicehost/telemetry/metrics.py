"""Prometheus metrics: a tiny registry and the text exposition format.

Why not prometheus_client: seven metrics do not need another dependency, and the host's
event loop is the only writer, so no locks are needed. Gauges that describe current state
(devices per health, driver info) are computed at scrape time from the host, never kept
in two places.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence

Labels = tuple[tuple[str, str], ...]

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


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Labels, extra: str = "") -> str:
    parts = [f'{k}="{_escape(v)}"' for k, v in labels]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class Counter:
    def __init__(self, name: str, help_text: str, label_names: Sequence[str] = ()) -> None:
        self.name, self.help, self.label_names = name, help_text, tuple(label_names)
        self.values: dict[Labels, float] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = tuple((n, labels[n]) for n in self.label_names)
        self.values[key] = self.values.get(key, 0.0) + amount

    def value(self, **labels: str) -> float:
        return self.values.get(tuple((n, labels[n]) for n in self.label_names), 0.0)

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} counter"
        for key, value in sorted(self.values.items()):
            yield f"{self.name}{_labels(key)} {_number(value)}"


class Histogram:
    def __init__(
        self,
        name: str,
        help_text: str,
        label_names: Sequence[str] = (),
        buckets: Sequence[float] = DURATION_BUCKETS,
    ) -> None:
        self.name, self.help, self.label_names = name, help_text, tuple(label_names)
        self.buckets = tuple(buckets)
        self.series: dict[Labels, tuple[list[int], list[float]]] = {}

    def observe(self, value: float, **labels: str) -> None:
        key = tuple((n, labels[n]) for n in self.label_names)
        counts, totals = self.series.setdefault(key, ([0] * (len(self.buckets) + 1), [0.0]))
        counts[bisect.bisect_left(self.buckets, value)] += 1
        totals[0] += value

    def count(self, **labels: str) -> int:
        series = self.series.get(tuple((n, labels[n]) for n in self.label_names))
        return sum(series[0]) if series else 0

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} histogram"
        for key, (counts, totals) in sorted(self.series.items()):
            running = 0
            bounds = [*map(_number, self.buckets), "+Inf"]
            for bound, count in zip(bounds, counts, strict=True):
                running += count
                le = 'le="' + bound + '"'
                yield f"{self.name}_bucket{_labels(key, le)} {running}"
            yield f"{self.name}_sum{_labels(key)} {_number(totals[0])}"
            yield f"{self.name}_count{_labels(key)} {running}"


class Gauge:
    """A gauge whose samples come from a function at scrape time."""

    def __init__(
        self,
        name: str,
        help_text: str,
        collect: Callable[[], Iterable[tuple[dict[str, str], float]]],
    ) -> None:
        self.name, self.help, self.collect = name, help_text, collect

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} gauge"
        for labels, value in self.collect():
            yield f"{self.name}{_labels(tuple(labels.items()))} {_number(value)}"


class Metrics:
    """Every devicehost metric. Names and labels are documented in docs/observability.md."""

    def __init__(self) -> None:
        self.allocations = Counter(
            "devicehost_allocations_total",
            "Container allocations answered, by resource and result (ok or the gRPC code).",
            ("resource", "result"),
        )
        self.allocate_duration = Histogram(
            "devicehost_allocate_duration_seconds",
            "Time to answer one Allocate request, driver included.",
            ("resource",),
        )
        self.registrations = Counter(
            "devicehost_registrations_total",
            "Registration attempts with the kubelet, by resource and result.",
            ("resource", "result"),
        )
        self.kubelet_restarts = Counter(
            "devicehost_kubelet_restarts_total",
            "Times kubelet.sock was (re-)created while devicehost ran.",
        )
        self.driver_errors = Counter(
            "devicehost_driver_errors_total",
            "Driver hook calls that raised, timed out or returned invalid data.",
            ("driver", "hook"),
        )
        self.driver_restarts = Counter(
            "devicehost_driver_restarts_total",
            "Times a driver's worker process was started again after it went down.",
            ("driver",),
        )
        self.gauges: list[Gauge] = []

    def add_gauge(self, gauge: Gauge) -> None:
        self.gauges.append(gauge)

    def render(self) -> str:
        metrics: list[Counter | Histogram | Gauge] = [
            self.allocations,
            self.allocate_duration,
            self.registrations,
            self.kubelet_restarts,
            self.driver_errors,
            self.driver_restarts,
            *self.gauges,
        ]
        return "\n".join(line for metric in metrics for line in metric.render()) + "\n"
