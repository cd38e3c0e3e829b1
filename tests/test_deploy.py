"""The deployment: kustomize renders, Kubernetes schemas, security posture, images, config.

Every kustomization (the base, each overlay, and the base with each combination of
components, see ``COMBINATIONS``) is rendered once with ``kubectl kustomize`` and every
rendered object is checked against the Kubernetes OpenAPI schemas (``kubernetes-validate``,
strict, 1.31 and the newest it knows). The hostPath mounts are checked against what the
installed drivers declare (``devicehost_host_paths``) plus the host's own under the
HostConfig the pod reads (so CDI and node labels count only where their components turn
them on), the scheduling against the hardware labels and taints (and, where an overlay
has two DaemonSets, that they never share a node), and docs/operating.md's reach table
(host paths, devices and privileges) against the rendered components. The DaemonSet's
security posture is asserted field by field (MIG's one capability included), both
Dockerfiles are linted with hadolint at the threshold in ``deploy/.hadolint.yaml``, and
the HostConfig in each rendered ConfigMap is run through ``devicehost config``, which also
has every driver validate its own section, with the DaemonSet's env, as the pod would
read it. The Install and Uninstall text is checked for the steps it must give.
Tests skip, saying why, only where ``kubectl`` or ``hadolint`` cannot be found.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple
from urllib.parse import urlparse

import kubernetes_validate
import pytest
import yaml

from devicehost.config.host_config import HostConfig, load_config
from devicehost.drivers.discovery import load_plugins
from devicehost.edits.cdi import spec_file_name
from devicehost.node.mounts import (
    Declared,
    PlannedMount,
    always_present_ancestor,
    declared_by_drivers,
    host_own_paths,
)

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
DOCKERFILES = [DEPLOY / "Dockerfile", DEPLOY / "examples" / "extra-driver" / "Dockerfile"]

COMPONENTS = DEPLOY / "components"
OVERLAYS = {
    p.parent.name: p.parent for p in sorted((DEPLOY / "overlays").glob("*/kustomization.yaml"))
}
#: The overlays docs/operating.md tells operators to apply.
DOCUMENTED_OVERLAYS = {
    "try",
    "jaeger",
    "cdi",
    "nvidia",
    "nvidia-dra",
    "ascend",
    "rdma",
    "fleet",
    "fleet-ascend-dcmi",
}

#: Components that mount host paths or change privilege: every combination is rendered.
#: Ascend comes unprivileged (ascend) or with DCMI (ascend-dcmi, which includes ascend);
#: NVIDIA without MIG (nvidia) or with it (nvidia-mig, which includes nvidia).
PATH_CHOICES: tuple[tuple[str, ...], ...] = (
    ("", "nvidia", "nvidia-mig"),
    ("", "rdma"),
    ("", "ascend", "ascend-dcmi"),
    ("", "cdi"),
    ("", "node-labels"),
)
#: Components that touch fields of their own (env, affinity, SELinux, an extra object):
#: cycled through the combinations above so each value meets many others.
CYCLED: tuple[tuple[str, ...], ...] = (
    ("", "otel", "jaeger"),
    ("", "control-plane"),
    ("", "selinux"),
    ("", "podmonitor"),
)


def _combinations() -> dict[str, tuple[str, ...]]:
    combos: dict[str, tuple[str, ...]] = {}
    for index, picks in enumerate(itertools.product(*PATH_CHOICES)):
        cycled = tuple(choice[index % len(choice)] for choice in CYCLED)
        chosen = tuple(c for c in picks + cycled if c)
        combos["base+" + "+".join(chosen) if chosen else "base"] = chosen
    # And each component alone on the base, for the checks that compare one with the base.
    for component in sorted(p.name for p in COMPONENTS.iterdir() if p.is_dir()):
        combos[f"base+{component}"] = (component,)
    return combos


COMBINATIONS = _combinations()


def _components_of(path: Path) -> tuple[str, ...]:
    """The components the DaemonSet named devicehost gets: the kustomization's own and
    those of the kustomizations it builds on, except one that renames what it renders
    (a second DaemonSet, as in overlays/fleet-ascend-dcmi)."""
    doc = yaml.safe_load((path / "kustomization.yaml").read_text())
    found = tuple(PurePosixPath(c).name for c in doc.get("components", ()))
    for resource in doc.get("resources", ()):
        inner = (path / resource).resolve()
        if inner == DEPLOY / "base" or not (inner / "kustomization.yaml").exists():
            continue
        inner_doc = yaml.safe_load((inner / "kustomization.yaml").read_text())
        if not ({"namePrefix", "nameSuffix"} & set(inner_doc)):
            found += _components_of(inner)
    return found


#: Every kustomization, by short name, with the components it uses.
KUSTOMIZATIONS: dict[str, tuple[str, ...]] = COMBINATIONS | {
    name: _components_of(path) for name, path in OVERLAYS.items()
}
#: What operators apply directly (the base and the overlays).
APPLIED = ["base", *OVERLAYS]

#: The oldest Kubernetes the manifests support (CDI devices in the Device Plugin API are
#: stable from 1.31) and the newest the installed kubernetes-validate has schemas for.
KUBERNETES_VERSIONS = ("1.31", kubernetes_validate.latest_version())

#: Kinds that are not Kubernetes' own (the Prometheus operator's PodMonitor): no schema.
CUSTOM_KINDS = {"PodMonitor"}
#: Kinds without a namespace (components/dra: RBAC, DeviceClasses, its admission policy).
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "DeviceClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}
#: DRA's objects (components/dra) exist from Kubernetes 1.34, when resource.k8s.io/v1 went
#: GA: checked on the newest version only.
SINCE = {"resource.k8s.io/v1": "1.34"}

#: Component → the driver whose host paths it mounts.
DRIVER_COMPONENTS = {"nvidia": "nvidia", "rdma": "rdma", "ascend": "ascend"}

#: Taints the pod may tolerate: the accelerator vendors' own, and CriticalAddonsOnly.
VENDOR_TAINTS = {
    "nvidia.com/gpu",
    "huawei.com/Ascend910",
    "huawei.com/Ascend310",
    "huawei.com/Ascend310P",
    "CriticalAddonsOnly",
}
CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
HARDWARE_LABEL = re.compile(
    r"^feature\.node\.kubernetes\.io/pci-[0-9a-f]{4}\.present$"
    r"|^devicehost\.feature\.node\.kubernetes\.io/[a-z0-9-]+\.present$"
)

_VAR_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


# -- rendering ------------------------------------------------------------------------------


def _kubectl() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not found on PATH: cannot render the kustomizations")
    return kubectl


def _hadolint() -> str:
    beside_python = Path(sys.executable).parent / "hadolint"
    found = shutil.which("hadolint") or (str(beside_python) if beside_python.exists() else None)
    if found is None:
        pytest.skip("hadolint not found on PATH or beside the interpreter: cannot lint")
    return found


def _kustomization_dir(name: str, scratch: Path) -> Path:
    if name in OVERLAYS:
        return OVERLAYS[name]
    if name == "base":
        return DEPLOY / "base"
    here = scratch / name
    here.mkdir()
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": "devicehost",
        "resources": [os.path.relpath(DEPLOY / "base", here)],
        "components": [os.path.relpath(COMPONENTS / c, here) for c in KUSTOMIZATIONS[name]],
    }
    (here / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    return here


@functools.cache
def _render_all(kubectl: str) -> dict[str, list[dict[str, Any]]]:
    scratch = Path(tempfile.mkdtemp(prefix="kustomize-"))

    def render(name: str) -> list[dict[str, Any]]:
        path = _kustomization_dir(name, scratch)
        result = subprocess.run(
            [kubectl, "kustomize", str(path)], capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, f"kubectl kustomize {name} failed:\n{result.stderr}"
        return [doc for doc in yaml.safe_load_all(result.stdout) if doc]

    try:
        with ThreadPoolExecutor() as pool:
            return dict(zip(KUSTOMIZATIONS, pool.map(render, KUSTOMIZATIONS), strict=True))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def rendered(name: str) -> list[dict[str, Any]]:
    return _render_all(_kubectl())[name]


def only(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


def daemonset(name: str) -> dict[str, Any]:
    return only(rendered(name), "DaemonSet", "devicehost")


def container(name: str) -> dict[str, Any]:
    containers = daemonset(name)["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "devicehost")


def host_config(name: str) -> str:
    """The HostConfig text the pod reads: the ConfigMap key DEVICEHOST_CONFIG points at."""
    env = {e["name"]: e.get("value") for e in container(name)["env"]}
    config_path = PurePosixPath(env["DEVICEHOST_CONFIG"])
    mount = next(
        m
        for m in container(name)["volumeMounts"]
        if PurePosixPath(m["mountPath"]) == config_path.parent
    )
    volumes = daemonset(name)["spec"]["template"]["spec"]["volumes"]
    volume = next(v for v in volumes if v["name"] == mount["name"])
    configmap = only(rendered(name), "ConfigMap", volume["configMap"]["name"])
    text: str = configmap["data"][config_path.name]
    return text


def literal_env(name: str) -> dict[str, str]:
    """The container's env entries with a literal value (downward-API ones have none)."""
    return {e["name"]: e["value"] for e in container(name)["env"] if "value" in e}


