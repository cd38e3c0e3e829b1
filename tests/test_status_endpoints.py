"""The status server's address families, and what telemetry settings may print.

The status server is started on the real event loop and spoken to over real sockets.
"""

from __future__ import annotations

import asyncio
import base64
import http.server
import logging
import socket
import threading
import urllib.request
from typing import ClassVar

import pytest

from devicehost.config.host_config import load_config, redact_url
from devicehost.telemetry.export_settings import otlp_exporter, traces_endpoint
from devicehost.telemetry.status_server import StatusServer
from devicehost.telemetry.tracing import Tracing
from support import UNHURRIED_SECONDS


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read().decode()


async def _serve_and_get(address: str, urls: list[str]) -> list[tuple[int, str]]:
    server = StatusServer(address, lambda: "up 1\n", lambda: [])
    await server.start()
    try:
        loop = asyncio.get_running_loop()
        return [
            await loop.run_in_executor(None, _get, url.format(port=server.port)) for url in urls
        ]
    finally:
        await server.close()


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="this machine has no IPv6 loopback")
def test_status_server_answers_on_an_ipv6_only_loopback() -> None:
    """Bound to [::1] alone, /healthz answers over IPv6."""
    [(status, body)] = asyncio.run(_serve_and_get("[::1]:0", ["http://[::1]:{port}/healthz"]))
    assert status == 200
    assert body.startswith("ok")


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="this machine has no IPv6 loopback")
def test_empty_host_listens_on_every_address_family() -> None:
    """``:PORT`` serves the same port over IPv4 and IPv6 (the DaemonSet's default)."""
    answers = asyncio.run(
        _serve_and_get(":0", ["http://127.0.0.1:{port}/metrics", "http://[::1]:{port}/metrics"])
    )
    assert answers == [(200, "up 1\n"), (200, "up 1\n")]


def test_a_port_taken_on_one_family_is_a_start_up_error_naming_it() -> None:
    """``:PORT`` with the IPv4 port held by another process (dcgm-exporter's 9400, say) is
    refused at start naming the address and the family, never served on IPv6 alone while
    IPv4 probes and scrapes reach the other process."""
    from devicehost.errors import ConfigError
    from devicehost.telemetry.status_server import start_status_server

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
        other.bind(("0.0.0.0", 0))
        other.listen(1)
        port = other.getsockname()[1]
        with pytest.raises(ConfigError) as refused:
            asyncio.run(start_status_server(f":{port}", lambda: "", lambda: []))
    assert f"cannot listen on :{port}" in str(refused.value)
    assert "AF_INET" in str(refused.value) and "in use" in str(refused.value)


def test_redact_url_hides_credentials_only() -> None:
    """user:password@ becomes ***@; host, port and path stay readable."""
    assert redact_url("https://bob:s3cret@otel.example:4318/v1/traces") == (
        "https://***@otel.example:4318/v1/traces"
    )
    assert redact_url("http://collector:4317") == "http://collector:4317"


class _Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP collector that records each request's path and Authorization."""

    seen: ClassVar[list[tuple[str, str]]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.seen.append((self.path, self.headers.get("Authorization", "")))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_credentials_in_the_endpoint_are_never_printed_or_logged(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An endpoint with user:password@: the printed config and every log line hide the
    password, and the collector still receives the credentials, as Basic authorization."""
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        secret = f"http://bob:s3cret@127.0.0.1:{server.server_port}/v1/traces"
        config = load_config(env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": secret})
        assert config.otlp_endpoint == secret
        assert "s3cret" not in str(config.to_document(redact=True))
        tracing = Tracing.from_config(config.otlp_endpoint, "node", "1.0")
        with tracing.child_span("one"):
            pass
        tracing.shutdown(flush_seconds=UNHURRIED_SECONDS)  # delivery, not speed, is checked
    finally:
        server.shutdown()
    assert not [r for r in caplog.records if "s3cret" in r.getMessage()]
    token = base64.b64encode(b"bob:s3cret").decode()
    assert ("/v1/traces", f"Basic {token}") in _Collector.seen


def test_traces_specific_endpoint_wins_and_is_used_as_given() -> None:
    """OTEL_EXPORTER_OTLP_TRACES_ENDPOINT beats OTEL_EXPORTER_OTLP_ENDPOINT, and an HTTP
    traces endpoint is used as given (no /v1/traces appended), as the OTLP spec says."""
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://generic:4318",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:4318/custom",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
    }
    assert traces_endpoint(env) == "http://traces:4318/custom"
    assert load_config(env=env).otlp_endpoint == "http://traces:4318/custom"
    exporter = otlp_exporter("http://traces:4318/custom", env=env)
    assert exporter._endpoint == "http://traces:4318/custom"  # the SDK keeps no public copy
    exporter.shutdown()
    generic = otlp_exporter("http://generic:4318", env=env)
    assert generic._endpoint == "http://generic:4318/v1/traces"
    generic.shutdown()
