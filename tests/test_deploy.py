"""The deployment: kustomize renders, Kubernetes schemas, security posture, images, config.

Every kustomization (the base and each overlay) is rendered once with ``kubectl kustomize``
and every rendered object is checked against the Kubernetes OpenAPI schemas
(``kubernetes-validate``, strict). The DaemonSet's security posture is asserted field by
field, both Dockerfiles are linted with hadolint at the threshold in
``deploy/.hadolint.yaml``, and the HostConfig in each rendered ConfigMap is run through
``devicehost config``, which also has every driver validate its own section, with the
DaemonSet's env, as the pod would read it.
Tests skip, saying why, only where ``kubectl`` or ``hadolint`` cannot be found.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple

import kubernetes_validate
import pytest
import yaml

from devicehost.config import load_config

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
DOCKERFILES = [DEPLOY / "Dockerfile", DEPLOY / "examples" / "extra-driver" / "Dockerfile"]

#: Every kustomization an operator may apply, by short name.
KUSTOMIZATIONS = {"base": DEPLOY / "base"} | {
    p.parent.name: p.parent for p in sorted((DEPLOY / "overlays").glob("*/kustomization.yaml"))
}
#: The overlays docs/operating.md tells operators to apply.
DOCUMENTED_OVERLAYS = {"jaeger", "cdi", "nvidia", "ascend", "rdma"}

#: The oldest Kubernetes the manifests support (CDI devices in the Device Plugin API are
#: stable from 1.31) and the newest the installed kubernetes-validate has schemas for.
KUBERNETES_VERSIONS = ("1.31", kubernetes_validate.latest_version())

#: hostPath volumes every pod mounts, path → read-only; overlays may add only what is listed.
BASE_HOST_PATHS = {
    "/var/lib/kubelet/device-plugins": False,
    "/var/lib/kubelet/pod-resources": True,
    "/": True,
}
EXTRA_HOST_PATHS = {"cdi": {"/var/run/cdi": False}}
HOST_ROOT_MOUNT = "/host"

#: The overlays that run the container privileged (through components/ascend-dcmi), for
#: the reason docs/operating.md gives under "Security": Ascend's DCMI opens NPU device
#: nodes that only a privileged container has in its /dev.
PRIVILEGED = {"ascend"}

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


@functools.cache
def _render_all(kubectl: str) -> dict[str, list[dict[str, Any]]]:
    def render(path: Path) -> list[dict[str, Any]]:
        result = subprocess.run(
            [kubectl, "kustomize", str(path)], capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, f"kubectl kustomize {path} failed:\n{result.stderr}"
        return [doc for doc in yaml.safe_load_all(result.stdout) if doc]

    with ThreadPoolExecutor() as pool:
        return dict(zip(KUSTOMIZATIONS, pool.map(render, KUSTOMIZATIONS.values()), strict=True))


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


# -- structure and schemas ----------------------------------------------------------------


def test_every_documented_overlay_exists() -> None:
    """Each overlay docs/operating.md names has a kustomization in deploy/overlays/."""
    assert set(KUSTOMIZATIONS) - {"base"} >= DOCUMENTED_OVERLAYS


@every_kustomization
def test_every_object_matches_the_kubernetes_schemas(name: str) -> None:
    """Every rendered object validates strictly (no unknown fields) on each Kubernetes version."""
    problems = []
    for obj in rendered(name):
        for version in KUBERNETES_VERSIONS:
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
        if o["kind"] != "Namespace" and o["metadata"].get("namespace") != "devicehost"
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
def test_only_the_documented_overlays_are_privileged(name: str) -> None:
    """A container is privileged only in the overlays listed in PRIVILEGED."""
    pod = daemonset(name)["spec"]["template"]["spec"]
    privileged = [
        c["name"]
        for c in pod["containers"] + pod.get("initContainers", [])
        if c.get("securityContext", {}).get("privileged")
    ]
    assert bool(privileged) == (name in PRIVILEGED), privileged


@pytest.mark.parametrize("name", sorted(set(KUSTOMIZATIONS) - PRIVILEGED))
def test_unprivileged_daemonset_drops_every_capability(name: str) -> None:
    """Outside PRIVILEGED: no privilege escalation, capabilities drop ALL and add none."""
    pod = daemonset(name)["spec"]["template"]["spec"]
    for c in pod["containers"] + pod.get("initContainers", []):
        context = c.get("securityContext", {})
        assert context.get("allowPrivilegeEscalation") is False, c["name"]
        assert context.get("capabilities", {}).get("drop") == ["ALL"], c["name"]
        assert not context.get("capabilities", {}).get("add"), c["name"]


@every_kustomization
def test_daemonset_root_filesystem_is_read_only_with_a_writable_tmp(name: str) -> None:
    """readOnlyRootFilesystem is set, and /tmp (where --simulate builds its node) is an emptyDir."""
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


@every_kustomization
def test_host_paths_are_exactly_the_expected_ones(name: str) -> None:
    """The hostPath mounts are the kubelet's two socket directories and the host root
    (plus the CDI directory in the cdi overlay), each writable only where listed."""
    pod = daemonset(name)["spec"]["template"]["spec"]
    by_volume = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounted = {
        by_volume[m["name"]]: m.get("readOnly", False)
        for c in pod["containers"]
        for m in c.get("volumeMounts", [])
        if m["name"] in by_volume
    }
    assert mounted == BASE_HOST_PATHS | EXTRA_HOST_PATHS.get(name, {})


@every_kustomization
def test_host_root_is_mounted_read_only_at_devicehost_root(name: str) -> None:
    """The host's / is mounted read-only at /host, and DEVICEHOST_ROOT points there."""
    pod = daemonset(name)["spec"]["template"]["spec"]
    root_volume = next(
        v["name"] for v in pod["volumes"] if v.get("hostPath", {}).get("path") == "/"
    )
    mount = next(m for m in container(name)["volumeMounts"] if m["name"] == root_volume)
    assert (mount["mountPath"], mount.get("readOnly")) == (HOST_ROOT_MOUNT, True)
    assert literal_env(name)["DEVICEHOST_ROOT"] == HOST_ROOT_MOUNT