def clean_env(**extra: str) -> dict[str, str]:
    """This process's env without any devicehost or OpenTelemetry settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEVICEHOST_", "OTEL_"))}
    env.pop("NODE_NAME", None)
    return env | extra


def devicehost(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "devicehost.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def check_config(config: Path, workdir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`devicehost config` on ``config`` with ``env``; ``--simulate`` under a scratch root in
    ``workdir`` lets every driver reach, and validate, its section without the hardware."""
    root = workdir / "root"
    root.mkdir(exist_ok=True)
    return devicehost(
        *("config", "--config", str(config), "--simulate", "--root", str(root)),
        env=clean_env(**env, TMPDIR=str(workdir)),
    )


def objects_with_pods(name: str) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for obj in rendered(name):
        if obj["kind"] in ("DaemonSet", "Deployment"):
            yield obj, obj["spec"]["template"]["spec"]


every_kustomization = pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
every_applied = pytest.mark.parametrize("name", APPLIED)


def simulates(name: str) -> bool:
    """Whether the pod serves simulated hardware (``DEVICEHOST_SIMULATE``), as
    overlays/try does."""
    return literal_env(name).get("DEVICEHOST_SIMULATE") == "true"


def uses(name: str, component: str) -> bool:
    """Whether the kustomization uses ``component`` (ascend-dcmi brings ascend along, and
    nvidia-mig nvidia)."""
    used = set(KUSTOMIZATIONS[name])
    if "ascend-dcmi" in used:
        used.add("ascend")
    if "nvidia-mig" in used:
        used.add("nvidia")
    if "jaeger" in used:
        used.add("otel")
    return component in used


# -- structure and schemas ----------------------------------------------------------------


def test_every_documented_overlay_exists() -> None:
    """Each overlay docs/operating.md names has a kustomization in deploy/overlays/."""
    assert set(OVERLAYS) >= DOCUMENTED_OVERLAYS
    text = (ROOT / "docs" / "operating.md").read_text()
    assert all(f"deploy/overlays/{o}" in text for o in DOCUMENTED_OVERLAYS)


@every_kustomization
def test_every_object_matches_the_kubernetes_schemas(name: str) -> None:
    """Every rendered object validates strictly (no unknown fields) on each Kubernetes version."""
    problems = []
    for obj in rendered(name):
        if obj["kind"] in CUSTOM_KINDS:
            continue
        since = tuple(map(int, SINCE.get(obj["apiVersion"], "0.0").split(".")))
        for version in KUBERNETES_VERSIONS:
            if tuple(map(int, version.split(".")[:2])) < since:
                continue
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = "/".join(str(p) for p in exc.path)
                problems.append(
                    f"{obj['kind']}/{obj['metadata']['name']} ({version}) {where}: {exc.message}"
                )
    assert not problems, "\n".join(problems)


@every_kustomization
def test_everything_lands_in_the_devicehost_namespace(name: str) -> None:
    """Every namespaced object is in namespace devicehost, which the render also creates."""
    objects = rendered(name)
    only(objects, "Namespace", "devicehost")
    elsewhere = [
        f"{o['kind']}/{o['metadata']['name']}"
        for o in objects
        if o["kind"] not in CLUSTER_SCOPED and o["metadata"].get("namespace") != "devicehost"
    ]
    assert not elsewhere


@every_kustomization
def test_every_image_is_pinned(name: str) -> None:
    """Every container image names a tag or digest, never latest."""
    images = [c["image"] for _, pod in objects_with_pods(name) for c in pod["containers"]]
    assert images
    for image in images:
        last = image.rsplit("/", 1)[-1]
        assert "@sha256:" in image or (":" in last and not last.endswith(":latest")), image


# -- the DaemonSet's security posture -------------------------------------------------------


