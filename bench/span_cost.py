"""What tracing costs the host per Allocate: the span work on the request path, timed.

End-to-end latency with tracing on (``allocate_round_trip``) also carries the export
process's and the receiver's CPU, which on a 2-core bench machine compete with the client
and the host for the same cores; on a node the collector runs elsewhere. This isolates the
host's own part: the request span an Allocate makes (attributes at start, status at the
end), timed per request in-process with tracing on (exporting through the real export
process to a real receiver) and off, and the deferred conversion that follows the answer.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from types import SimpleNamespace
from typing import Any

from devicehost.telemetry.tracing import REQUESTED, Tracing, set_rpc_status

DRIVER = SimpleNamespace(name="nvidia", info=SimpleNamespace(version="0.1.0"))


async def _time_spans(tracing: Tracing, count: int) -> tuple[list[float], float]:
    """Per-request span time (µs), and host CPU per span including deferred work (µs)."""
    each: list[float] = []
    cpu_start = time.process_time()
    for index in range(count):
        started = time.perf_counter_ns()
        with tracing.rpc_span(
            "Allocate", "nvidia.com/gpu", DRIVER, (), {REQUESTED: [f"GPU-{index % 8}"]}
        ) as span:
            set_rpc_status(span, "OK")
        each.append((time.perf_counter_ns() - started) / 1000)
        await asyncio.sleep(0)  # the loop runs what the span deferred, as between requests
    await asyncio.sleep(0.05)
    return each, (time.process_time() - cpu_start) / count * 1e6


def span_cost(endpoint: str, count: int) -> dict[str, Any]:
    async def measure() -> dict[str, Any]:
        figures: dict[str, Any] = {}
        for name, target in (("tracing_off", ""), ("tracing_on", endpoint)):
            tracing = Tracing.from_config(target, "bench-node", "bench")
            await _time_spans(tracing, min(count, 1000))  # warm
            each, cpu = await _time_spans(tracing, count)
            tracing.shutdown(1.0)
            quantiles = statistics.quantiles(each, n=100)
            figures[name] = {
                "p50_us": round(quantiles[49], 1),
                "p99_us": round(quantiles[98], 1),
                "cpu_per_request_us": round(cpu, 1),
            }
        return figures

    return asyncio.run(measure())
