"""A Kubernetes API server stand-in over real HTTP, for the DRA face's client (lightkube).

It answers exactly the calls the DRA face makes, as the API server answers them (k8s.io
apiserver v0.37.2): server-side apply of cluster-scoped ``resource.k8s.io/v1``
ResourceSlices (``PATCH`` with ``application/apply-patch+yaml``), their ``DELETE`` and
``LIST`` with the ``spec.nodeName`` and ``spec.driver`` field selectors, ``GET`` of a Node and
of a namespaced ResourceClaim; every other path is a 404 ``Status``. Each request is
recorded with its time; ``fail`` makes the next calls answer an error, as an API server
that is overloaded or refuses them would. A call without the bearer token the kubeconfig
(``write_kubeconfig``) names is refused with 401. The real one runs in the cluster tier.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
_SLICE = re.compile(rf"^{SLICES}/(?P<name>[^/]+)$")
_NODE = re.compile(r"^/api/v1/nodes/(?P<name>[^/]+)$")
TOKEN = "devicehost-test-token"
_CLAIM = re.compile(
    r"^/apis/resource.k8s.io/v1/namespaces/(?P<ns>[^/]+)/resourceclaims/(?P<name>[^/]+)$"
)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    at: float


class ApiServer:
    """``with ApiServer() as api:`` serves on ``api.url`` until the block ends."""

    def __init__(self) -> None:
        self.slices: dict[str, dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[Request] = []
        self._failures: list[tuple[int, str]] = []
        self._version = 0
        self._lock = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> ApiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- what a test sets and reads --------------------------------------------------------

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig for this server with its token, as a user would have one."""
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "standin", "cluster": {"server": self.url}}],
            "users": [{"name": "devicehost", "user": {"token": TOKEN}}],
            "contexts": [
                {"name": "standin", "context": {"cluster": "standin", "user": "devicehost"}}
            ],
            "current-context": "standin",
        }
        path.write_text(json.dumps(document))
        return path

    def add_node(self, name: str, labels: dict[str, str] | None = None) -> str:
        uid = str(uuid.uuid4())
        metadata: dict[str, Any] = {"name": name, "uid": uid}
        if labels:
            metadata["labels"] = dict(labels)
        self.nodes[name] = {"apiVersion": "v1", "kind": "Node", "metadata": metadata}
        return uid

    def fail(self, times: int, code: int = 503, message: str = "the server is busy") -> None:
        """The next ``times`` calls answer ``code``."""
        with self._lock:
            self._failures.extend([(code, message)] * times)

    def calls(self, method: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.method == method]

    @contextmanager
    def changes(self) -> Iterator[threading.Condition]:
        with self._lock:
            yield self._lock

    def wait_for(self, predicate: Any, timeout: float = 60.0) -> None:
        """Until ``predicate()`` holds for the stored objects (checked at each request)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"the API server never saw it; requests: {self.requests}")
                self._lock.wait(left)

    # -- serving ---------------------------------------------------------------------------

    def _answer(
        self, method: str, path: str, query: dict[str, list[str]], body: Any, token: str
    ) -> tuple[int, Any]:
        if token != f"Bearer {TOKEN}":
            return 401, _status(401, "Unauthorized")
        if self._failures:
            code, message = self._failures.pop(0)
            return code, _status(code, message)
        if (match := _SLICE.match(path)) and method == "PATCH":
            return self._apply(match["name"], query, body)
        if (match := _SLICE.match(path)) and method == "DELETE":
            removed = self.slices.pop(match["name"], None)
            return (200, removed) if removed else (404, _status(404, "not found"))
        if path == SLICES and method == "GET":
            return 200, self._list(query)
        if (match := _NODE.match(path)) and method == "GET":
            node = self.nodes.get(match["name"])
            return (
                (200, node) if node else (404, _status(404, f'nodes "{match["name"]}" not found'))
            )
        if (match := _CLAIM.match(path)) and method == "GET":
            claim = self.claims.get((match["ns"], match["name"]))
            if claim is None:
                return 404, _status(
                    404, f'resourceclaims.resource.k8s.io "{match["name"]}" not found'
                )
            return 200, claim
        return 404, _status(404, f"the server could not find the requested resource ({path})")

    def _apply(self, name: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        if not query.get("fieldManager"):
            return 422, _status(422, "fieldManager is required for apply requests")
        if body.get("metadata", {}).get("name") != name:
            return 400, _status(400, "the name of the object does not match the name in the URL")
        old = self.slices.get(name)
        self._version += 1
        stored = json.loads(json.dumps(body))
        metadata = stored.setdefault("metadata", {})
        metadata["uid"] = (old or {}).get("metadata", {}).get("uid") or str(uuid.uuid4())
        metadata["resourceVersion"] = str(self._version)
        self.slices[name] = stored
        return (200 if old else 201), stored

    def _list(self, query: dict[str, list[str]]) -> dict[str, Any]:
        wanted: dict[str, str] = {}
        for term in ",".join(query.get("fieldSelector", [])).split(","):
            if term:
                key, _, value = term.partition("=")
                wanted[key] = value
        fields = {"spec.nodeName": ("nodeName",), "spec.driver": ("driver",)}
        items = [
            s
            for s in self.slices.values()
            if all(s["spec"].get(fields[k][0]) == v for k, v in wanted.items())
        ]
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSliceList",
            "metadata": {"resourceVersion": str(self._version)},
            "items": items,
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes: with Nagle's algorithm on, each answer
            # would wait for the client's delayed ACK (~40 ms), which no API server makes.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                query = parse_qs(url.query)
                with api._lock:
                    api.requests.append(
                        Request(self.command, url.path, query, body, time.monotonic())
                    )
                    token = self.headers.get("Authorization", "")
                    try:
                        code, answer = api._answer(self.command, url.path, query, body, token)
                    except Exception as exc:  # a stand-in bug shows as a 500, not a hang
                        code, answer = 500, _status(500, f"stand-in failed: {exc!r}")
                    api._lock.notify_all()
                data = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PATCH = do_DELETE = do_POST = do_PUT = _serve

        return Handler


def _status(code: int, message: str) -> dict[str, Any]:
    reasons = {
        401: "Unauthorized",
        404: "NotFound",
        409: "Conflict",
        422: "Invalid",
        403: "Forbidden",
    }
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "message": message,
        "reason": reasons.get(code, "InternalError"),
        "code": code,
    }
