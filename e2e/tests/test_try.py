"""The quickstart, on the tier: deploy/overlays/try applied (e2e/manifests-try fits it to
one tier node) and the pod steps of docs/operating.md's "From nothing to a trace" run as
written there, their pods read from the page itself, with the tier's busybox for the
quickstart's. The module switches the install to the overlay and back.
"""

from __future__ import annotations

import json
import os
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from harness.cluster import Cluster, wait_for
from harness.pods import TEST_IMAGE, create_pod, device_resources, pod

from conftest import E2E, OVERLAY, REPO, rollout, wait_devicehost_ready

# DEVICEHOST_E2E_TRY_OVERLAY installs another one instead: how the scenario was seen
# failing (docs/e2e.md).
TRY_OVERLAY = Path(os.environ.get("DEVICEHOST_E2E_TRY_OVERLAY") or E2E / "manifests-try")
WALKTHROUGH = REPO / "docs" / "operating.md"
QUICKSTART_IMAGE = "busybox:1.37"


def walkthrough_pods() -> dict[str, dict]:
    """The pods the walk-through applies (``kubectl apply -f - <<'EOF'`` blocks), by name."""
    text = WALKTHROUGH.read_text()
    section = text[text.index("### From nothing to a trace") :]
    section = section[: section.index("\n## ", 1)]
    blocks = re.findall(r"kubectl apply -f - <<'EOF'\n(.*?)\n\s*EOF\n", section, re.DOTALL)
    pods = [yaml.safe_load(textwrap.dedent(block)) for block in blocks]
    return {p["metadata"]["name"]: p for p in pods}


@pytest.fixture(scope="module")
def tried(installed: Cluster) -> Iterator[Cluster]:
    installed.kubectl("apply", "-k", str(TRY_OVERLAY))
    installed.kubectl(
        "-n", "devicehost", "rollout", "status", "daemonset/devicehost", "--timeout=300s"
    )
    wait_devicehost_ready(installed, ["dgx"])
    yield installed
    rollout(installed, OVERLAY)


def finished(cluster: Cluster, ns: str, name: str) -> str:
    phase: str = pod(cluster, ns, name)["status"].get("phase", "")
    return phase if phase in ("Succeeded", "Failed") else ""


def run_step(cluster: Cluster, ns: str, manifest: dict) -> str:
    """Apply one of the walk-through's pods with the tier's busybox; its log once done."""
    (container,) = manifest["spec"]["containers"]
    assert container["image"] == QUICKSTART_IMAGE, container
    container["image"] = TEST_IMAGE
    container["imagePullPolicy"] = "Never"
    name = manifest["metadata"]["name"]
    create_pod(cluster, ns, manifest)
    try:
        phase = wait_for(lambda: finished(cluster, ns, name), 120, f"{name} to finish")
    except TimeoutError as exc:
        statuses = pod(cluster, ns, name)["status"].get("containerStatuses", [])
        raise AssertionError(f"{exc}: {json.dumps(statuses)[:1500]}") from None
    log = cluster.kubectl("-n", ns, "logs", name).stdout
    assert phase == "Succeeded", log
    return log


@pytest.mark.nodes("dgx")
def test_the_quickstart_s_steps_run_as_written_on_a_tier_node(tried: Cluster, ns: str) -> None:
    """Step 2: the node advertises 8 GPUs, 8 HCAs and 100 shared HCA slots. Step 3: the GPU
    pod prints the GPU it got. Step 4: the RDMA pod lists rdma_cm and one uverbs node,
    character devices."""
    wanted = {"nvidia.com/gpu": "8", "rdma/hca": "8", "rdma/hca_shared": "100"}
    wait_for(
        lambda: all(device_resources(tried, "dgx").get(k) == v for k, v in wanted.items()),
        120,
        f"the node advertising {wanted}",
    )
    pods = walkthrough_pods()
    assert set(pods) == {"devicehost-trace-check", "devicehost-rdma-check"}, set(pods)
    gpu = run_step(tried, ns, pods["devicehost-trace-check"])
    assert re.fullmatch(r"GPU-[0-9a-f-]{36}\n", gpu), gpu
    listing = run_step(tried, ns, pods["devicehost-rdma-check"]).splitlines()
    devices = [line for line in listing if line.startswith("c")]
    assert any(line.endswith(" rdma_cm") for line in devices), listing
    assert len([line for line in devices if re.search(r" uverbs\d+$", line)]) == 1, listing
