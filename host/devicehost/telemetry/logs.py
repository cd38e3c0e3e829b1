"""Log set-up: plain text for people, JSON lines for collectors, trace IDs in both.

Inside a span, each record carries ``trace_id`` and ``span_id`` so a log line leads to its
trace in Jaeger and back.
"""

from __future__ import annotations

import json
import logging
import sys
import time

TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s%(trace)s"


class _TraceContext(logging.Filter):
    """Adds ``trace_id``/``span_id`` (empty outside a span) to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        # OpenTelemetry is imported only when tracing is on; without it there is no span.
        trace = sys.modules.get("opentelemetry.trace")
        trace_id = span_id = ""
        if trace is not None:
            context = trace.get_current_span().get_span_context()
            if context.is_valid:
                trace_id, span_id = (
                    format(context.trace_id, "032x"),
                    format(context.span_id, "016x"),
                )
        record.trace_id, record.span_id = trace_id, span_id
        record.trace = f" [trace_id={trace_id} span_id={span_id}]" if trace_id else ""
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, trace and span IDs."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        trace_id = getattr(record, "trace_id", "")
        if trace_id:
            entry["trace_id"] = trace_id
            entry["span_id"] = getattr(record, "span_id", "")
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def setup_logging(log_format: str = "text", level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_TraceContext())
    handler.setFormatter(
        JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.getLogger("devicehost").setLevel(level.upper())
