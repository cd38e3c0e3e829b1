"""Node feature labels describe each published machine in the shared vocabulary."""

from __future__ import annotations

from devicehost_ascend.driver import AscendDriver
from devicehost_ascend.labels import read_version

from devicehost.testing import FakeRoot


def labels_of(fake_root: FakeRoot, node: str) -> dict[str, str]:
    driver = AscendDriver()
    driver.devicehost_simulate(root=fake_root.path, config={}, node=node)
    driver.devicehost_configure(config={}, root=fake_root.path, simulated=True)
    return dict(driver.devicehost_labels())


def test_atlas_800t_a2_is_labelled_as_eight_910b_in_a_mesh(fake_root: FakeRoot) -> None:
    """Chip type, product and memory from DCMI, versions from the version.info files."""
    assert labels_of(fake_root, "atlas-800t-a2") == {
        "present": "true",
        "count": "8",
        "family": "Ascend910",
        "chip-type": "Ascend910B",
        "product": "Ascend910B3",
        "memory-mib": "65536",
        "vnpu-count": "0",
        "hccs": "mesh",
        "driver-version": "24.1.rc2",
        "firmware-version": "7.5.0.1.129",
    }


def test_atlas_800_9000_has_rings_and_the_inference_server_none(fake_root: FakeRoot) -> None:
    """The training server says ring-4; the 310P server has no hccs label at all."""
    assert labels_of(FakeRoot(fake_root.path / "a"), "atlas-800-9000")["hccs"] == "ring-4"
    inference = labels_of(FakeRoot(fake_root.path / "b"), "atlas-800-3000")
    assert (inference["chip-type"], inference["memory-mib"], "hccs" in inference) == (
        "Ascend310P",
        "49152",
        False,
    )


def test_label_values_are_cleaned_and_missing_files_give_nothing(fake_root: FakeRoot) -> None:
    """A version with characters labels do not allow is cleaned; no file, no value."""
    fake_root.write("/v.info", "Package=driver\nVersion=24.1 RC2+b\n")
    assert read_version(fake_root.path, "/v.info") == "24.1-RC2-b"
    assert read_version(fake_root.path, "/missing.info") == ""
