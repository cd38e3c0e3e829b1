"""CDI specs written by the host, checked against the CDI specification's own rules.

The validator below is written from github.com/cncf-tags/container-device-interface:
``SPEC.md`` (fields, kind syntax, absolute paths), ``pkg/parser/parser.go`` (vendor, class
and device name syntax), ``specs-go/version.go`` (known versions, and the minimum version
the fields used require), ``pkg/cdi/spec.go`` and ``pkg/cdi/device.go`` (a spec needs
devices, a device needs edits, names are unique), ``pkg/cdi/container-edits.go``
(``KEY=VALUE`` env, ``rwm`` permissions). It shares no code with devicehost.edits.cdi.
"""

from __future__ import annotations

import json
import logging
import re
import stat
from pathlib import Path
from typing import Any

import grpc
import pytest

from devicehost import ContainerEdits, Device, DeviceNode, ResourceSpec
from devicehost.edits.cdi import (
    CdiWriter,
    class_name,
    device_name,
    remove_specs,
    spec_document,
)
from support import SCRIPTED, eventually
from testdrivers.declaring import JOINED, RESOURCE, write_devices

DECLARING = "testdrivers.declaring:Declaring"
VENDOR = "k8s.devicehost.io"

# -- a validator for the CDI specification's rules ------------------------------------------

VERSIONS = ["0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0"]
_VENDOR_OR_CLASS = re.compile(r"^[A-Za-z](?:[A-Za-z0-9_.\-]*[A-Za-z0-9])?$")
_DEVICE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.:\-]*[A-Za-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?$")
_SPEC_KEYS = {"cdiVersion", "kind", "annotations", "devices", "containerEdits"}
_DEVICE_KEYS = {"name", "annotations", "containerEdits"}
_EDIT_KEYS = {
    "env",
    "deviceNodes",
    "mounts",
    "hooks",
    "additionalGids",
    "intelRdt",
    "netDevices",
}
_NODE_KEYS = {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"}
_MOUNT_KEYS = {"hostPath", "containerPath", "type", "options"}


def _edits_problems(where: str, edits: dict[str, Any], needs: set[str]) -> list[str]:
    problems = [f"{where}: unknown field {k!r}" for k in set(edits) - _EDIT_KEYS]
    for entry in edits.get("env", []):
        if not isinstance(entry, str) or entry.find("=") <= 0:
            problems.append(f"{where}: env {entry!r} is not KEY=VALUE")
    for node in edits.get("deviceNodes", []):
        problems += [f"{where}: unknown device node field {k!r}" for k in set(node) - _NODE_KEYS]
        for key in ("path", "hostPath"):
            if key in node and not str(node[key]).startswith("/"):
                problems.append(f"{where}: device node {key} {node[key]!r} is not absolute")
        if "path" not in node:
            problems.append(f"{where}: device node without path")
        if "hostPath" in node:
            needs.add("0.5.0")
        permissions = node.get("permissions", "")
        if permissions not in ("", "none") and set(permissions) - set("rwm"):
            problems.append(f"{where}: permissions {permissions!r} are not a subset of rwm")
    for mount in edits.get("mounts", []):
        problems += [f"{where}: unknown mount field {k!r}" for k in set(mount) - _MOUNT_KEYS]
        for key in ("hostPath", "containerPath"):
            if not str(mount.get(key, "")).startswith("/"):
                problems.append(f"{where}: mount {key} {mount.get(key)!r} is not absolute")
        if "type" in mount:
            needs.add("0.4.0")
    return problems


def required_version(spec: dict[str, Any]) -> str:
    """The minimum version the spec's fields need (specs-go/version.go)."""
    needs: set[str] = set()
    cdi_problems(spec, needs)
    return max(needs | {"0.3.0"}, key=VERSIONS.index)


def cdi_problems(spec: dict[str, Any], needs: set[str] | None = None) -> list[str]:
    """Every way ``spec`` breaks the CDI specification (empty: it is valid)."""
    needs = set() if needs is None else needs
    problems = [f"unknown field {k!r}" for k in set(spec) - _SPEC_KEYS]
    version = spec.get("cdiVersion")
    if version not in VERSIONS:
        problems.append(f"cdiVersion {version!r} is not a released CDI version")
    vendor, slash, klass = str(spec.get("kind", "")).partition("/")
    if not slash or "/" in klass:
        problems.append(f"kind {spec.get('kind')!r} is not vendor/class")
    if not _VENDOR_OR_CLASS.match(vendor) or not all(
        _DNS_LABEL.match(label) for label in vendor.split(".")
    ):
        problems.append(f"vendor {vendor!r} is not a DNS subdomain CDI accepts")
    if not _VENDOR_OR_CLASS.match(klass) or len(klass) > 63:
        problems.append(f"class {klass!r} breaks CDI's class-name syntax")
    if "." in klass:
        needs.add("0.6.0")
    if spec.get("annotations"):
        needs.add("0.6.0")
    problems += _edits_problems("spec", spec.get("containerEdits", {}), needs)
    devices = spec.get("devices", [])
    if not devices:
        problems.append("no devices")
    names = [d.get("name", "") for d in devices]
    if len(set(names)) != len(names):
        problems.append("a device name is defined twice")
    for device in devices:
        name = device.get("name", "")
        problems += [f"device {name!r}: unknown field {k!r}" for k in set(device) - _DEVICE_KEYS]
        if not _DEVICE.match(name):
            problems.append(f"device name {name!r} breaks CDI's device-name syntax")
        if name[:1].isdigit():
            needs.add("0.5.0")
        if device.get("annotations"):
            needs.add("0.6.0")
        edits = device.get("containerEdits") or {}
        if not any(edits.get(k) for k in _EDIT_KEYS):
            problems.append(f"device {name!r} has empty edits")
        problems += _edits_problems(f"device {name!r}", edits, needs)
    minimum = max(needs | {"0.3.0"}, key=VERSIONS.index)
    if version in VERSIONS and VERSIONS.index(version) < VERSIONS.index(minimum):
        problems.append(f"cdiVersion {version} is lower than {minimum}, needed by its fields")
    return problems


def specs_in(directory: Path) -> dict[str, dict[str, Any]]:
    """Every spec file in ``directory`` by file name."""
    return {p.name: json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))}