@every_kustomization
def test_only_the_ascend_dcmi_component_makes_the_pod_privileged(name: str) -> None:
    """A container is privileged exactly when components/ascend-dcmi is used, and then
    only the devicehost container (the patch is keyed by its name)."""
    pod = daemonset(name)["spec"]["template"]["spec"]
    privileged = [
        c["name"]
        for c in pod["containers"] + pod.get("initContainers", [])
        if c.get("securityContext", {}).get("privileged")
    ]
    assert privileged == (["devicehost"] if uses(name, "ascend-dcmi") else []), privileged


@every_kustomization
def test_unprivileged_daemonset_drops_every_capability(name: str) -> None:
    """Without ascend-dcmi: no privilege escalation, capabilities drop ALL and add none but
    SYS_ADMIN on the devicehost container where components/nvidia-mig asks for it, and
    MKNOD where components/simulation makes simulated device nodes."""
    if uses(name, "ascend-dcmi"):
        pytest.skip("privileged by design: docs/operating.md, Security")
    pod = daemonset(name)["spec"]["template"]["spec"]
    for c in pod["containers"] + pod.get("initContainers", []):
        context = c.get("securityContext", {})
        assert context.get("allowPrivilegeEscalation") is False, c["name"]
        assert context.get("capabilities", {}).get("drop") == ["ALL"], c["name"]
        own = c["name"] == "devicehost"
        wanted = {"SYS_ADMIN"} if own and uses(name, "nvidia-mig") else set()
        wanted |= {"MKNOD"} if own and uses(name, "simulation") else set()
        assert set(context.get("capabilities", {}).get("add", [])) == wanted, c["name"]


@every_kustomization
def test_mig_monitoring_comes_with_its_capability_only_in_the_mig_component(name: str) -> None:
    """NVIDIA_MIG_MONITOR_DEVICES=all and CAP_SYS_ADMIN appear together, on the devicehost
    container, exactly when components/nvidia-mig is used: the NVIDIA runtime refuses the
    mig-monitor device to a container without the capability."""
    mig = uses(name, "nvidia-mig")
    env = literal_env(name)
    assert (env.get("NVIDIA_MIG_MONITOR_DEVICES") == "all") == mig
    added = container(name)["securityContext"].get("capabilities", {}).get("add", [])
    assert ("SYS_ADMIN" in added) == mig


def _mig_strategies(config: dict[str, Any]) -> set[str]:
    """Every migStrategy the NVIDIA driver can get from a HostConfig: its section's and
    each profile's (the driver's default is none)."""
    sections = [config.get("drivers", {})] + [
        p.get("drivers", {}) for p in config.get("profiles", [])
    ]
    return {s.get("nvidia", {}).get("migStrategy", "none") for s in sections if "nvidia" in s} | {
        config.get("drivers", {}).get("nvidia", {}).get("migStrategy", "none")
    }


@every_applied
def test_mig_is_configured_only_where_the_mig_component_is_used(name: str) -> None:
    """A HostConfig that turns MIG on for any node (section or profile) comes with
    components/nvidia-mig; without MIG the capability is not asked for."""
    config = yaml.safe_load(host_config(name))
    assert (_mig_strategies(config) != {"none"}) == uses(name, "nvidia-mig"), name


@every_kustomization
def test_daemonset_root_filesystem_is_read_only_with_a_writable_tmp(name: str) -> None:
    """readOnlyRootFilesystem is set, and /tmp (scratch for the temp files of the process and
    its libraries) is an emptyDir."""
    pod = daemonset(name)["spec"]["template"]["spec"]
    c = container(name)
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    tmp = next(m for m in c["volumeMounts"] if m["mountPath"] == "/tmp")
    assert "emptyDir" in next(v for v in pod["volumes"] if v["name"] == tmp["name"])


@every_kustomization
def test_daemonset_shares_no_host_namespace(name: str) -> None:
    """The pod uses neither the host's network, PID nor IPC namespace."""
    pod = daemonset(name)["spec"]["template"]["spec"]
    assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))


@functools.cache
def _driver_declarations() -> dict[str, tuple[Declared, ...]]:
    """Each bundled driver's host paths, asked of it in its own worker (no configure)."""
    plugins = load_plugins()
    found, _ = asyncio.run(declared_by_drivers(plugins.drivers, 10.0, 30.0))
    declared: dict[str, tuple[Declared, ...]] = {}
    for item in found:
        declared[item.owner] = (*declared.get(item.owner, ()), item)
    return declared


def pod_config(name: str) -> HostConfig:
    """The HostConfig the pod reads: the rendered ConfigMap with the DaemonSet's literal env
    (components switch host features such as CDI and node labels on through env)."""
    env = {k: v for k, v in literal_env(name).items() if k.startswith("DEVICEHOST_")}
    env.pop("DEVICEHOST_CONFIG", None)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "config.yaml"
        path.write_text(host_config(name))
        return load_config(path, env=env)


def expected_paths(name: str) -> list[Declared]:
    """What the pod of ``name`` needs: the host's own paths under the HostConfig it reads,
    and its drivers' declarations."""
    drivers = [d for c, d in DRIVER_COMPONENTS.items() if uses(name, c)]
    declarations = _driver_declarations()
    config = pod_config(name)
    if uses(name, "dra") and not config.serves_dra:
        # components/dra alone on the base: it is meant for a config that serves some
        # resource through DRA (overlays/nvidia-dra), as the host's paths then are.
        config = dataclasses.replace(config, resources={"example.com/any": {"api": "dra"}})
    own = host_own_paths(config)
    return own + [item for d in drivers for item in declarations.get(d, ())]


def host_mounts(name: str) -> list[tuple[str, str, bool]]:
    """(host path, path in the pod, read-only) for every hostPath mount of the pod."""
    pod = daemonset(name)["spec"]["template"]["spec"]
    by_volume = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    return [
        (by_volume[m["name"]], m["mountPath"], bool(m.get("readOnly", False)))
        for c in pod["containers"] + pod.get("initContainers", [])
        for m in c.get("volumeMounts", [])
        if m["name"] in by_volume
    ]


@every_kustomization
def test_every_host_mount_was_declared(name: str) -> None:
    """Each hostPath mount is a path the host or an included driver declared, at a place
    that declaration asks for, and read-only unless the host itself writes there."""
    declared = expected_paths(name)

    def asks_for(d: Declared, mount: tuple[str, str, bool]) -> bool:
        # The declared path itself, or the always-present kernel path it is mounted through.
        carrier = always_present_ancestor(d.path)
        source = Declared(d.owner, carrier, "", d.at_real_path) if carrier else d
        return source.path == mount[0] and mount[1] in source.targets()

    strays = [
        mount
        for mount in host_mounts(name)
        if not any(asks_for(d, mount) and (mount[2] or d.writable) for d in declared)
    ]
    assert not strays, f"mounted but declared by no installed driver or the host: {strays}"


