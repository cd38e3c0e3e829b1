"""``devicehost trace POD``: a pod's start read from Jaeger's query API and drawn.

Jaeger here is a stand-in over real HTTP answering ``GET /api/traces`` in Jaeger's JSON
model (the tier runs the real one: e2e/tests/test_traces.py): traces of the kubelet and of
devicehost for one pod, found by span tags as Jaeger finds them.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from devicehost.cli import trace
from devicehost.cli.main import main
from devicehost.telemetry import tracing

UID = "6f1c2a9e-3b4d-4e5f-8a7b-9c0d1e2f3a4b"
T0 = 1_764_000_000_000_000  # microseconds since the epoch, as Jaeger keeps startTime


def tag(key: str, value: str) -> dict[str, str]:
    return {"key": key, "type": "string", "value": value}


def span(
    trace_id: str, span_id: str, name: str, start_ms: float, took_ms: float, **extra: Any
) -> dict[str, Any]:
    parent = extra.pop("parent", None)
    return {
        "traceID": trace_id,
        "spanID": span_id,
        "operationName": name,
        "references": [{"refType": "CHILD_OF", "traceID": trace_id, "spanID": parent}]
        if parent
        else [],
        "startTime": T0 + int(start_ms * 1000),
        "duration": int(took_ms * 1000),
        "tags": extra.pop("tags", []),
        "processID": "p1",
    }


POD_TAGS = [tag("k8s.pod.uid", UID), tag("k8s.pod.name", "web"), tag("k8s.namespace.name", "a")]
KUBELET = {
    "traceID": "k1",
    "processes": {"p1": {"serviceName": "kubelet", "tags": []}},
    "spans": [
        span("k1", "s3", "runtime.v1.RuntimeService/StartContainer", 1400, 250, parent="s1"),
        span("k1", "s1", "syncPod", 0, 2000, tags=POD_TAGS),
        span("k1", "s2", "runtime.v1.RuntimeService/CreateContainer", 900, 400, parent="s1"),
    ],
}
DEVICEHOST = {
    "traceID": "d1",
    "processes": {"p1": {"serviceName": "devicehost", "tags": []}},
    "spans": [
        span("d1", "a1", "v1beta1.DevicePlugin/Allocate", 350, 1.5),
        span("d1", "a2", "devicehost/PodIdentity", 352, 0.1, parent="a1", tags=POD_TAGS),
    ],
}


class Jaeger(BaseHTTPRequestHandler):
    """Answers a search with the traces of the asked service one of whose spans has
    every asked tag, as Jaeger's query service does."""

    traces: ClassVar[list[dict[str, Any]]] = [KUBELET, DEVICEHOST]
    body: ClassVar[bytes | None] = None

    def do_GET(self) -> None:
        url = urllib.parse.urlparse(self.path)
        query = urllib.parse.parse_qs(url.query)
        if self.body is not None:
            payload = self.body
        elif url.path != "/api/traces":
            self.send_error(404)
            return
        else:
            service, tags = query["service"][0], json.loads(query["tags"][0])
            found = [
                t
                for t in self.traces
                if t["processes"]["p1"]["serviceName"] == service
                and any(
                    tags.items() <= {x["key"]: x["value"] for x in s["tags"]}.items()
                    for s in t["spans"]
                )
            ]
            payload = json.dumps({"data": found}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def jaeger() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Jaeger)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    Jaeger.body = None


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["trace", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_pod_by_name_is_drawn_with_every_services_spans_in_time_order(
    jaeger: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The name finds the UID on devicehost's spans; the waterfall holds the kubelet's
    and devicehost's spans by start, each with its offset, duration and a bar."""
    code, out, _ = run(capsys, "web", "-n", "a", "--jaeger", jaeger)
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].startswith(f"pod a/web ({UID}): 5 spans from devicehost, kubelet, 2.00 s")
    order = [
        "syncPod",
        "v1beta1.DevicePlugin/Allocate",
        "devicehost/PodIdentity",
        "runtime.v1.RuntimeService/CreateContainer",
        "runtime.v1.RuntimeService/StartContainer",
    ]
    rows = lines[2:]
    assert [next(o for o in order if o in row) for row in rows] == order
    assert rows[1].split()[:4] == ["350.0", "ms", "1.5", "ms"]
    assert "|" + "█" * 40 + "|" in rows[0]  # syncPod spans the whole start
    assert "    devicehost/PodIdentity" in rows[2]  # indented under its Allocate


def test_json_gives_each_span_with_its_offset_and_depth(
    jaeger: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, UID, "--jaeger", jaeger, "--json")
    assert code == 0
    answer = json.loads(out)
    assert answer["uid"] == UID
    create = next(s for s in answer["spans"] if s["operation"].endswith("CreateContainer"))
    assert create == {
        "service": "kubelet",
        "operation": "runtime.v1.RuntimeService/CreateContainer",
        "start_ms": 900.0,
        "duration_ms": 400.0,
        "depth": 1,
        "trace_id": "k1",
        "span_id": "s2",
    }


def test_png_draws_the_same_waterfall(
    jaeger: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    picture = tmp_path / "start.png"
    code, out, _ = run(capsys, "web", "-n", "a", "--jaeger", jaeger, "--png", str(picture))
    assert code == 0, out
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {picture}" in out


def test_a_pod_no_devicehost_span_names_is_refused_with_how_to_give_its_uid(
    jaeger: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "db", "-n", "b", "--jaeger", jaeger)
    assert code == 1
    assert "no devicehost span in Jaeger" in err and "names pod b/db" in err
    assert "kubectl -n b get pod db -o jsonpath='{.metadata.uid}'" in err


def test_an_unreachable_jaeger_is_named_with_the_port_forward_to_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(capsys, UID, "--jaeger", "http://127.0.0.1:9")
    assert code == 1
    assert "cannot reach Jaeger's query API at http://127.0.0.1:9" in err
    assert "port-forward svc/jaeger 16686" in err


def test_what_is_not_jaeger_is_said_so(jaeger: str, capsys: pytest.CaptureFixture[str]) -> None:
    Jaeger.body = b"<html>a login page</html>"
    code, _, err = run(capsys, UID, "--jaeger", jaeger)
    assert code == 1
    assert f"what answers at {jaeger} is not Jaeger's query API" in err


def test_the_tag_keys_are_the_ones_the_host_puts_on_spans() -> None:
    assert (trace.POD_UID, trace.POD_NAME, trace.NAMESPACE) == (
        tracing.POD_UID,
        tracing.POD_NAME,
        tracing.NAMESPACE,
    )