def assert_valid_and_ours(directory: Path) -> dict[str, dict[str, Any]]:
    specs = specs_in(directory)
    assert specs, f"no spec in {directory}"
    for name, spec in specs.items():
        assert cdi_problems(spec) == [], name
        assert spec["kind"].partition("/")[0] == VENDOR
        assert name == spec["kind"].replace("/", "-") + ".json"
    return specs


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture
def cdi_dir(tmp_path: Path) -> Path:
    return tmp_path / "cdi"


@pytest.fixture
def declaring(install, run_host, kubelet, cdi_dir, tmp_path):
    """Start a host serving the declaring driver 'beta' with CDI on; return a function that
    replaces its devices ({"id", "index", "healthy", "node"} entries)."""

    def start(target=DECLARING, ids=None, **overrides):
        install("devicehost-beta", drivers={"beta": target})
        ids = ids or [f"dev-{i}" for i in range(4)]
        devices_file = tmp_path / "devices.json"
        write_devices(devices_file, [{"id": i, "index": n} for n, i in enumerate(ids)])
        section = {"devicesFile": str(devices_file)}
        options = {"cdi_enabled": True, "cdi_dir": cdi_dir, **overrides}
        run_host(enabled_drivers=("beta",), drivers={"beta": section}, **options)
        kubelet.wait_registered(RESOURCE)
        kubelet.wait_devices(RESOURCE, lambda d: len(d) == len(ids))
        return lambda entries: write_devices(devices_file, entries)

    return start


def spec_path(cdi_dir: Path) -> Path:
    return cdi_dir / f"{VENDOR}-test.example_declared.json"


def container(kubelet, ids):
    return kubelet.allocate(RESOURCE, [ids])[0]