@every_kustomization
def test_no_mount_source_depends_on_a_kernel_module(name: str) -> None:
    """No hostPath source lies in the part of /sys or /proc that exists only once a module
    is loaded: the runtime cannot create it there, and the pod would not start on a node
    without the module (in a mixed fleet, on every other vendor's node)."""
    fragile = [
        mount[0] for mount in host_mounts(name) if always_present_ancestor(mount[0]) is not None
    ]
    assert not fragile, f"mounted from module-dependent kernel paths: {fragile}"


@every_kustomization
def test_every_declared_path_is_mounted(name: str) -> None:
    """Each path the host or an included driver needs is reachable in the pod where it
    is expected (its own mount, or one of a declared parent)."""
    by_host: dict[str, PlannedMount] = {}
    for host_path, target, read_only in host_mounts(name):
        mount = by_host.setdefault(host_path, PlannedMount(host_path, (), True, ""))
        mount.targets += (target,)
        mount.read_only = mount.read_only and read_only
    missing = [
        f"{d.owner}: {d.path}"
        for d in expected_paths(name)
        if not any(m.covers(d) for m in by_host.values())
    ]
    assert not missing, f"needed but not mounted: {missing}"


#: What docs/operating.md says the pod cannot reach ("And what it cannot reach"): the
#: container runtimes' sockets, other pods' volumes (tokens, secrets), the cluster's keys,
#: kernel tunables and host credentials.
UNREACHABLE = (
    "/run/containerd/containerd.sock",
    "/var/run/containerd/containerd.sock",
    "/run/crio/crio.sock",
    "/var/run/crio/crio.sock",
    "/var/run/docker.sock",
    "/var/lib/kubelet/pods",
    "/var/lib/kubelet/kubeconfig",
    "/etc/kubernetes/pki",
    "/etc/kubernetes/admin.conf",
    "/proc/sys",
    "/sys/kernel",
    "/etc/shadow",
    "/root",
)


@every_kustomization
def test_the_documented_unreachable_paths_stay_unreachable(name: str) -> None:
    """No hostPath mount is, or contains, a path the Security section says the pod cannot
    reach (every combination of components)."""
    for host_path, target, _ in host_mounts(name):
        for secret in UNREACHABLE:
            assert not PurePosixPath(secret).is_relative_to(host_path), (host_path, target)


@every_kustomization
def test_the_host_root_is_never_mounted(name: str) -> None:
    """No pod mounts the host's /: only declared subtrees are visible."""
    assert all(host_path != "/" for host_path, _, _ in host_mounts(name))


@every_kustomization
def test_daemonset_runs_as_root_without_a_service_account_token(name: str) -> None:
    """runAsUser is 0 (the kubelet's socket directory is root's) and no API token is mounted,
    but with components/dra: the DRA face publishes ResourceSlices and reads claims."""
    pod = daemonset(name)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is uses(name, "dra")


@every_kustomization
def test_the_api_token_may_do_only_what_the_dra_face_calls(name: str) -> None:
    """Only components/dra binds a role, and it allows exactly the DRA face's calls."""
    roles = [o for o in rendered(name) if o["kind"] in ("Role", "ClusterRole")]
    if not uses(name, "dra"):
        assert not roles
        return
    (role,) = roles
    allowed = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    slices = {("resource.k8s.io", "resourceslices", v) for v in ("list", "create")}
    slices |= {("resource.k8s.io", "resourceslices", v) for v in ("patch", "delete")}
    claims = {("resource.k8s.io", "resourceclaims", "get")}
    assert allowed == slices | claims | {("", "nodes", "get")}


# -- scheduling, rollout, probes, resources -----------------------------------------------


