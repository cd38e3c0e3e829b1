"""A driver pip-installed into the image serves on the real cluster: the mission's way of
adding a vendor (deploy/examples/extra-driver, docs/operating.md "Add a driver").

e2e/images.sh builds devicehost-acme:0.1.0 as that example's Dockerfile does, without
Docker (e2e/extra-driver.sh): the wheel of `devicehost new-driver acme`, a distribution
built outside this workspace, pip-installed into the devicehost image against its
constraints.txt, then `devicehost drivers`. The module points the DaemonSet at it with a
kustomize `images:` entry (e2e/manifests-extra-driver), runs its scenario, and switches back.
The two refusals run the same recipe on drivers an image build must not ship.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.cluster import Cluster, wait_for
from harness.pods import allocatable, create_pod, environment, exec_in, pod_manifest, wait_running
from test_allocation import char_devices

from conftest import E2E, OVERLAY, devicehost_pods, rollout

# DEVICEHOST_E2E_EXTRA_OVERLAY installs another one instead: how the scenario was seen
# failing against a deliberately broken manifest (docs/e2e.md).
EXTRA_OVERLAY = Path(
    os.environ.get("DEVICEHOST_E2E_EXTRA_OVERLAY") or E2E / "manifests-extra-driver"
)
IMAGES = Path(os.environ.get("DEVICEHOST_E2E_IMAGES", ""))
WIDGET = "acme.example.com/widget"
RECIPE = E2E / "extra-driver.sh"


def built_image_id(image_tar: Path) -> str:
    """The image ID (its config's digest) of the one image in an OCI layout tar, as
    images.sh packed it: what the kubelet reports as a container's imageID."""
    with tarfile.open(image_tar) as tar:

        def blob(name: str) -> dict:
            member = tar.extractfile(f"./{name}")
            assert member is not None, name
            return json.load(member)

        (manifest,) = blob("index.json")["manifests"]
        algorithm, digest = manifest["digest"].split(":")
        return str(blob(f"blobs/{algorithm}/{digest}")["config"]["digest"])


@pytest.fixture(scope="module")
def extra(installed: Cluster) -> Iterator[Cluster]:
    rollout(installed, EXTRA_OVERLAY)
    yield installed
    rollout(installed, OVERLAY)


@pytest.mark.nodes("dgx")
def test_a_pip_installed_driver_serves_beside_the_bundled_ones(extra: Cluster, ns: str) -> None:
    """On the DGX node the acme driver's two simulated widgets are allocatable beside the
    GPUs; a pod asking for one runs with the env and the character device the driver
    declares; `devicehost drivers` in the devicehost pod lists acme with its version; and
    the image that ran is the one images.sh built."""
    wait_for(lambda: allocatable(extra, "dgx").get(WIDGET) == "2", 120, "acme widgets on DGX")
    assert int(allocatable(extra, "dgx").get("nvidia.com/gpu", "0")) == 8
    create_pod(extra, ns, pod_manifest("widget", {WIDGET: "1"}))
    wait_running(extra, ns, "widget")
    (widget,) = environment(extra, ns, "widget")["WIDGET_VISIBLE_DEVICES"].split(",")
    assert char_devices(extra, ns, "widget", "/dev/widget*") == [f"/dev/{widget}"]
    host = devicehost_pods(extra)["dgx"]
    name = host["metadata"]["name"]
    rows = {
        r["name"]: r
        for r in json.loads(exec_in(extra, "devicehost", name, "devicehost drivers --json"))
    }
    assert (rows["acme"]["status"], rows["acme"]["distribution"], rows["acme"]["version"]) == (
        "active",
        "devicehost-acme",
        "0.1.0",
    )
    assert rows["nvidia"]["status"] == "active"
    (status,) = host["status"]["containerStatuses"]
    assert status["image"] == "docker.io/library/devicehost-acme:0.1.0", status
    assert status["imageID"] == built_image_id(IMAGES / "devicehost-acme.tar"), status


def build(driver: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    (wheel,) = (IMAGES / "extra-drivers" / driver).glob("*.whl")
    return subprocess.run(
        [str(RECIPE), str(IMAGES / "devicehost.tar"), str(wheel), str(tmp_path / "out.tar")],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_driver_pinning_another_protobuf_fails_the_build_naming_it(tmp_path: Path) -> None:
    """pinned needs protobuf 3.20.3; the image's constraints.txt pins its own: pip refuses
    to resolve, naming both, and no image is written."""
    result = build("pinned", tmp_path)
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "ResolutionImpossible" in out, out
    assert "devicehost-pinned 0.1.0 depends on protobuf==3.20.3" in out, out
    assert "The user requested (constraint) protobuf==" in out, out
    assert not (tmp_path / "out.tar").exists()


def test_a_driver_that_fails_to_import_fails_the_build_naming_it(tmp_path: Path) -> None:
    """broken installs, but was written for a devicehost with a name this one lacks
    (`from devicehost import ResourceSlice`): `devicehost drivers` shows the import error
    and exits 1, so the build fails."""
    result = build("broken", tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "cannot import name 'ResourceSlice' from 'devicehost'" in result.stdout, result.stdout
    assert "devicehost drivers: 1 driver could not be started: broken" in result.stderr
    assert not (tmp_path / "out.tar").exists()