# -- specs of the bundled drivers and of a scripted one ----------------------------------------


@pytest.mark.parametrize("driver", ["nvidia", "ascend", "rdma", "template"])
def test_simulated_node_specs_follow_the_cdi_spec_under_our_vendor(run_host, cdi_dir, driver):
    """Each bundled driver's simulated node gets one valid spec per served resource, under
    k8s.devicehost.io only, naming every device the resource serves."""
    host = run_host(
        simulate=True, enabled_drivers=(driver,), cdi_enabled=True, cdi_dir=cdi_dir
    ).host
    assert host.resources, f"{driver} serves nothing on its simulated node"
    specs = assert_valid_and_ours(cdi_dir)
    assert len(specs) == len(host.resources)
    for name, resource in host.resources.items():
        spec = next(s for s in specs.values() if s["kind"] == f"{VENDOR}/{class_name(name)}")
        assert [d["name"] for d in spec["devices"]] == [
            device_name(i) for i in resource.state.devices
        ]


def test_declared_edits_land_in_the_spec_and_joined_envs_do_not(declaring, cdi_dir):
    """A device's nodes go into its entry and the resource's edits into the spec-level
    containerEdits; the joined env, annotations and declared CDI names stay out."""
    declaring()
    spec = assert_valid_and_ours(cdi_dir)[spec_path(cdi_dir).name]
    assert spec["containerEdits"] == {
        "env": ["DECLARED_COMMON=1"],
        "deviceNodes": [
            {"path": "/dev/declared-ctl", "hostPath": "/dev/declared-ctl", "permissions": "rw"}
        ],
        "mounts": [
            {
                "hostPath": "/opt/declared/lib",
                "containerPath": "/usr/lib/declared",
                "options": ["ro", "nosuid", "nodev", "bind"],
            }
        ],
    }
    first = spec["devices"][0]
    assert first == {
        "name": "dev-0",
        "containerEdits": {
            "deviceNodes": [
                {"path": "/dev/declared0", "hostPath": "/dev/declared0", "permissions": "rw"}
            ]
        },
    }
    assert JOINED not in json.dumps(spec) and "vendor.example" not in json.dumps(spec)


def test_cdi_version_is_the_lowest_the_fields_allow():
    """cdiVersion is the minimum the spec's fields need: 0.5.0 for a device node hostPath,
    0.6.0 once the class holds a dot, 0.3.0 for env alone."""
    node = Device(id="a", edits=ContainerEdits(devices=(DeviceNode(host_path="/dev/a"),)))
    bare = Device(id="a")
    for resource, device, expected in [
        ("example/widget", bare, "0.3.0"),
        ("example/widget", node, "0.5.0"),
        ("example.com/widget", bare, "0.6.0"),
    ]:
        spec = spec_document(ResourceSpec(name=resource), [device])
        assert spec is not None
        assert (spec["cdiVersion"], required_version(spec)) == (expected, expected)


def test_a_device_without_edits_of_its_own_still_makes_a_valid_spec():
    """CDI refuses a device with empty edits: one declaring only a joined env gets an env
    variable of its own, distinct per device."""
    spec = spec_document(
        ResourceSpec(name="example.com/widget", joined_envs=("W",)),
        [Device(id=i, edits=ContainerEdits(envs={"W": i})) for i in ("w0", "w1")],
    )
    assert spec is not None and cdi_problems(spec) == []
    keys = [d["containerEdits"]["env"][0].partition("=")[0] for d in spec["devices"]]
    assert len(set(keys)) == 2


# -- names ------------------------------------------------------------------------------------


def test_class_names_are_valid_and_distinct():
    """Resource names become CDI class names one-to-one, valid even for a domain starting
    with a digit or a name too long for a class."""
    resources = [
        "nvidia.com/gpu",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com_gpu/x",
        "3com.example/nic",
        "example.com/" + "a" * 63,
        "example.com/" + "a" * 62 + "b",
    ]
    classes = [class_name(r) for r in resources]
    assert classes[:2] == ["nvidia.com_gpu", "nvidia.com_mig-1g.10gb"]
    assert len(set(classes)) == len(classes)
    for klass in classes:
        assert _VENDOR_OR_CLASS.match(klass) and len(klass) <= 63, klass


