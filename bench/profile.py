"""Where Allocate's time goes: `python -m bench.profile` runs `devicehost run --simulate`
under pyinstrument while the bench client sends Allocates, with tracing on (spans exported
to a real OTLP receiver in this process; ``--no-tracing`` for off), and writes the host's
profile to bench/results/profile-allocate.txt (driver workers and the span exporter are
processes of their own and are not sampled).
"""

from __future__ import annotations

import argparse
import sys

from bench.harness import (
    RESULTS,
    Workspace,
    allocate_latencies,
    healthy_device,
    running,
    socket_of,
    summary,
    wait_resources,
)
from devicehost.testing import KubeletStandIn, OtlpReceiver


def main(calls: int = 3000, tracing: bool = True) -> None:
    ws = Workspace()
    receiver = OtlpReceiver().start() if tracing else None
    extra = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint} if receiver else {}
    output = RESULTS / "profile-allocate.txt"
    plugin_dir = ws.plugin_dir("profile")
    command = [
        sys.executable,
        "-m",
        "pyinstrument",
        "-o",
        str(output),
        "-r",
        "text",
        "-m",
        "devicehost.cli",
        "run",
        "--plugin-dir",
        str(plugin_dir),
        "--simulate",
        "--drivers",
        "nvidia",
        "--metrics-address",
        "",
        "--pod-resources-socket",
        "",
    ]
    try:
        with KubeletStandIn(plugin_dir, start=True) as kubelet, running(command, ws.env(**extra)):
            resource = wait_resources(kubelet, 1)[0]
            ids = [healthy_device(kubelet, resource)]
            print(summary(allocate_latencies(socket_of(kubelet, resource), ids, calls)))
    finally:
        ws.close()
        if receiver is not None:
            receiver.stop()
    # The temporary plugin directory means nothing to a reader: name it by its role.
    output.write_text(output.read_text().replace(str(plugin_dir), "<plugin-dir>"))
    print(f"profile written to {output}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--no-tracing", action="store_true", help="profile with tracing off")
    args = parser.parse_args()
    main(args.calls, tracing=not args.no_tracing)
