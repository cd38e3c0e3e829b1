"""A pod's start as a waterfall: the spans of every service that traced it, in time order.

What a person opens Jaeger for: the kubelet's pod sync, the runtime's container start and
devicehost's Allocate of one pod, one line each, offset from the first span's start, with a
bar to scale. Read from Jaeger's query API answers (``GET /api/traces``, its JSON model:
spans with ``startTime``/``duration`` in microseconds, ``references``, and a ``processes``
map naming each span's service), drawn as text, JSON, or a PNG (matplotlib, the ``trace``
extra).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BAR_WIDTH = 40


@dataclass(frozen=True)
class Span:
    """One span of the waterfall; times in milliseconds from the first span's start."""

    service: str
    operation: str
    start_ms: float
    duration_ms: float
    depth: int
    trace_id: str
    span_id: str

    @property
    def end_ms(self) -> float:
        return self.start_ms + self.duration_ms


def spans_of(traces: Iterable[Mapping[str, Any]]) -> list[Span]:
    """Every span of ``traces`` (Jaeger's ``data``), each once, in start order, with its
    depth under the ancestors present (a span whose parent was not found is a root)."""
    raw: dict[str, tuple[Mapping[str, Any], str]] = {}
    for trace in traces:
        processes = trace.get("processes") or {}
        for span in trace.get("spans") or ():
            process = processes.get(span.get("processID"), {})
            raw.setdefault(str(span["spanID"]), (span, str(process.get("serviceName", "?"))))
    if not raw:
        return []
    parents = {
        span_id: next(
            (
                str(ref["spanID"])
                for ref in span.get("references") or ()
                if ref.get("refType") == "CHILD_OF"
            ),
            None,
        )
        for span_id, (span, _) in raw.items()
    }

    def depth(span_id: str) -> int:
        seen: set[str] = set()
        level, parent = 0, parents.get(span_id)
        while parent in raw and parent not in seen:
            seen.add(parent)
            level, parent = level + 1, parents.get(parent)
        return level

    first = min(int(span["startTime"]) for span, _ in raw.values())
    found = [
        Span(
            service=service,
            operation=str(span.get("operationName", "")),
            start_ms=(int(span["startTime"]) - first) / 1000,
            duration_ms=int(span.get("duration", 0)) / 1000,
            depth=depth(span_id),
            trace_id=str(span.get("traceID", "")),
            span_id=span_id,
        )
        for span_id, (span, service) in raw.items()
    ]
    return sorted(found, key=lambda s: (s.start_ms, -s.duration_ms, s.depth))


def as_text(spans: list[Span], title: str) -> str:
    """The waterfall for a terminal: offset, duration, service and operation (indented by
    depth), and a bar placed and sized on the whole start's time scale."""
    if not spans:
        return f"{title}: no spans"
    total = max(s.end_ms for s in spans) or 1.0
    services = sorted({s.service for s in spans})
    width = max(len(s.service) for s in spans)
    label = max(len("  " * s.depth + s.operation) for s in spans)
    lines = [
        f"{title}: {len(spans)} spans from {', '.join(services)}, {_ms(total)} first to last",
        f"{'start':>10} {'took':>10}  {'service':<{width}}  {'operation':<{label}}",
    ]
    for s in spans:
        begin = min(int(s.start_ms / total * BAR_WIDTH), BAR_WIDTH - 1)
        length = max(1, round(s.duration_ms / total * BAR_WIDTH))
        bar = " " * begin + "█" * min(length, BAR_WIDTH - begin)
        name = "  " * s.depth + s.operation
        lines.append(
            f"{_ms(s.start_ms):>10} {_ms(s.duration_ms):>10}  {s.service:<{width}}  "
            f"{name:<{label}}  |{bar:<{BAR_WIDTH}}|"
        )
    return "\n".join(lines)


def as_json(spans: list[Span]) -> list[dict[str, Any]]:
    return [asdict(s) for s in spans]


def as_png(spans: list[Span], title: str, path: Path) -> None:
    """The same waterfall as an image: one bar per span, coloured by service, each with its
    duration beside it; a span too short to see is drawn a hair wide."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    from matplotlib import pyplot
    from matplotlib.patches import Patch

    services = sorted({s.service for s in spans})
    palette = pyplot.get_cmap("tab10")
    colours = {service: palette(i % 10) for i, service in enumerate(services)}
    total = max(s.end_ms for s in spans) or 1.0
    hair = total / 300
    figure, axes = pyplot.subplots(figsize=(11, max(2.5, 0.34 * len(spans) + 1.4)))
    rows = list(range(len(spans)))
    axes.barh(
        rows,
        [max(s.duration_ms, hair) for s in spans],
        left=[s.start_ms for s in spans],
        color=[colours[s.service] for s in spans],
        height=0.6,
    )
    for row, s in zip(rows, spans, strict=True):
        axes.text(
            s.start_ms + max(s.duration_ms, hair) + hair,
            row,
            _ms(s.duration_ms),
            va="center",
            fontsize=8,
        )
    axes.set_yticks(rows, [f"{s.service}: {'  ' * s.depth}{s.operation}" for s in spans])
    axes.invert_yaxis()  # the first span on top, as in Jaeger
    axes.set_xlim(0, total * 1.12)
    axes.set_xlabel("milliseconds since the first span started")
    name, _, rest = title.partition(" (")
    axes.set_title(name + (f"\n({rest}" if rest else ""), fontsize=10)
    axes.grid(axis="x", alpha=0.3)
    axes.legend(handles=[Patch(color=colours[s], label=s) for s in services], loc="upper right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot.close(figure)


def _ms(value: float) -> str:
    if value < 1:
        return f"{value:.2f} ms"
    return f"{value:.1f} ms" if value < 1000 else f"{value / 1000:.2f} s"
