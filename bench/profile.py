"""Where Allocate's time goes: `python -m bench.profile` runs `devicehost run --simulate`
under pyinstrument while the bench client sends Allocates, and writes the event loop's
profile to bench/results/profile-allocate.txt (driver worker threads are not sampled).
"""

from __future__ import annotations

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
from devicehost.testing import KubeletStandIn


def main(calls: int = 3000) -> None:
    ws = Workspace()
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
        with KubeletStandIn(plugin_dir, start=True) as kubelet, running(command, ws.env()):
            resource = wait_resources(kubelet, 1)[0]
            ids = [healthy_device(kubelet, resource)]
            print(summary(allocate_latencies(socket_of(kubelet, resource), ids, calls)))
    finally:
        ws.close()
    # The temporary plugin directory means nothing to a reader: name it by its role.
    output.write_text(output.read_text().replace(str(plugin_dir), "<plugin-dir>"))
    print(f"profile written to {output}")


if __name__ == "__main__":
    main()
