"""Per-container numbered env (issue: a second stranger's driver, item 4): a resource
declares ``indexed_envs``, each device sets the variable once, and the container gets
``NAME0``, ``NAME1``, … in the order it asked for its devices, composed by the host with
no driver call — Intel QAT's ``QAT0…QAT<n-1>`` contract without an ``allocate`` hook."""

from __future__ import annotations

import json

import grpc
import pytest

from devicehost import ContainerEdits, Device, ResourceSpec
from devicehost.drivers.validation import Invalid, spec_from_plain
from devicehost.edits.cdi import spec_document
from devicehost.edits.compose import CompositionClash, compose
from testdrivers.indexed import RESOURCE, address

QAT = ResourceSpec(name="example.com/qat", indexed_envs=("QAT",))
VFS = {
    f"vf-{n}": Device(id=f"vf-{n}", edits=ContainerEdits(envs={"QAT": address(n)}))
    for n in range(4)
}


def test_each_device_gets_the_next_number_in_request_order():
    """Asked for vf-2 then vf-0, the container gets QAT0 = vf-2's value, QAT1 = vf-0's,
    and no bare QAT."""
    edits = compose(QAT, VFS, ["vf-2", "vf-0"])
    assert edits.envs == {"QAT0": address(2), "QAT1": address(0)}


def test_numbers_count_only_the_devices_that_set_the_variable():
    """A device without the variable takes no number: the numbers stay contiguous."""
    devices = {**VFS, "plain": Device(id="plain")}
    assert compose(QAT, devices, ["vf-1", "plain", "vf-3"]).envs == {
        "QAT0": address(1),
        "QAT1": address(3),
    }


def test_an_allocate_answer_agrees_with_a_numbered_variable_or_clashes():
    """The driver's allocate answer merges like a device's edits: the same numbered
    variable with the same value is fine, another value is a clash naming both."""
    same = ContainerEdits(envs={"QAT0": address(1)})
    assert compose(QAT, VFS, ["vf-1"], same).envs == {"QAT0": address(1)}
    with pytest.raises(CompositionClash, match="'QAT0' is declared twice"):
        compose(QAT, VFS, ["vf-1"], ContainerEdits(envs={"QAT0": "other"}))


def test_an_allocate_answer_cannot_set_the_indexed_name_itself():
    """Only devices contribute to an indexed variable: an allocate answer setting bare QAT
    (which no container would get) is a clash saying so."""
    with pytest.raises(CompositionClash, match="'QAT' is indexed"):
        compose(QAT, VFS, ["vf-1"], ContainerEdits(envs={"QAT": "x"}))


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"joined_envs": ["QAT"]}, "both joined and indexed"),
        ({"edits": {"envs": {"QAT": "x"}}}, "its own edits set the indexed env 'QAT'"),
        ({"indexed_envs": "QAT"}, "indexed_envs is str, expected a list"),
    ],
)
def test_a_resource_declaring_an_impossible_indexed_env_is_refused(tmp_path, fields, problem):
    data = {"name": "example.com/qat", "indexed_envs": ["QAT"], **fields}
    with pytest.raises(Invalid, match=problem):
        spec_from_plain(data, tmp_path)


def test_the_cdi_spec_leaves_the_indexed_variable_to_the_allocate_answer():
    """A numbered variable depends on the container's request, so no per-device CDI entry
    can hold it: the spec leaves it out (the answer carries QAT0…)."""
    spec = spec_document(QAT, VFS.values())
    assert spec is not None
    assert "QAT" not in json.dumps(spec)


def test_a_running_host_answers_the_kubelet_with_numbered_variables(install, run_host, kubelet):
    """Through the kubelet stand-in: two containers, each numbered from 0 in its own
    request order, with the VFIO nodes the devices declare."""
    install("devicehost-qat", drivers={"qat": "testdrivers.indexed:Qat"})
    run_host(enabled_drivers=("qat",))
    kubelet.wait_devices(RESOURCE, lambda d: len(d) == 4)
    first, second = kubelet.allocate(RESOURCE, [["vf-3", "vf-1"], ["vf-0"]])
    assert first.envs == {"QAT0": address(3), "QAT1": address(1)}
    assert second.envs == {"QAT0": address(0)}
    assert {d.host_path for d in first.devices} == {
        "/dev/vfio/vfio",
        "/dev/vfio/103",
        "/dev/vfio/101",
    }


def test_cdi_mode_answers_the_numbered_variables_beside_the_cdi_names(
    install, run_host, kubelet, tmp_path
):
    install("devicehost-qat", drivers={"qat": "testdrivers.indexed:Qat"})
    run_host(enabled_drivers=("qat",), cdi_enabled=True, cdi_dir=tmp_path / "cdi")
    kubelet.wait_devices(RESOURCE, lambda d: len(d) == 4)
    (answer,) = kubelet.allocate(RESOURCE, [["vf-2", "vf-0"]])
    assert answer.envs == {"QAT0": address(2), "QAT1": address(0)}
    assert not answer.devices and len(answer.cdi_devices) == 2


def test_a_clashing_allocate_answer_refuses_the_allocate(install, run_host, kubelet):
    """An allocate answer contradicting a numbered variable refuses the Allocate."""
    install("devicehost-qat", drivers={"qat": "testdrivers.indexed:AllocatingQat"})
    run_host(enabled_drivers=("qat",), drivers={"qat": {"extraEnv": {"QAT0": "elsewhere"}}})
    kubelet.wait_devices(RESOURCE, lambda d: len(d) == 4)
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(RESOURCE, [["vf-1"]])
    assert "'QAT0' is declared twice" in str(refused.value.details())