def test_device_ids_cdi_forbids_get_valid_distinct_names():
    """IDs with characters CDI forbids get a valid name of their own, never another ID's;
    IDs CDI allows keep their name."""
    ids = ["GPU-8f6c", "0", "mlx5_0:1", "slot 2", "slot_2", "slot#2", "a:", "-x", "ü", "dev.7"]
    names = [device_name(i) for i in ids]
    assert names[0] == "GPU-8f6c" and names[4] == "slot_2" and names[2] == "mlx5_0:1"
    assert len(set(names)) == len(names)
    for name in names:
        assert _DEVICE.match(name), name


def test_a_forbidden_id_is_served_under_its_derived_name(declaring, kubelet, cdi_dir):
    """A device whose ID CDI forbids is in the spec under its derived name, and an
    Allocate of it names that device."""
    declaring(ids=["slot 2", "slot_2"])
    spec = assert_valid_and_ours(cdi_dir)[spec_path(cdi_dir).name]
    names = [d["name"] for d in spec["devices"]]
    assert names[1] == "slot_2" and names[0] != "slot_2"
    answer = container(kubelet, ["slot 2"])
    assert answer.cdi_devices[0] == f"{VENDOR}/test.example_declared={names[0]}"


# -- files ------------------------------------------------------------------------------------


def test_spec_is_replaced_atomically_with_mode_0644(declaring, cdi_dir):
    """A changed spec replaces the file by rename: a reader holding the old file reads it
    whole, the path holds the new one, no temporary file is left, and the mode is 0644."""
    set_devices = declaring()
    path = spec_path(cdi_dir)
    with path.open() as old:
        set_devices([{"id": "dev-0", "index": 0}, {"id": "dev-5", "index": 5}])
        eventually(lambda: "dev-5" in path.read_text())
        assert [d["name"] for d in json.loads(old.read())["devices"]] == [
            "dev-0",
            "dev-1",
            "dev-2",
            "dev-3",
        ]
    assert [d["name"] for d in json.loads(path.read_text())["devices"]] == ["dev-0", "dev-5"]
    assert sorted(p.name for p in cdi_dir.iterdir()) == [path.name]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_unchanged_content_is_not_rewritten(declaring, kubelet, cdi_dir):
    """A health change leaves the spec file untouched (same inode, same mtime)."""
    set_devices = declaring()
    path = spec_path(cdi_dir)
    before = path.stat()
    set_devices([{"id": f"dev-{n}", "index": n, "healthy": n != 1} for n in range(4)])
    kubelet.wait_health(RESOURCE, "dev-1", "Unhealthy")
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_writer_leaves_an_identical_file_alone(tmp_path):
    """A new writer (a restarted host) does not rewrite a spec whose content is the same."""
    spec = ResourceSpec(name="example.com/widget")
    devices = {"w0": Device(id="w0")}
    CdiWriter(tmp_path).refresh(spec, devices)
    (path,) = tmp_path.iterdir()
    before = path.stat()
    CdiWriter(tmp_path).refresh(spec, devices)
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_fifo_or_endless_link_at_a_spec_s_path_is_replaced_without_reading_it(tmp_path):
    """What lies at a spec's path in the shared CDI directory is compared only when it is
    a regular file: a FIFO (whose read would block the loop for good) or a symlink to
    /dev/zero (which reads without end) is replaced by the spec."""
    import os
    import threading

    spec = ResourceSpec(name="example.com/widget")
    devices = {"w0": Device(id="w0")}
    CdiWriter(tmp_path).refresh(spec, devices)
    (path,) = tmp_path.iterdir()
    good = path.read_text()
    for plant in (lambda: os.mkfifo(path), lambda: path.symlink_to("/dev/zero")):
        path.unlink()
        plant()
        writer = threading.Thread(
            target=CdiWriter(tmp_path).refresh, args=(spec, devices), daemon=True
        )
        writer.start()
        writer.join(10)
        assert not writer.is_alive(), "the spec write blocked on what lay at its path"
        assert path.is_file() and not path.is_symlink() and path.read_text() == good


