"""``devicehost trace POD``: one pod's start, read from Jaeger, as a waterfall.

Jaeger's query API finds spans by tag. The kubelet (KubeletTracing) and devicehost both
tag a pod's spans with its UID (``k8s.pod.uid``), so a pod given by name is first looked
up among devicehost's spans by ``k8s.pod.name`` and ``k8s.namespace.name`` for its UID;
then every service's spans with that UID are read and drawn together.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

# The UID, name and namespace keys (devicehost.telemetry.tracing's POD_UID, POD_NAME,
# NAMESPACE): spelt here so that building the CLI's parser imports nothing for this command.
POD_UID, POD_NAME, NAMESPACE = "k8s.pod.uid", "k8s.pod.name", "k8s.namespace.name"

#: Where ``kubectl -n devicehost port-forward svc/jaeger 16686`` makes Jaeger's query API.
DEFAULT_JAEGER = "http://localhost:16686"
JAEGER_ENV = "DEVICEHOST_JAEGER_QUERY"
SERVICES = ("kubelet", "containerd", "devicehost")
_UID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
#: An answer of the query API larger than this is refused (a pod's start is a few dozen
#: spans, tens of kB; ``limit`` bounds the traces, not their size).
MAX_ANSWER = 16 * 1024 * 1024


class TraceError(Exception):
    """What went wrong, said for the person who ran the command."""


def add_parser(commands: Any) -> argparse.ArgumentParser:
    help = "show one pod's start from Jaeger: the kubelet's, the runtime's and our spans"
    parser: argparse.ArgumentParser = commands.add_parser(
        "trace",
        help=help,
        description=help + ", as a waterfall in time order (found by the pod's UID).",
        epilog="example: kubectl -n devicehost port-forward svc/jaeger 16686 & "
        "devicehost trace my-pod -n team-a",
    )
    parser.add_argument("pod", help="the pod's name (or its UID)")
    parser.add_argument("-n", "--namespace", default="default", help="its namespace")
    parser.add_argument(
        "--jaeger",
        metavar="URL",
        default=os.environ.get(JAEGER_ENV) or DEFAULT_JAEGER,
        help=f"Jaeger's query endpoint (env {JAEGER_ENV}, default {DEFAULT_JAEGER})",
    )
    parser.add_argument(
        "--service",
        action="append",
        dest="services",
        metavar="NAME",
        help=f"services to read (repeatable; default: {', '.join(SERVICES)})",
    )
    parser.add_argument(
        "--lookback", default="1h", help="how far back Jaeger searches (default: 1h)"
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print the spans as JSON")
    output.add_argument(
        "--png",
        type=Path,
        metavar="FILE",
        help="also draw the waterfall into FILE (needs "
        "matplotlib: pip install 'devicehost[trace]')",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    from devicehost.telemetry import waterfall

    try:
        uid = args.pod if _UID.match(args.pod) else _uid_of(args)
        spans = waterfall.spans_of(
            trace
            for service in args.services or SERVICES
            for trace in _traces(args, service, {POD_UID: uid})
        )
        if not spans:
            raise TraceError(
                f"Jaeger at {args.jaeger} holds no span with {POD_UID}={uid} in the last "
                f"{args.lookback} (services: {', '.join(args.services or SERVICES)})"
            )
        title = f"pod {args.namespace}/{args.pod}" + ("" if args.pod == uid else f" ({uid})")
        if args.json:
            print(json.dumps({"pod": args.pod, "uid": uid, "spans": waterfall.as_json(spans)}))
            return 0
        print(waterfall.as_text(spans, title))
        if args.png:
            try:
                waterfall.as_png(spans, title, args.png)
            except ImportError as exc:
                raise TraceError(
                    f"--png needs matplotlib ({exc}): pip install 'devicehost[trace]'"
                ) from exc
            print(f"wrote {args.png}")
        return 0
    except TraceError as exc:
        print(f"devicehost trace: {exc}", file=sys.stderr)
        return 1


def _uid_of(args: argparse.Namespace) -> str:
    """The pod's UID, from devicehost's spans that name the pod."""
    tags = {POD_NAME: args.pod, NAMESPACE: args.namespace}
    for trace in _traces(args, "devicehost", tags):
        for span in trace.get("spans") or ():
            for tag in span.get("tags") or ():
                if tag.get("key") == POD_UID and tag.get("value"):
                    return str(tag["value"])
    raise TraceError(
        f"no devicehost span in Jaeger at {args.jaeger} names pod {args.namespace}/{args.pod} "
        f"with its UID in the last {args.lookback}; give the UID instead: kubectl -n "
        f"{args.namespace} get pod {args.pod} -o jsonpath='{{.metadata.uid}}'"
    )


def _traces(args: argparse.Namespace, service: str, tags: dict[str, str]) -> list[Any]:
    """Jaeger's traces of ``service`` whose spans carry ``tags``; none for a service Jaeger
    has never seen."""
    import urllib.error  # here: every other command (the daemon's start) goes without
    import urllib.parse
    import urllib.request

    query = urllib.parse.urlencode(
        {"service": service, "tags": json.dumps(tags), "lookback": args.lookback, "limit": 20}
    )
    url = f"{args.jaeger.rstrip('/')}/api/traces?{query}"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = answer.read(MAX_ANSWER + 1)
    except urllib.error.HTTPError as exc:
        if exc.code in (400, 404) and service != "devicehost":
            return []  # a service that never sent a span here
        raise TraceError(f"Jaeger at {args.jaeger} answered {exc.code} for {service}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TraceError(
            f"cannot reach Jaeger's query API at {args.jaeger}: {reason} (port-forward it: "
            "kubectl -n devicehost port-forward svc/jaeger 16686)"
        ) from exc
    if len(body) > MAX_ANSWER:
        raise TraceError(f"Jaeger's answer for {service} is over {MAX_ANSWER} bytes")
    try:
        data = json.loads(body).get("data")
    except (ValueError, AttributeError) as exc:
        raise TraceError(f"what answers at {args.jaeger} is not Jaeger's query API") from exc
    return list(data or [])