@every_kustomization
def test_daemonset_runs_only_where_hardware_is(name: str) -> None:
    """Every node-affinity term requires a hardware label, and excludes control-plane nodes
    unless components/control-plane opts in; no bare nodeSelector widens it. A pod that
    simulates its hardware (overlays/try) instead runs on any Linux node, control plane
    included, and requires no hardware label."""
    pod = daemonset(name)["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-node-critical"
    assert "nodeSelector" not in pod
    required = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    if simulates(name):
        linux = {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}
        assert required["nodeSelectorTerms"] == [{"matchExpressions": [linux]}]
        return
    for term in required["nodeSelectorTerms"]:
        expressions = term["matchExpressions"]
        assert any(
            HARDWARE_LABEL.match(e["key"]) and e["operator"] == "In" and e["values"] == ["true"]
            for e in expressions
        ), term
        excluded = {"key": CONTROL_PLANE, "operator": "DoesNotExist"} in expressions
        assert excluded != uses(name, "control-plane"), term


@every_kustomization
def test_daemonset_tolerates_only_vendor_taints(name: str) -> None:
    """Tolerations name the accelerator vendors' taints and CriticalAddonsOnly (plus the
    control-plane taint where opted in, or simulated); none tolerates every taint of an
    effect."""
    tolerations = daemonset(name)["spec"]["template"]["spec"]["tolerations"]
    anywhere = uses(name, "control-plane") or simulates(name)
    allowed = VENDOR_TAINTS | ({CONTROL_PLANE} if anywhere else set())
    assert all(t.get("key") in allowed for t in tolerations), tolerations
    assert {t["key"] for t in tolerations} >= VENDOR_TAINTS


def _cannot_both_hold(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether no node's labels satisfy both node-selector requirements ``a`` and ``b``."""
    if a["key"] != b["key"]:
        return False
    present = {"In", "Exists"}
    for x, y in ((a, b), (b, a)):
        if x["operator"] in present and y["operator"] == "DoesNotExist":
            return True
        if x["operator"] == "In" and y["operator"] == "NotIn":
            return set(x["values"]) <= set(y["values"])
    if a["operator"] == "In" and b["operator"] == "In":
        return not set(a["values"]) & set(b["values"])
    return False


def _terms_exclude(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two nodeSelectorTerms can never match one node."""
    return any(
        _cannot_both_hold(x, y) for x in a["matchExpressions"] for y in b["matchExpressions"]
    )


def _node_terms(ds: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    terms: list[dict[str, Any]] = affinity["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    return terms


def _never_share_a_node(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Terms are ORed: two DaemonSets never meet when every pair of their terms excludes."""
    return all(_terms_exclude(x, y) for x in _node_terms(a) for y in _node_terms(b))


def test_the_exclusion_check_sees_an_overlap() -> None:
    """The base DaemonSet against itself overlaps, so the check below can fail."""
    assert not _never_share_a_node(daemonset("base"), daemonset("base"))


@every_applied
def test_daemonsets_of_one_overlay_never_share_a_node_or_a_pod(name: str) -> None:
    """Where an overlay renders more than one DaemonSet (the second-DaemonSet recipe,
    overlays/fleet-ascend-dcmi), no selector matches another DaemonSet's pods and their
    node affinities cannot both match one node."""
    sets = [o for o in rendered(name) if o["kind"] == "DaemonSet"]
    assert len(sets) == (2 if name == "fleet-ascend-dcmi" else 1)
    for a, b in itertools.permutations(sets, 2):
        selector = a["spec"]["selector"]["matchLabels"].items()
        assert not selector <= b["spec"]["template"]["metadata"]["labels"].items()
        assert _never_share_a_node(a, b), (a["metadata"]["name"], b["metadata"]["name"])


def test_only_the_second_daemonset_of_the_split_fleet_is_privileged() -> None:
    """In overlays/fleet-ascend-dcmi the fleet DaemonSet stays unprivileged and the
    Huawei-only one is privileged for DCMI, with its own ConfigMap and ServiceAccount."""
    objects = rendered("fleet-ascend-dcmi")
    second = only(objects, "DaemonSet", "devicehost-ascend-dcmi")["spec"]["template"]["spec"]
    (ascend,) = second["containers"]
    assert ascend["securityContext"]["privileged"] is True
    assert not container("fleet-ascend-dcmi")["securityContext"].get("privileged")
    assert second["serviceAccountName"] == "devicehost-ascend-dcmi"
    config = next(v for v in second["volumes"] if "configMap" in v)["configMap"]["name"]
    assert config.startswith("devicehost-config-ascend-dcmi")
    only(objects, "ConfigMap", config)


@every_kustomization
def test_rolling_update_surges_one_node_at_a_time_and_hands_over(name: str) -> None:
    """Every DaemonSet starts the new pod beside the old one (maxSurge 1, maxUnavailable 0),
    with a handover bound so the new pod waits for the old one's device-plugin directory
    instead of failing, and minReadySeconds 0 so the controller stops the old pod at the
    new one's Ready (docs/operating.md, "Upgrade")."""
    for ds in (o for o in rendered(name) if o["kind"] == "DaemonSet"):
        spec = ds["spec"]
        assert spec["updateStrategy"]["type"] == "RollingUpdate"
        assert spec["updateStrategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
        assert spec.get("minReadySeconds", 0) == 0
        (c,) = (c for c in spec["template"]["spec"]["containers"] if c["name"] == "devicehost")
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert float(env["DEVICEHOST_PLUGIN_DIR_HANDOVER_SECONDS"]) >= 60, ds["metadata"]


@every_kustomization
def test_probes_and_scrape_annotations_use_the_metrics_port(name: str) -> None:
    """Liveness /healthz and readiness /readyz probe the port named metrics, which is the
    port DEVICEHOST_METRICS_ADDRESS listens on and the one Prometheus is told to scrape."""
    c = container(name)
    port = next(p["containerPort"] for p in c["ports"] if p["name"] == "metrics")
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    # No host: every address family, so IPv6-only and dual-stack clusters probe it too.
    assert literal_env(name)["DEVICEHOST_METRICS_ADDRESS"] == f":{port}"
    annotations = daemonset(name)["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(port)
    assert annotations["prometheus.io/path"] == "/metrics"


@every_kustomization
def test_every_container_has_requests_and_limits(name: str) -> None:
    """Every container sets cpu and memory requests and limits."""
    for _, pod in objects_with_pods(name):
        for c in pod["containers"]:
            for bound in ("requests", "limits"):
                assert set(c["resources"][bound]) == {"cpu", "memory"}, (c["name"], bound)


@every_kustomization
def test_env_references_only_earlier_variables(name: str) -> None:
    """Each $(VAR) in an env value names a variable defined earlier in the same container;
    Kubernetes leaves any other reference unexpanded."""
    for _, pod in objects_with_pods(name):
        for c in pod["containers"]:
            seen: set[str] = set()
            for entry in c.get("env", []):
                for ref in _VAR_REFERENCE.findall(entry.get("value", "")):
                    assert ref in seen, (
                        f"{c['name']}: {entry['name']} uses $({ref}) before it is set"
                    )
                seen.add(entry["name"])


# -- the HostConfig ---------------------------------------------------------------------------


class Checked(NamedTuple):
    """One rendered HostConfig run through `devicehost config`, and the scratch root the
    simulated node was built in (the pod's DEVICEHOST_ROOT, as the drivers saw it)."""

    result: subprocess.CompletedProcess[str]
    root: Path


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Checked]:
    """`devicehost config` on every rendered HostConfig with the DaemonSet's literal env, as
    the pod would read it; run concurrently, since each is a fresh interpreter."""
    _kubectl()
    workdir = tmp_path_factory.mktemp("hostconfig")

    def check(name: str) -> Checked:
        here = workdir / name
        here.mkdir()
        config = here / "config.yaml"
        config.write_text(host_config(name))
        # The tree goes to the scratch TMPDIR, never the pod's simulation hostPath.
        pod_env = {
            k: v
            for k, v in literal_env(name).items()
            if k not in ("DEVICEHOST_CONFIG", "DEVICEHOST_SIMULATE_DIR")
        }
        return Checked(check_config(config, here, **pod_env), here / "root")

    with ThreadPoolExecutor() as pool:
        return dict(zip(APPLIED, pool.map(check, APPLIED), strict=True))


@every_applied
def test_hostconfig_is_accepted_by_devicehost_config(
    name: str, checked: dict[str, Checked]
) -> None:
    """`devicehost config` accepts the ConfigMap's HostConfig with the DaemonSet's env, every
    driver's section included (exit 0), and the env's settings take effect."""
    result = checked[name].result
    assert result.returncode == 0, result.stderr
    effective = yaml.safe_load(result.stdout)
    env = literal_env(name)
    assert effective["log"]["format"] == env["DEVICEHOST_LOG_FORMAT"]
    assert effective["metrics"]["address"] == env["DEVICEHOST_METRICS_ADDRESS"]


def test_a_bad_hostconfig_is_refused(tmp_path: Path) -> None:
    """`devicehost config` exits 2 naming the key when a HostConfig has an unknown key,
    so the acceptance check above can fail."""
    config = tmp_path / "config.yaml"
    config.write_text("apiVersion: devicehost/v1\nkind: HostConfig\nscanIntervalSecs: 5\n")
    result = devicehost("config", "--config", str(config), env=clean_env())
    assert result.returncode == 2
    assert "scanIntervalSecs: unknown key" in result.stderr


def test_a_bad_driver_section_is_refused(tmp_path: Path) -> None:
    """`devicehost config` exits 2 naming the driver when its configure hook rejects its
    section (here the template driver's), so the driver sections' check can fail."""
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: devicehost/v1\nkind: HostConfig\n"
        "drivers:\n  template:\n    simulatedCount: -1\n"
    )
    result = check_config(config, tmp_path)
    assert result.returncode == 2
    assert "drivers.template" in result.stderr


@every_applied
def test_overlays_change_only_the_driver_sections(name: str, tmp_path: Path) -> None:
    """An overlay's HostConfig, read without env, equals the base's in everything but
    ``drivers``, ``profiles`` and ``resources``, so replacing the ConfigMap never drifts
    from the base."""

    def effective(which: str) -> dict[str, Any]:
        path = tmp_path / f"{which}.yaml"
        path.write_text(host_config(which))
        doc = load_config(path, env={}).to_document()
        doc.pop("drivers")
        doc.pop("profiles")
        doc.pop("resources")
        return doc

    assert effective(name) == effective("base")


@every_applied
def test_hostconfig_paths_lie_in_the_mounted_kubelet_directories(name: str) -> None:
    """pluginDir and podResourcesSocket name the directories the pod mounts at the same paths."""
    config = yaml.safe_load(host_config(name))
    mounts = {m["mountPath"] for m in container(name)["volumeMounts"]}
    assert config.get("pluginDir", "/var/lib/kubelet/device-plugins") in mounts
    socket = config.get("podResourcesSocket", "/var/lib/kubelet/pod-resources/kubelet.sock")
    assert not socket or str(PurePosixPath(socket).parent) in mounts


# -- trying it out: overlays/try, and the jaeger overlay on real nodes --------------------


@every_kustomization
def test_only_an_overlay_turns_simulation_on(name: str) -> None:
    """Neither the base nor any component makes the pod serve simulated hardware: a
    component added to a production overlay never advertises devices a node lacks."""
    if name not in OVERLAYS:
        assert not {"DEVICEHOST_SIMULATE", "DEVICEHOST_SIMULATE_NODE"} & set(literal_env(name))


@pytest.mark.parametrize("name", sorted(OVERLAYS))
def test_only_a_simulating_overlay_lets_the_pod_make_device_nodes(name: str) -> None:
    """components/simulation (CAP_MKNOD and a writable hostPath for the trees) is in an
    overlay exactly when it simulates: no production overlay makes a device node, and a
    simulated node's containers get the device nodes its answers name."""
    assert uses(name, "simulation") == simulates(name), name


@pytest.mark.parametrize("name", sorted(OVERLAYS))
def test_every_overlay_serves_a_vendor_or_simulates(name: str) -> None:
    """Each overlay either brings a vendor component (the host paths and runtime env its
    drivers need on a real node) or simulates its hardware: an overlay with neither would
    find every driver unavailable and serve nothing, while its pods report ready."""
    assert simulates(name) or any(uses(name, c) for c in DRIVER_COMPONENTS), name


@functools.cache
def _served(name: str) -> dict[str, Any]:
    """`devicehost devices --json` on the HostConfig of ``name`` with the pod's DEVICEHOST_*
    env (its simulation settings): what the pod would advertise to its kubelet. The pod's
    paths are left out: its simulated tree is made in the scratch directory, never in the
    host path the pod mounts (DEVICEHOST_SIMULATE_DIR)."""
    pod_paths = ("DEVICEHOST_CONFIG", "DEVICEHOST_ROOT", "DEVICEHOST_SIMULATE_DIR")
    env = {
        k: v
        for k, v in literal_env(name).items()
        if k.startswith("DEVICEHOST_") and k not in pod_paths
    }
    with tempfile.TemporaryDirectory() as scratch:
        config = Path(scratch) / "config.yaml"
        config.write_text(host_config(name))
        result = devicehost(
            "devices", "--json", "--config", str(config), env=clean_env(**env, TMPDIR=scratch)
        )
    assert result.returncode == 0, result.stderr
    served: dict[str, Any] = json.loads(result.stdout)["resources"]
    return served


def test_the_try_overlay_serves_a_simulated_dgx_h100() -> None:
    """overlays/try's pod serves the simulated DGX H100: 8 healthy GPUs and the 8 InfiniBand
    compute NICs, which the walkthrough tells a newcomer to look for on the node."""
    served = _served("try")
    gpus = served["nvidia.com/gpu"]["devices"]
    assert len(gpus) == 8 and {d["health"] for d in gpus} == {"Healthy"}
    assert len(served["rdma/hca"]["devices"]) == 8
    assert literal_env("try")["DEVICEHOST_SIMULATE_NODE"] == "dgx-h100"


def test_the_walkthrough_applies_the_try_overlay_and_asks_for_what_it_serves() -> None:
    """docs/operating.md's "From nothing to a trace" applies overlays/try, looks for the
    GPUs on the node, and its test pods ask for a GPU and an HCA, both served by that
    overlay's pod; the trace it finds is sent to the Jaeger the overlay brings."""
    text = (ROOT / "docs" / "operating.md").read_text()
    walkthrough = text[text.index("From nothing to a trace") : text.index("What you will find")]
    assert "kubectl apply -k deploy/overlays/try" in walkthrough
    assert "kubectl describe node" in walkthrough
    pods = [
        doc
        for heredoc in re.findall(r"<<'EOF'\n(.*?)\n *EOF\n", walkthrough, re.DOTALL)
        for doc in yaml.safe_load_all(textwrap.dedent(heredoc))
        if doc and doc.get("kind") == "Pod"
    ]
    asked = {r for pod in pods for c in pod["spec"]["containers"] for r in c["resources"]["limits"]}
    assert {"nvidia.com/gpu", "rdma/hca"} <= asked <= set(_served("try")), asked
    assert uses("try", "jaeger")


# -- components -------------------------------------------------------------------------


def otlp_host(endpoint: str) -> str:
    host = urlparse(endpoint).hostname
    assert host, endpoint
    return host


@every_kustomization
def test_tracing_is_on_only_with_the_otel_component(name: str) -> None:
    """The OTLP endpoint, sampler and resource attributes come with components/otel (jaeger
    includes it); without it nothing turns tracing on."""
    env = literal_env(name)
    if not uses(name, "otel"):
        assert not {k for k in env if k.startswith("OTEL_")}
        assert not yaml.safe_load(host_config("base")).get("tracing", {}).get("otlpEndpoint")
        return
    assert env["OTEL_TRACES_SAMPLER"] == "parentbased_traceidratio"
    attributes = dict(a.split("=", 1) for a in env["OTEL_RESOURCE_ATTRIBUTES"].split(","))
    assert set(attributes) == {
        "k8s.pod.name",
        "k8s.namespace.name",
        "k8s.pod.uid",
        "k8s.node.name",
    }
    # A Service name alone: the pod's own namespace, wherever it is deployed.
    assert "." not in otlp_host(env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"])


@every_kustomization
def test_jaeger_endpoint_names_the_rendered_jaeger_service(name: str) -> None:
    """With jaeger, the endpoint is the rendered jaeger Service's OTLP gRPC port by name
    only, and that Service selects the Jaeger pods."""
    if not uses(name, "jaeger"):
        assert not [o for o in rendered(name) if o["metadata"]["name"] == "jaeger"]
        return
    objects = rendered(name)
    endpoint = urlparse(literal_env(name)["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"])
    service = only(objects, "Service", endpoint.hostname)
    assert endpoint.port in {p["port"] for p in service["spec"]["ports"]}
    jaeger = only(objects, "Deployment", "jaeger")
    assert (
        service["spec"]["selector"].items()
        <= jaeger["spec"]["template"]["metadata"]["labels"].items()
    )
    assert literal_env(name)["OTEL_TRACES_SAMPLER_ARG"] == "1.0"


@every_kustomization
def test_podmonitor_scrapes_the_metrics_port_of_these_pods(name: str) -> None:
    """The PodMonitor selects the DaemonSet's pods and scrapes their port named metrics."""
    monitors = [o for o in rendered(name) if o["kind"] == "PodMonitor"]
    assert bool(monitors) == uses(name, "podmonitor")
    for monitor in monitors:
        labels = daemonset(name)["spec"]["template"]["metadata"]["labels"]
        assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
        assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
        assert monitor["metadata"]["namespace"] == "devicehost"


@every_kustomization
def test_selinux_type_only_with_the_selinux_component(name: str) -> None:
    """components/selinux sets the container's SELinux type; otherwise the runtime's default."""
    options = container(name)["securityContext"].get("seLinuxOptions")
    assert (options == {"type": "container_device_plugin_t"}) == uses(name, "selinux")


def test_no_index_based_json_patches() -> None:
    """Every patch under deploy/ is a strategic merge (keyed by names), never a JSON6902
    patch with operations, so adding a sidecar first can never shift what a patch hits."""
    for kustomization in DEPLOY.rglob("kustomization.yaml"):
        doc = yaml.safe_load(kustomization.read_text())
        assert "patchesJson6902" not in doc, kustomization
        for patch in doc.get("patches", []):
            text = patch.get("patch") or (kustomization.parent / patch["path"]).read_text()
            assert not re.search(r"(?m)^\s*-?\s*op:", text), f"{kustomization}: {patch}"


def test_node_labels_component_points_the_host_at_the_mounted_features_d() -> None:
    """DEVICEHOST_FEATURE_FILE lies in the directory the node-labels component mounts
    writable at its real path, NFD's features.d."""
    name = "base+node-labels"
    feature_file = PurePosixPath(literal_env(name)["DEVICEHOST_FEATURE_FILE"])
    assert (str(feature_file.parent), str(feature_file.parent), False) in host_mounts(name)
    assert str(feature_file.parent) == "/etc/kubernetes/node-feature-discovery/features.d"


@every_kustomization
def test_only_the_cdi_component_turns_cdi_on_and_mounts_its_directory_writable(
    name: str,
) -> None:
    """With components/cdi the HostConfig the pod reads has cdi.enabled, and cdi.dir is the
    host's /var/run/cdi mounted writable at that same path (the host writes its
    k8s.devicehost.io specs where the runtime reads them). Without it CDI is off and no
    CDI directory is writable, but with components/dra (a claim's CDI spec)."""
    config = pod_config(name)
    assert config.cdi_enabled == uses(name, "cdi")
    writable_cdi = [
        (host, target)
        for host, target, read_only in host_mounts(name)
        if not read_only and host in ("/var/run/cdi", "/etc/cdi")
    ]
    if uses(name, "cdi") or uses(name, "dra"):
        assert writable_cdi == [("/var/run/cdi", str(config.cdi_dir))]
    else:
        assert not writable_cdi


def test_fleet_profiles_choose_per_node_settings(tmp_path: Path) -> None:
    """The fleet overlay's profiles give a 910B node (by name: without DCMI its family label
    cannot say 910B) full-mesh settings, an inference node
    time-sliced GPUs, and leave any other GPU node on the base, as `devicehost config
    --node-facts` shows."""
    config = tmp_path / "config.yaml"
    config.write_text(host_config("fleet"))
    facts = tmp_path / "facts.yaml"
    root = tmp_path / "root"
    root.mkdir()

    def profile_of(node_facts: str) -> tuple[str, dict[str, Any]]:
        facts.write_text(node_facts)
        result = devicehost(
            *("config", "--config", str(config), "--node-facts", str(facts)),
            *("--simulate", "--root", str(root)),
            env=clean_env(TMPDIR=str(tmp_path)),
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()[0], yaml.safe_load(result.stdout)["drivers"]

    first, drivers = profile_of("nodeName: a2-7\nlabels: {ascend.family: '910'}\n")
    assert first == "# profile: ascend-910b"
    assert drivers["ascend"]["hccsGroupSize"] == 0
    first, drivers = profile_of("nodeName: infer-3\nlabels: {}\n")
    assert first == "# profile: inference-shared"
    (shared,) = drivers["nvidia"]["timeSlicing"]["resources"]
    assert (shared["replicas"], shared["rename"]) == (4, "nvidia.com/gpu.shared")
    first, drivers = profile_of("nodeName: gpu-1\nlabels: {}\n")
    assert first == "# profile: (none: base settings)"
    assert "timeSlicing" not in drivers["nvidia"]


# -- docs/operating.md's reach table ---------------------------------------------------------

REACH_TABLE = re.compile(r"<!-- reach:begin -->\n(.*?)<!-- reach:end -->", re.DOTALL)


#: Env that makes the NVIDIA container runtime hand host devices to the container.
DEVICE_ENV = ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES")


def _reach_rows() -> dict[str, tuple[set[str], set[str]]]:
    """component → (host paths with ro/rw, devices and privileges), each cell's `code` items."""
    text = (ROOT / "docs" / "operating.md").read_text()
    match = REACH_TABLE.search(text)
    assert match, "docs/operating.md has no reach table"
    rows: dict[str, tuple[set[str], set[str]]] = {}
    for line in match.group(1).splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        found = []
        for column, cell in enumerate(cells[1:3]):
            items = set(re.findall(r"`([^`]+)`", cell))
            # "as nvidia, ...": that row's items too (a component that includes another).
            same = re.match(r"as ([a-z-]+)", cell)
            found.append(items | (rows[same.group(1)][column] if same else set()))
        rows[cells[0].strip("`")] = (found[0], found[1])
    return rows


def _reach(name: str) -> set[str]:
    return {f"{host} {'ro' if ro else 'rw'}" for host, _, ro in host_mounts(name)}


def _grants(name: str) -> set[str]:
    """What the devicehost container gets beyond files: privilege, added capabilities, and
    the env that makes the runtime add host devices."""
    context = container(name)["securityContext"]
    env = literal_env(name)
    return (
        ({"privileged"} if context.get("privileged") else set())
        | {f"CAP_{c}" for c in context.get("capabilities", {}).get("add", [])}
        | {f"{k}={env[k]}" for k in DEVICE_ENV if k in env}
    )


def test_operating_security_table_matches_the_manifests() -> None:
    """For the base and each component, the host paths docs/operating.md lists (path and
    ro/rw) are exactly what the rendered pod mounts beyond the base, and the devices and
    privileges it lists are exactly the privilege, capabilities and device env the
    rendered container gets beyond the base."""
    rows = _reach_rows()
    assert set(rows) == {"base"} | {p.name for p in COMPONENTS.iterdir() if p.is_dir()}
    assert rows["base"] == (_reach("base"), _grants("base"))
    for component, (paths, grants) in rows.items():
        if component == "base":
            continue
        name = f"base+{component}"
        assert paths == _reach(name) - _reach("base"), component
        assert grants == _grants(name) - _grants("base"), component


def _section(title: str) -> str:
    text = (ROOT / "docs" / "operating.md").read_text()
    match = re.search(rf"(?ms)^## {title}\n(.*?)(?=^## )", text)
    assert match, f"docs/operating.md has no {title} section"
    return match.group(1)


def test_install_says_to_turn_off_each_vendors_own_plugin_first() -> None:
    """Install's first step disables the GPU Operator's device plugin and removes Huawei's
    and the RDMA plugins, before anything is applied."""
    install = _section("Install")
    first = install.index("Turn off the vendor's own device plugin")
    assert first < install.index("kubectl apply -k deploy/overlays/")
    for plugin in ("devicePlugin.enabled=false", "ascend-device-plugin", "rdma-shared-dp-ds"):
        assert plugin in install[first:], plugin


def test_uninstall_removes_what_the_host_wrote_and_says_what_node_status_shows() -> None:
    """Uninstall deletes the DaemonSet, names the CDI spec files the host writes (by the
    name the host gives them) and the feature file the node-labels component points at,
    and says what the node's capacity and allocatable show afterwards."""
    uninstall = _section("Uninstall")
    assert "kubectl delete -k deploy/overlays/" in uninstall
    spec_glob = spec_file_name("nvidia.com/gpu").replace("nvidia.com_gpu", "*")
    assert f"{literal_env('base+cdi')['DEVICEHOST_CDI_DIR']}/{spec_glob}" in uninstall
    assert literal_env("base+node-labels")["DEVICEHOST_FEATURE_FILE"] in uninstall
    for status in ("status.capacity", "status.allocatable"):
        assert status in uninstall, status


# -- images -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_dockerfile_passes_hadolint(dockerfile: Path) -> None:
    """hadolint finds nothing at or above the threshold set in deploy/.hadolint.yaml."""
    result = subprocess.run(
        [_hadolint(), "--no-color", "--config", str(DEPLOY / ".hadolint.yaml"), str(dockerfile)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _final_stage(dockerfile: Path) -> str:
    return re.split(r"(?m)^FROM ", dockerfile.read_text())[-1]


def test_image_installs_from_local_wheels_only() -> None:
    """The final stage's pip install uses the build stage's wheels and no index."""
    install = re.search(r"pip install[^\n]*(?:\\\n[^\n]*)*", _final_stage(DOCKERFILES[0]))
    assert install, "no pip install in the final stage"
    assert "--no-index" in install.group(0)
    assert "--find-links /wheels" in install.group(0)


def test_image_runs_the_host_as_pid_1_without_an_init() -> None:
    """The chosen design: the host itself is the container's PID 1 (no tini or other init
    installed or in the entry point), as tests/test_pid1.py runs it, and the reason is in
    docs/operating.md."""
    final = _final_stage(DOCKERFILES[0])
    [entrypoint] = re.findall(r"(?m)^ENTRYPOINT (.*)$", final)
    assert json.loads(entrypoint) == ["devicehost"]
    for line in final.splitlines():
        if not line.lstrip().startswith("#"):
            assert not re.search(r"\b(tini|dumb-init|catatonit)\b", line), line
    operating = (ROOT / "docs" / "operating.md").read_text()
    assert "directly as PID 1" in operating


def test_image_entrypoint_is_devicehost_run() -> None:
    """The image runs `devicehost run` by default."""
    final = _final_stage(DOCKERFILES[0])
    assert 'ENTRYPOINT ["devicehost"]' in final
    assert 'CMD ["run"]' in final


def test_dockerignore_lets_through_every_copied_path() -> None:
    """Each path the Dockerfile copies from the build context is re-included by
    deploy/Dockerfile.dockerignore, which otherwise excludes everything."""
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    included = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert "*" in ignore
    copies = re.findall(r"(?m)^COPY (?!--from)(.+)$", DOCKERFILES[0].read_text())
    sources = [s.rstrip("/") for line in copies for s in line.split()[:-1]]
    assert sources
    assert set(sources) <= included


def test_image_build_is_documented_for_both_architectures() -> None:
    """The Dockerfile and docs/operating.md give the buildx command for amd64 and arm64."""
    for text in (DOCKERFILES[0].read_text(), (ROOT / "docs" / "operating.md").read_text()):
        assert "buildx build" in text
        assert "--platform linux/amd64,linux/arm64" in text
