"""The span of one kubelet request, recorded without the SDK's span machinery.

Every Allocate makes one span. With the SDK's ``Tracer.start_as_current_span`` that span
costs the host about 30 µs at the median and 80 µs at p99 on the bench machine
(bench/span_cost.py): attribute validation and limits, locks, span processors' start
hooks. A request span needs little of that: its attributes are constants of known types
(tracing.py), it has no links, and it ends on the thread that started it. This class
implements the OpenTelemetry ``Span`` API with plain fields, takes the sampling decision
from the SDK's own sampler (so ``OTEL_TRACES_SAMPLER`` still rules), sits in the
OpenTelemetry context like any span (child spans and log lines see it), and on ``end``
hands itself to the export process's span processor, which reads exactly these fields.
"""

from __future__ import annotations

import functools
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, Sampler
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util import types


class Event(NamedTuple):
    """A span event, with the fields the export process reads."""

    name: str
    timestamp: int
    attributes: Mapping[str, Any]


UNSET = Status(StatusCode.UNSET)
SAMPLED = TraceFlags(TraceFlags.SAMPLED)
NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)


class RequestSpan(trace.Span):
    """A recording span with plain fields; ``sink`` receives it once, when it ends."""

    links: Sequence[Any] = ()

    def __init__(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        attributes: dict[str, Any],
        sink: Callable[[Any], None],
    ) -> None:
        self.start_time = time.time_ns()
        self.end_time: int | None = None
        self.name = name
        self.context = context
        self.parent = parent
        self.kind = kind
        self.attributes = attributes
        self.events: list[Event] = []
        self.status = UNSET
        self._sink = sink

    def get_span_context(self) -> SpanContext:
        return self.context

    def is_recording(self) -> bool:
        return self.end_time is None

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        self.attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        self.attributes.update(attributes)

    def add_event(
        self, name: str, attributes: types.Attributes = None, timestamp: int | None = None
    ) -> None:
        self.events.append(Event(name, timestamp or time.time_ns(), dict(attributes or {})))

    def update_name(self, name: str) -> None:
        self.name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        self.status = status if isinstance(status, Status) else Status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """As the SDK records one: an ``exception`` event with type, message, stack."""
        cls = type(exception)
        module = cls.__module__
        event: dict[str, Any] = {
            "exception.type": f"{module}.{cls.__qualname__}"
            if module and module != "builtins"
            else cls.__qualname__,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        event.update(attributes or {})
        self.add_event("exception", event, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self.end_time is None:
            self.end_time = end_time or time.time_ns()
            self._sink(self)


def start_request_span(
    provider: Any,
    sink: Callable[[Any], None],
    name: str,
    parent_context: Context,
    attributes: dict[str, Any],
) -> trace.Span:
    """A SERVER span under ``parent_context`` (a remote ``traceparent``, or none), sampled
    by the provider's sampler; a span the sampler drops records nothing."""
    ids = provider.id_generator
    sampler = provider.sampler
    if not parent_context and samples_every_root(sampler):
        # No parent, and a sampler whose root decision is a constant "yes" (the default,
        # parentbased_always_on): the answer is known without asking it.
        context = SpanContext(ids.generate_trace_id(), ids.generate_span_id(), False, SAMPLED)
        return RequestSpan(name, context, None, SpanKind.SERVER, attributes, sink)
    parent = trace.get_current_span(parent_context).get_span_context()
    trace_id = parent.trace_id if parent.is_valid else ids.generate_trace_id()
    decision = sampler.should_sample(parent_context, trace_id, name, SpanKind.SERVER, attributes)
    sampled = decision.decision.is_sampled()
    context = SpanContext(
        trace_id,
        ids.generate_span_id(),
        is_remote=False,
        trace_flags=SAMPLED if sampled else NOT_SAMPLED,
        trace_state=decision.trace_state,
    )
    if not sampled:
        return trace.NonRecordingSpan(context)
    return RequestSpan(
        name,
        context,
        parent if parent.is_valid else None,
        SpanKind.SERVER,
        {**attributes, **(decision.attributes or {})},
        sink,
    )


def _description(sampler: Sampler) -> str:
    return sampler.get_description()


#: Samplers that record every span without a parent, and add no attributes or trace state
#: to it, by their own description (``Sampler.get_description``: public, and it names the
#: root sampler). ``parentbased_always_on`` is OpenTelemetry's default.
ROOT_ALWAYS_SAMPLED = frozenset(map(_description, (ALWAYS_ON, ParentBased(ALWAYS_ON))))


@functools.lru_cache(maxsize=8)
def samples_every_root(sampler: Sampler) -> bool:
    return _description(sampler) in ROOT_ALWAYS_SAMPLED