def test_specs_are_removed_when_the_host_stops(run_host, cdi_dir):
    """A clean stop removes every spec the host wrote."""
    thread = run_host(
        simulate=True, enabled_drivers=("template",), cdi_enabled=True, cdi_dir=cdi_dir
    )
    assert specs_in(cdi_dir)
    thread.stop()
    assert list(cdi_dir.iterdir()) == []


def test_remove_specs_removes_only_our_vendor(tmp_path):
    """remove_specs removes files whose kind is under k8s.devicehost.io, whatever their name,
    and leaves a vendor's spec (nvidia.yaml, nvidia.com/gpu) and other files alone."""
    (tmp_path / "nvidia.yaml").write_text(
        "---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: '0'\n"
        "  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n"
    )
    (tmp_path / "devicehost-nvidia.com-gpu.json").write_text('{"kind": "nvidia.com/gpu"}')
    (tmp_path / "renamed.json").write_text('{"kind": "k8s.devicehost.io/example.com_widget"}')
    (tmp_path / "notes.txt").write_text("kind: k8s.devicehost.io/x")
    (tmp_path / "broken.json").write_text("{")
    CdiWriter(tmp_path).refresh(ResourceSpec(name="example.com/gadget"), {"g": Device(id="g")})
    removed = remove_specs(tmp_path)
    assert sorted(p.name for p in removed) == [
        "k8s.devicehost.io-example.com_gadget.json",
        "renamed.json",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "broken.json",
        "devicehost-nvidia.com-gpu.json",
        "notes.txt",
        "nvidia.yaml",
    ]


# -- Allocate in CDI mode, over real sockets ----------------------------------------------------


def test_allocate_answers_cdi_names_and_joined_envs_only(declaring, kubelet, cdi_dir):
    """In CDI mode the answer names each device's CDI device (plus the CDI names devices
    declare) and carries the joined env and annotations; no device nodes, no mounts. The
    devices it names are in the spec on disk when the answer arrives."""
    declaring()
    answer = container(kubelet, ["dev-2", "dev-0"])
    spec = json.loads(spec_path(cdi_dir).read_text())
    defined = {f"{spec['kind']}={d['name']}" for d in spec["devices"]}
    assert {c for c in answer.cdi_devices if c.startswith(VENDOR)} <= defined
    kind = f"{VENDOR}/test.example_declared"
    assert list(answer.cdi_devices) == [
        f"{kind}=dev-2",
        f"{kind}=dev-0",
        "vendor.example/thing=0",
    ]
    assert dict(answer.envs) == {JOINED: "dev-2,dev-0"}
    assert dict(answer.annotations) == {
        "declared.example/device-2": "in-use",
        "declared.example/device-0": "in-use",
    }
    assert (list(answer.devices), list(answer.mounts)) == ([], [])


def test_a_new_device_is_in_the_spec_before_the_kubelet_can_allocate_it(
    declaring, kubelet, cdi_dir
):
    """When the kubelet first sees a new device, the spec on disk already defines it, and
    the device an Allocate names is in that spec."""
    set_devices = declaring()
    set_devices([{"id": f"dev-{n}", "index": n} for n in (0, 1, 2, 3, 9)])
    kubelet.wait_devices(RESOURCE, lambda d: "dev-9" in d)
    on_disk = [d["name"] for d in json.loads(spec_path(cdi_dir).read_text())["devices"]]
    assert "dev-9" in on_disk
    answer = container(kubelet, ["dev-9"])
    assert list(answer.cdi_devices) == [f"{VENDOR}/test.example_declared=dev-9"]