@every_kustomization
def test_daemonset_runs_as_root_without_a_service_account_token(name: str) -> None:
    """runAsUser is 0 (the kubelet's socket directory is root's) and no API token is mounted."""
    pod = daemonset(name)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False


# -- scheduling, rollout, probes, resources -----------------------------------------------


@every_kustomization
def test_daemonset_is_node_critical_and_tolerates_no_schedule_taints(name: str) -> None:
    """priorityClassName is system-node-critical; any NoSchedule taint is tolerated, but
    NoExecute only for named keys, so a NoExecute taint meant to clear a node still does."""
    pod = daemonset(name)["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-node-critical"
    tolerations = pod["tolerations"]
    assert {"operator": "Exists", "effect": "NoSchedule"} in tolerations
    assert all(t.get("key") or t.get("effect") == "NoSchedule" for t in tolerations)
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in tolerations


@every_kustomization
def test_rolling_update_never_runs_two_pods_on_a_node(name: str) -> None:
    """RollingUpdate with maxSurge 0: the old pod's sockets are gone before the new pod serves."""
    strategy = daemonset(name)["spec"]["updateStrategy"]
    assert strategy["type"] == "RollingUpdate"
    assert strategy["rollingUpdate"]["maxSurge"] == 0
    assert strategy["rollingUpdate"]["maxUnavailable"]


@every_kustomization
def test_probes_and_scrape_annotations_use_the_metrics_port(name: str) -> None:
    """Liveness /healthz and readiness /readyz probe the port named metrics, which is the
    port DEVICEHOST_METRICS_ADDRESS listens on and the one Prometheus is told to scrape."""
    c = container(name)
    port = next(p["containerPort"] for p in c["ports"] if p["name"] == "metrics")
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert literal_env(name)["DEVICEHOST_METRICS_ADDRESS"] == f"0.0.0.0:{port}"
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
        pod_env = {k: v for k, v in literal_env(name).items() if k != "DEVICEHOST_CONFIG"}
        return Checked(check_config(config, here, **pod_env), here / "root")

    with ThreadPoolExecutor() as pool:
        return dict(zip(KUSTOMIZATIONS, pool.map(check, KUSTOMIZATIONS), strict=True))


@every_kustomization
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


@every_kustomization
def test_overlays_change_only_the_driver_sections(name: str, tmp_path: Path) -> None:
    """An overlay's HostConfig, read without env, equals the base's in everything but
    ``drivers``, so replacing the ConfigMap for a vendor never drifts from the base."""

    def effective(which: str) -> dict[str, Any]:
        path = tmp_path / f"{which}.yaml"
        path.write_text(host_config(which))
        doc = load_config(path, env={}).to_document()
        doc.pop("drivers")
        return doc

    assert effective(name) == effective("base")


@every_kustomization
def test_hostconfig_paths_lie_in_the_mounted_kubelet_directories(name: str) -> None:
    """pluginDir and podResourcesSocket name the directories the pod mounts at the same paths."""
    config = yaml.safe_load(host_config(name))
    mounts = {m["mountPath"] for m in container(name)["volumeMounts"]}
    assert config.get("pluginDir", "/var/lib/kubelet/device-plugins") in mounts
    socket = config.get("podResourcesSocket", "/var/lib/kubelet/pod-resources/kubelet.sock")
    assert not socket or str(PurePosixPath(socket).parent) in mounts


# -- overlays -----------------------------------------------------------------------------------


def test_jaeger_overlay_points_the_exporter_at_its_jaeger_service() -> None:
    """OTEL_EXPORTER_OTLP_ENDPOINT names the rendered jaeger Service's OTLP gRPC port, and
    that Service selects the Jaeger pods, which expose OTLP gRPC, OTLP HTTP and the UI."""
    objects = rendered("jaeger")
    env = literal_env("jaeger")
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "grpc"
    assert env["OTEL_SERVICE_NAME"] == "devicehost"
    assert env["OTEL_TRACES_SAMPLER"] == "parentbased_always_on"
    endpoint = re.fullmatch(
        r"http://([^.]+)\.([^.]+)\.svc:(\d+)", env["OTEL_EXPORTER_OTLP_ENDPOINT"]
    )
    assert endpoint, env["OTEL_EXPORTER_OTLP_ENDPOINT"]
    service_name, namespace, port = endpoint.groups()
    service = only(objects, "Service", service_name)
    assert service["metadata"]["namespace"] == namespace
    assert int(port) in {p["port"] for p in service["spec"]["ports"]}
    jaeger = only(objects, "Deployment", "jaeger")
    pod_labels = jaeger["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    exposed = {
        p["containerPort"]
        for c in jaeger["spec"]["template"]["spec"]["containers"]
        for p in c["ports"]
    }
    assert {4317, 4318, 16686} <= exposed


def test_only_the_jaeger_overlay_turns_tracing_on() -> None:
    """The base sets no OTLP endpoint, env or file, so tracing is off unless asked for."""
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in literal_env("base")
    assert not yaml.safe_load(host_config("base")).get("tracing", {}).get("otlpEndpoint")


def test_cdi_overlay_specs_land_in_the_mounted_cdi_directory(
    checked: dict[str, Checked],
) -> None:
    """With the cdi overlay's HostConfig every CDI-enabled driver (nvidia, ascend, rdma)
    writes its spec into the directory where the pod mounts the host's /var/run/cdi, as seen
    under DEVICEHOST_ROOT, and nowhere else under it."""
    pod = daemonset("cdi")["spec"]["template"]["spec"]
    volume = next(
        v["name"] for v in pod["volumes"] if v.get("hostPath", {}).get("path") == "/var/run/cdi"
    )
    mount = PurePosixPath(
        next(m for m in container("cdi")["volumeMounts"] if m["name"] == volume)["mountPath"]
    )
    root = literal_env("cdi")["DEVICEHOST_ROOT"]
    assert mount.is_relative_to(root), f"{mount} is outside {root}, where the drivers write"
    in_root = mount.relative_to(root)
    drivers = yaml.safe_load(host_config("cdi"))["drivers"]
    expected = {"nvidia.com/gpu", "huawei.com/npu", drivers["rdma"]["cdi"]["kind"]}
    assert "cdi" in drivers["nvidia"]["deviceListStrategy"]
    assert drivers["ascend"]["useCdi"] is True
    specs = list(checked["cdi"].root.rglob("devicehost-*.json"))
    assert {spec.parent for spec in specs} == {checked["cdi"].root / in_root}
    assert {json.loads(spec.read_text())["kind"] for spec in specs} == expected


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
