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
        "family": "910B",
        "chip-type": "Ascend910B",
        "product": "Ascend910B3",
        "memory-mib": "65536",
        "vnpu-count": "0",
        "interconnect": "hccs-mesh",
        "driver-version": "24.1.rc2",
        "firmware-version": "7.5.0.1.129",
    }


def test_atlas_800_9000_has_rings_and_the_inference_server_none(fake_root: FakeRoot) -> None:
    """The training server says hccs-ring-4; the 310P server has no interconnect label."""
    training = labels_of(FakeRoot(fake_root.path / "a"), "atlas-800-9000")
    assert (training["family"], training["interconnect"]) == ("910A", "hccs-ring-4")
    inference = labels_of(FakeRoot(fake_root.path / "b"), "atlas-800-3000")
    assert (
        inference["family"],
        inference["chip-type"],
        inference["memory-mib"],
        "interconnect" in inference,
    ) == ("310P", "Ascend310P", "49152", False)


def test_family_tells_a_910b_node_apart_as_profiles_match_it(fake_root: FakeRoot) -> None:
    """A profile matching ascend.family 910B (docs/configuration.md, the fleet overlay)
    matches the Atlas 800T A2 and not the 910 server; before, both said Ascend910."""
    profile = {"ascend.family": "910B"}
    for node, matches in (("atlas-800t-a2", True), ("atlas-800-9000", False)):
        labels = labels_of(FakeRoot(fake_root.path / node), node)
        facts = {f"ascend.{key}": value for key, value in labels.items()}
        assert (profile.items() <= facts.items()) is matches, node


def test_without_dcmi_the_family_is_the_configured_chip_types(fake_root: FakeRoot) -> None:
    """useDcmi false: no chip names, so family is fallbackChipType's generation, 910."""
    driver = AscendDriver()
    driver.devicehost_simulate(root=fake_root.path, config={}, node="atlas-800t-a2")
    config = {"useDcmi": False, "fallbackChipType": "Ascend910"}
    driver.devicehost_configure(config=config, root=fake_root.path, simulated=True)
    labels = driver.devicehost_labels()
    assert (labels["family"], "chip-type" in labels) == ("910", False)


def test_label_values_are_cleaned_and_missing_files_give_nothing(fake_root: FakeRoot) -> None:
    """A version with characters labels do not allow is cleaned; no file, no value."""
    fake_root.write("/v.info", "Package=driver\nVersion=24.1 RC2+b\n")
    assert read_version(fake_root.path, "/v.info") == "24.1-RC2-b"
    assert read_version(fake_root.path, "/missing.info") == ""
