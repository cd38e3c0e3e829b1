"""The request span asks the configured sampler, except where its answer is known."""

from __future__ import annotations

import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)

from devicehost.telemetry.request_span import RequestSpan, start_request_span
from support import modules_after

ATTRIBUTES = {"rpc.method": "v1beta1.DevicePlugin/Allocate"}


def root_span(sampler):
    ended = []
    span = start_request_span(
        TracerProvider(sampler=sampler),
        ended.append,
        "v1beta1.DevicePlugin/Allocate",
        otel_context.Context(),
        dict(ATTRIBUTES),
    )
    span.end()
    return span, ended


@pytest.mark.parametrize("sampler", [ALWAYS_ON, ParentBased(ALWAYS_ON)], ids=str)
def test_a_root_span_is_recorded_by_samplers_that_take_every_root(sampler):
    span, ended = root_span(sampler)
    assert isinstance(span, RequestSpan) and ended == [span]
    assert span.parent is None and span.get_span_context().trace_flags.sampled
    assert span.attributes == ATTRIBUTES


@pytest.mark.parametrize(
    "sampler", [ALWAYS_OFF, ParentBased(ALWAYS_OFF), TraceIdRatioBased(0.0)], ids=str
)
def test_a_sampler_that_drops_roots_still_drops_them(sampler):
    span, ended = root_span(sampler)
    assert not span.is_recording() and ended == []
    assert not span.get_span_context().trace_flags.sampled


class Tagging(Sampler):
    """A sampler that records every span and adds an attribute and a trace state."""

    def should_sample(self, parent_context, trace_id, name, kind=None, attributes=None, *_):
        from opentelemetry.trace.span import TraceState

        return SamplingResult(
            Decision.RECORD_AND_SAMPLE, {"sampled.by": "tagging"}, TraceState([("k", "v")])
        )

    def get_description(self) -> str:
        return "Tagging"


def test_a_samplers_attributes_and_trace_state_reach_the_span():
    span, _ = root_span(Tagging())
    assert span.attributes == {**ATTRIBUTES, "sampled.by": "tagging"}
    assert span.get_span_context().trace_state.to_header() == "k=v"


def test_the_default_sampler_is_not_asked_about_a_root_span(monkeypatch):
    """Its answer for a span without a parent is always "record": the request path skips
    the call (about a microsecond of context lookups per Allocate)."""
    sampler = TracerProvider().sampler
    asked = []
    monkeypatch.setattr(sampler, "should_sample", lambda *a, **k: asked.append(a))
    span, _ = root_span(sampler)
    assert span.is_recording() is False and span.get_span_context().trace_flags.sampled
    assert asked == []


def test_with_tracing_off_the_host_never_imports_opentelemetry():
    """The SDK (its sampler and span classes) and even the API (its propagators are found by
    scanning every distribution's entry points) cost ~35 ms of every cold start together;
    without an endpoint nothing needs them: requests get a span that records nothing."""
    loaded, run = modules_after(
        "import devicehost.cli.main, devicehost.host; "
        "from devicehost.telemetry.facade import Telemetry; "
        "from devicehost.telemetry.logs import setup_logging; "
        "setup_logging('json', 'info'); t = Telemetry(); "
        "import logging; logging.getLogger('probe').info('no span here')"
    )
    assert not [m for m in loaded if m.startswith("opentelemetry")]
    assert '"message": "no span here"' in run.stderr