def test_the_drivers_allocate_answer_is_kept_whole_in_cdi_mode(declaring, kubelet):
    """A driver's allocate answer is merged into the CDI answer as it is, device nodes
    included, since no spec holds them."""
    declaring(target="testdrivers.declaring:DeclaringWithAllocate")
    answer = container(kubelet, ["dev-1"])
    assert dict(answer.envs) == {JOINED: "dev-1", "DECLARED_AT_ALLOCATE": "dev-1"}
    assert [d.host_path for d in answer.devices] == ["/dev/declared-session"]
    assert f"{VENDOR}/test.example_declared=dev-1" in list(answer.cdi_devices)


def test_a_spec_that_cannot_be_written_refuses_allocate(declaring, kubelet, tmp_path):
    """When the spec cannot be written, Allocate is refused (UNAVAILABLE) naming the
    resource, rather than naming a device the runtime cannot find."""
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    declaring(cdi_dir=blocked / "cdi")
    with pytest.raises(grpc.RpcError) as refused:
        container(kubelet, ["dev-0"])
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "test.example/declared" in refused.value.details()


def test_a_failed_spec_write_is_retried_and_heals_without_a_device_change(
    declaring, kubelet, tmp_path, caplog
):
    """A spec that cannot be written (a file where its directory should be: a full or
    broken disk) is retried with back-off: the failure is logged once and counted; once
    the directory can be made the spec is written and Allocate answers, with no change of
    the resource's devices."""
    caplog.set_level(logging.INFO, logger="devicehost")
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    cdi_dir = blocked / "cdi"
    declaring(cdi_dir=cdi_dir)
    with pytest.raises(grpc.RpcError):
        container(kubelet, ["dev-0"])
    failures = [r for r in caplog.records if "cannot write the CDI spec" in r.getMessage()]
    assert len(failures) == 1, [r.getMessage() for r in failures]
    assert "trying again with back-off" in failures[0].getMessage()
    blocked.unlink()  # the disk heals
    eventually(lambda: spec_path(cdi_dir).exists(), timeout=30)
    answer = container(kubelet, ["dev-0"])
    assert f"{VENDOR}/test.example_declared=dev-0" in list(answer.cdi_devices)
    assert any("written again" in r.getMessage() for r in caplog.records)


def test_cdi_drivers_limits_cdi_to_the_named_drivers(declaring, kubelet, cdi_dir):
    """With cdi.drivers naming another driver, this one answers with device nodes and
    writes no spec."""
    declaring(cdi_drivers=("other",))
    answer = container(kubelet, ["dev-1"])
    assert "/dev/declared1" in [d.host_path for d in answer.devices]
    assert answer.cdi_devices == () and not cdi_dir.exists()


def test_cdi_off_by_default_writes_nothing(install, run_host, kubelet, tmp_path):
    """Without cdi.enabled the host writes no spec, even with cdi.dir set."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    run_host(
        enabled_drivers=("alpha",),
        drivers={"alpha": {"resources": {"test.example/dev": 1}}},
        cdi_dir=tmp_path / "cdi",
    )
    kubelet.wait_registered("test.example/dev")
    assert not (tmp_path / "cdi").exists()


def test_a_change_of_edits_alone_rewrites_the_spec(declaring, kubelet, cdi_dir):
    """A device whose edits change, with no change of health or membership, is rewritten
    in the spec each time, and Allocate then names it (its current edits are on disk)."""
    set_devices = declaring(ids=["dev-0", "dev-1"])
    set_devices([{"id": "dev-0", "index": 0}, {"id": "dev-1", "index": 1, "node": "/dev/x"}])
    eventually(lambda: "/dev/x" in spec_path(cdi_dir).read_text())
    set_devices([{"id": "dev-0", "index": 0}, {"id": "dev-1", "index": 1}])
    eventually(lambda: "/dev/declared1" in spec_path(cdi_dir).read_text())
    assert "/dev/x" not in spec_path(cdi_dir).read_text()
    assert container(kubelet, ["dev-1"]).cdi_devices[0].endswith("=dev-1")
