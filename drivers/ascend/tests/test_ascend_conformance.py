"""The driver passes devicehost's conformance battery on simulated and real-layout nodes."""

from __future__ import annotations

from devicehost.testing import FakeRoot, check_driver


def test_conformance_on_the_default_simulated_node(fake_root: FakeRoot) -> None:
    """The default simulated node: 8 healthy Ascend 910 chips, each allocatable alone."""
    report = check_driver("ascend", fake_root, simulated=True)
    assert report.devices == {"huawei.com/Ascend910": 8}
    assert report.healthy == {"huawei.com/Ascend910": 8}


def test_conformance_with_vnpus_and_plain_runtime(fake_root: FakeRoot) -> None:
    """vNPU resources, handed over as device nodes and mounts, pass the battery too."""
    report = check_driver(
        "ascend",
        fake_root,
        simulated=True,
        config={"simulatedNode": "ascend910x8-vnpu", "useAscendRuntime": False},
    )
    assert report.devices == {
        "huawei.com/Ascend910": 6,
        "huawei.com/Ascend910-4c": 4,
        "huawei.com/Ascend910-8c": 2,
    }


def test_conformance_on_a_mixed_node_in_plain_runtime(fake_root: FakeRoot) -> None:
    """A mixed 910 + 310P node handed over as nodes and mounts passes the battery."""
    report = check_driver(
        "ascend",
        fake_root,
        simulated=True,
        config={
            "simulatedNode": "mixed",
            "useAscendRuntime": False,
        },
    )
    assert report.devices == {"huawei.com/Ascend910": 4, "huawei.com/Ascend310P": 4}


def test_conformance_on_a_real_layout_tree_without_dcmi(fake_root: FakeRoot) -> None:
    """A real node's /dev layout without DCMI (the fallback) passes the battery."""
    for index in range(8):
        fake_root.char_device(f"/dev/davinci{index}")
    for shared in ("davinci_manager", "devmm_svm", "hisi_hdc"):
        fake_root.char_device(f"/dev/{shared}")
    report = check_driver(
        "ascend",
        fake_root,
        config={"fallbackChipType": "Ascend910", "fallbackNumaNodes": {0: "0-3", 1: "4-7"}},
    )
    assert report.healthy == {"huawei.com/Ascend910": 8}


def test_conformance_on_each_published_machine(fake_root: FakeRoot) -> None:
    """Each published Ascend machine passes the battery with its chips all Healthy."""
    for node, resource in (
        ("atlas-800-9000", "huawei.com/Ascend910"),
        ("atlas-800t-a2", "huawei.com/Ascend910"),
        ("atlas-800-3000", "huawei.com/Ascend310P"),
    ):
        root = FakeRoot(fake_root.path / node)
        report = check_driver("ascend", root, simulated=True, node=node)
        assert report.healthy == {resource: 8}, node
