"""The generated protobuf modules are current, and the wire format is the kubelet's."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devicehost._proto.deviceplugin.v1beta1 import api_pb2 as dp
from devicehost._proto.dra.v1 import api_pb2 as dra
from devicehost._proto.dra.v1beta1 import api_pb2 as dra_beta
from devicehost._proto.dra_health.v1 import api_pb2 as health
from devicehost._proto.dra_health.v1alpha1 import api_pb2 as health_alpha
from devicehost._proto.pluginregistration.v1 import api_pb2 as reg
from devicehost._proto.podresources.v1 import api_pb2 as pr

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "host" / "devicehost" / "_proto"


def test_committed_modules_match_a_fresh_generation(tmp_path):
    """`make proto` output equals what is committed; regenerate after editing proto/."""
    out = tmp_path / "_proto"
    generated = subprocess.run(
        [sys.executable, str(ROOT / "proto" / "generate.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": "/usr/bin:/bin"},  # as a plain `pytest` run sees it
    )
    assert generated.returncode == 0, f"proto/generate.py failed:\n{generated.stderr}"
    fresh = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    committed = sorted(
        p.relative_to(COMMITTED)
        for p in COMMITTED.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    assert fresh == committed
    stale = [str(p) for p in fresh if not filecmp.cmp(out / p, COMMITTED / p, shallow=False)]
    assert stale == [], f"stale generated files, run `make proto`: {stale}"


@pytest.mark.parametrize(
    ("service", "methods"),
    [
        (dp.DESCRIPTOR.services_by_name["Registration"], ["Register"]),
        (
            dp.DESCRIPTOR.services_by_name["DevicePlugin"],
            [
                "GetDevicePluginOptions",
                "ListAndWatch",
                "GetPreferredAllocation",
                "Allocate",
                "PreStartContainer",
            ],
        ),
        (
            pr.DESCRIPTOR.services_by_name["PodResourcesLister"],
            ["List", "GetAllocatableResources", "Get"],
        ),
        (
            reg.DESCRIPTOR.services_by_name["Registration"],
            ["GetInfo", "NotifyRegistrationStatus"],
        ),
        (
            dra.DESCRIPTOR.services_by_name["DRAPlugin"],
            ["NodePrepareResources", "NodeUnprepareResources"],
        ),
        (
            dra_beta.DESCRIPTOR.services_by_name["DRAPlugin"],
            ["NodePrepareResources", "NodeUnprepareResources"],
        ),
        (health.DESCRIPTOR.services_by_name["DRAResourceHealth"], ["NodeWatchResources"]),
        (health_alpha.DESCRIPTOR.services_by_name["DRAResourceHealth"], ["NodeWatchResources"]),
    ],
)
def test_service_paths_match_the_kubelet(service, methods):
    """Package and service names give the kubelet's method paths (e.g. /v1beta1.Registration)."""
    assert service.full_name in (
        "v1beta1.Registration",
        "v1beta1.DevicePlugin",
        "v1.PodResourcesLister",
        "pluginregistration.Registration",
        "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
        "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin",
        "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth",
    )
    assert [m.name for m in service.methods] == methods


FIELDS = {
    dp.RegisterRequest: {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4},
    dp.DevicePluginOptions: {"pre_start_required": 1, "get_preferred_allocation_available": 2},
    dp.Device: {"ID": 1, "health": 2, "topology": 3},
    dp.ContainerPreferredAllocationRequest: {
        "available_deviceIDs": 1,
        "must_include_deviceIDs": 2,
        "allocation_size": 3,
    },
    dp.ContainerAllocateResponse: {
        "envs": 1,
        "mounts": 2,
        "devices": 3,
        "annotations": 4,
        "cdi_devices": 5,
    },
    dp.Mount: {"container_path": 1, "host_path": 2, "read_only": 3},
    dp.DeviceSpec: {"container_path": 1, "host_path": 2, "permissions": 3},
    dp.PreStartContainerRequest: {"devices_ids": 1},
    pr.PodResources: {"name": 1, "namespace": 2, "containers": 3},
    pr.ContainerResources: {
        "name": 1,
        "devices": 2,
        "cpu_ids": 3,
        "memory": 4,
        "dynamic_resources": 5,
    },
    pr.ContainerDevices: {"resource_name": 1, "device_ids": 2, "topology": 3},
    pr.GetPodResourcesRequest: {"pod_name": 1, "pod_namespace": 2},
    reg.PluginInfo: {"type": 1, "name": 2, "endpoint": 3, "supported_versions": 4},
    reg.RegistrationStatus: {"plugin_registered": 1, "error": 2},
    dra.Claim: {"namespace": 1, "uid": 2, "name": 3},
    dra.NodePrepareResourceResponse: {"devices": 1, "error": 2},
    dra.Device: {
        "request_names": 1,
        "pool_name": 2,
        "device_name": 3,
        "cdi_device_ids": 4,
        "share_id": 5,
    },
    dra.NodeUnprepareResourceResponse: {"error": 1},
    health.DeviceHealth: {
        "device": 1,
        "health": 2,
        "last_updated_time": 3,
        "health_check_timeout_seconds": 4,
        "message": 5,
    },
}


@pytest.mark.parametrize("message", list(FIELDS), ids=lambda m: m.DESCRIPTOR.full_name)
def test_field_names_and_numbers_are_the_wire_format(message):
    """Each message's field names and numbers match the published API."""
    assert {f.name: f.number for f in message.DESCRIPTOR.fields} == FIELDS[message]


def test_the_alpha_health_messages_are_the_v1_messages_under_another_package():
    """What lets a v1 health answer be re-read as the v1alpha1 one: every message and enum
    has the same names and numbers in both."""

    def shape(file):
        messages = {
            name: {(f.name, f.number, f.type) for f in m.fields}
            for name, m in file.message_types_by_name.items()
        }
        enums = {
            name: {(v.name, v.number) for v in e.values}
            for name, e in file.enum_types_by_name.items()
        }
        return messages, enums

    assert shape(health_alpha.DESCRIPTOR) == shape(health.DESCRIPTOR)
