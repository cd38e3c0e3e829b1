"""`devicehost drivers` reads a running daemon's state from whatever answers on its
metrics address: it believes only a devicehost's answer, read in bounded time and size."""

from __future__ import annotations

import fcntl
import http.server
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from devicehost.cli.live import MAX_ANSWER_BYTES, READ_SECONDS, daemon_drivers
from devicehost.config.host_config import HostConfig

ROW = {
    "name": "nvidia",
    "kind": "driver",
    "distribution": "devicehost-nvidia",
    "version": "0.1.0",
    "status": "active",
    "reason": "",
    "notes": [],
    "restarts": 0,
    "hung": [],
    "resources": ["nvidia.com/gpu"],
    "nodeFileErrors": [],
}


@contextmanager
def answering(write_body: Callable[[http.server.BaseHTTPRequestHandler], None]) -> Iterator[int]:
    """An HTTP server on loopback whose GET /drivers answers with ``write_body``."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            write_body(self)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def daemon_lock(plugin_dir: Path) -> Iterator[None]:
    """The plugin directory locked, as a running daemon holds it."""
    fd = os.open(plugin_dir, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        os.close(fd)


def config_for(tmp_path: Path, port: int) -> HostConfig:
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir(exist_ok=True)
    return replace(HostConfig(), plugin_dir=plugin_dir, metrics_address=f"127.0.0.1:{port}")


def read_through(tmp_path: Path, write_body: Callable[..., None]) -> list | None:
    with answering(write_body) as port:
        config = config_for(tmp_path, port)
        with daemon_lock(config.plugin_dir):
            return daemon_drivers(config)


def test_a_devicehost_s_answer_is_shown_as_the_daemon_s(tmp_path):
    """Rows with every field a devicehost sends are the daemon's live state."""
    rows = read_through(tmp_path, lambda h: h.wfile.write(json.dumps([ROW]).encode()))
    assert rows == [{**ROW, "source": "daemon"}]


def test_rows_without_a_devicehost_s_fields_are_not_believed(tmp_path, caplog):
    """Another program's JSON (a row without ``kind``) is refused with a line saying what
    answered is not a devicehost, and the command probes instead of failing."""
    other = [{k: v for k, v in ROW.items() if k != "kind"}]
    assert read_through(tmp_path, lambda h: h.wfile.write(json.dumps(other).encode())) is None
    assert "no 'kind' of a devicehost's" in caplog.text
    assert "another program listening on metrics.address" in caplog.text


def test_a_trickling_answer_is_cut_off_in_bounded_time(tmp_path, caplog):
    """An answer sent a byte at a time is given up after READ_SECONDS in all, not after
    each byte's own timeout."""

    def trickle(handler: http.server.BaseHTTPRequestHandler) -> None:
        for _ in range(200):
            handler.wfile.write(b" ")
            handler.wfile.flush()
            time.sleep(0.2)

    assert read_through(tmp_path, trickle) is None
    assert f"took over {READ_SECONDS:g} s" in caplog.text


def test_an_answer_past_the_bound_is_refused_unread(tmp_path, caplog):
    """An answer over MAX_ANSWER_BYTES is refused once the bound is passed."""

    def flood(handler: http.server.BaseHTTPRequestHandler) -> None:
        chunk = b" " * 65536
        for _ in range(MAX_ANSWER_BYTES // len(chunk) + 4):
            handler.wfile.write(chunk)

    assert read_through(tmp_path, flood) is None
    assert f"over {MAX_ANSWER_BYTES} bytes" in caplog.text
