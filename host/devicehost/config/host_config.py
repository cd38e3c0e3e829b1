"""The HostConfig: YAML file, ``DEVICEHOST_*`` env, flags — flags > env > file > defaults.

Every setting is declared once in ``SETTINGS`` (key path, env var, parser, help), and the
file loader, env loader, CLI flags and docs all read that table. Unknown keys and bad
values stop start-up with a ``ConfigError`` naming the source, the key path and what was
expected. The ``drivers`` section is passed through, one mapping per driver, to each
driver's ``devicehost_configure``.
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from devicehost.config.profiles import Profile, parse_profiles
from devicehost.config.resource_api import (
    DEVICE_PLUGIN_API,
    DRA_API,
    parse_resource_sections,
)
from devicehost.errors import ConfigError

API_VERSION = "devicehost/v1"
KIND = "HostConfig"


#: Bounds on every ``...Seconds`` setting: below the floor a loop would spin (a scan every
#: microsecond burns a core), above the ceiling asyncio's timers overflow.
MIN_SECONDS = 0.01
MAX_SECONDS = 86400.0
#: A HostConfig is a page of YAML; anything bigger is not one (a log, a disk image).
MAX_CONFIG_BYTES = 1 << 20


def _short(value: Any) -> str:
    """``repr(value)``, cut short: a config error quotes the value, not a 5000-digit number."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


_POD_UID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")


def _pod_uid(value: Any) -> str:
    text = _text(value)
    if text and not _POD_UID_RE.match(text):
        raise ValueError(f"expected a pod UID (letters, digits, '-'), got {_short(value)}")
    return text


def _positive_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("expected a positive number of seconds")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"expected a positive number of seconds, got {_short(value)}") from None
    if not (number > 0 and math.isfinite(number)):
        raise ValueError(f"expected a positive number of seconds, got {_short(value)}")
    if not MIN_SECONDS <= number <= MAX_SECONDS:
        raise ValueError(
            f"expected between {MIN_SECONDS:g} and {MAX_SECONDS:g} seconds, got {number:g}"
        )
    return number


def _seconds_or_never(value: Any) -> float:
    """A positive number of seconds, or 0 for never."""
    try:
        if not isinstance(value, bool) and float(value) == 0:
            return 0.0
    except (TypeError, ValueError, OverflowError):
        pass
    try:
        return _positive_float(value)
    except ValueError as exc:
        raise ValueError(f"{exc} (or 0 for never)") from None


def _count(low: int, high: int) -> Callable[[Any], int]:
    """A parser of a whole number from ``low`` to ``high`` (a limit: docs/reliability.md)."""

    def parse(value: Any) -> int:
        if type(value) is not int and not (isinstance(value, str) and value.isdigit()):
            raise ValueError(f"expected a whole number from {low} to {high}, got {_short(value)}")
        number = int(value)
        if not low <= number <= high:
            raise ValueError(f"expected a whole number from {low} to {high}, got {number}")
        return number

    return parse


def _path(value: Any) -> Path:
    if not isinstance(value, str | Path) or not str(value) or "\x00" in str(value):
        raise ValueError(f"expected a path, got {value!r}")
    return Path(value)


def _absolute_path(value: Any) -> Path:
    path = _path(value)
    if not path.is_absolute():
        # The kubelet dials sockets by absolute path; a relative one depends on the cwd.
        raise ValueError(f"expected an absolute path, got {str(value)!r}")
    return path


def _optional_path(value: Any) -> Path | None:
    return None if value in (None, "") else _absolute_path(value)


def _name_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a list of driver names, got {value!r}")
    return tuple(value)


def _optional_name_list(value: Any) -> tuple[str, ...] | None:
    return None if value is None else _name_list(value)


def _choice(*choices: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        text = str(value).lower()
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}")
        return text

    return parse


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def _address(value: Any) -> str:
    text = _text(value)
    if not text:
        return text
    host, colon, port = text.rpartition(":")
    if not colon or not port.isascii() or not port.isdigit() or len(port) > 5:
        raise ValueError(f"expected host:port (or empty to disable), got {text[:60]!r}")
    if not 0 <= int(port) <= 65535:
        raise ValueError(f"port {port} is out of range 0-65535 in {text[:60]!r}")
    if host.startswith("[") != host.endswith("]") or any(c.isspace() for c in host):
        raise ValueError(f"expected host:port (or empty to disable), got {text[:60]!r}")
    return text


def _endpoint(value: Any) -> str:
    """An OTLP endpoint: ``http(s)://host[:port][/path]``, or ``host:port`` (sent as
    http://). Checked here, where the key can be named: the exporter would take a bad one
    and fail at every export, long after start-up."""
    text = _text(value).strip()
    if not text:
        return text
    expected = f"expected an OTLP URL such as http://collector:4317, got {_short(text)}"
    if not text.isprintable() or any(c.isspace() for c in text):  # a NUL, a newline, ...
        raise ValueError(expected)
    try:
        url = urlsplit(text if "://" in text else f"http://{text}")
        url.port  # noqa: B018 (raises ValueError when the port is not a number in range)
    except ValueError:
        raise ValueError(expected) from None
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(expected)
    return text


def _driver_sections(value: Any) -> dict[str, dict[str, Any]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("expected a mapping of driver name to its settings")
    for name, section in value.items():
        if section is not None and not isinstance(section, dict):
            raise ValueError(f"expected a mapping for driver {name!r}, got {section!r}")
    return {str(k): dict(v or {}) for k, v in value.items()}


def _allowances(value: Any) -> dict[str, tuple[str, ...]]:
    """``{driver: [env name or container path, ...]}``: the container-edit policy's
    exceptions the operator allows each driver (docs/hooks.md)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("expected a mapping of driver name to a list of env names and paths")
    allowed: dict[str, tuple[str, ...]] = {}
    for name, items in value.items():
        if not isinstance(items, list) or not all(isinstance(i, str) and i for i in items):
            raise ValueError(
                f"expected a list of env names and container paths for driver {name!r}, "
                f"got {_short(items)}"
            )
        allowed[str(name)] = tuple(items)
    return allowed


def _names(value: Any) -> dict[str, str]:
    """``{devicehost driver: DRA driver name}`` (checked where it is used: the DRA face)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in value.items()
    ):
        raise ValueError(
            f"expected a mapping of driver name to DRA driver name, got {_short(value)}"
        )
    return dict(value)


def redact_url(url: str) -> str:
    """``url`` with any ``user:password@`` replaced by ``***@``: an endpoint may carry
    credentials, and logs and printed configs must never show them."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "***"
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]).geturl()


@dataclass(frozen=True)
class Setting:
    """One configurable value: its key path in the file, env var, parser and help text."""

    key: str
    attr: str
    parse: Callable[[Any], Any]
    env: str | None
    help: str


@dataclass(frozen=True, kw_only=True)
class HostConfig:
    """The effective configuration of one devicehost process."""

    plugin_dir: Path = Path("/var/lib/kubelet/device-plugins")
    root: Path = Path("/")
    pod_resources_socket: Path | None = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    node_name: str = ""
    #: This devicehost pod's UID (the downward API's metadata.uid): DRA sockets named per
    #: pod, so two instances serve during a DaemonSet's surge.
    pod_uid: str = ""
    plugin_dir_handover_seconds: float = 0.0
    enabled_drivers: tuple[str, ...] | None = None
    disabled_drivers: tuple[str, ...] = ()
    scan_interval: float = 10.0
    watched_scan_interval: float = 60.0
    hook_timeout: float = 10.0
    pod_identity_timeout: float = 30.0
    driver_start_timeout: float = 30.0
    unavailable_retry_interval: float = 60.0
    initial_backoff: float = 0.1
    max_backoff: float = 10.0
    rejected_backoff: float = 60.0
    simulate: bool = False
    simulate_node: str = ""
    simulate_dir: Path | None = None
    log_format: str = "text"
    log_level: str = "info"
    metrics_address: str = "127.0.0.1:9400"
    otlp_endpoint: str = ""
    feature_file: Path | None = None
    profiles: tuple[Profile, ...] = ()
    drivers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    cdi_enabled: bool = False
    cdi_dir: Path = Path("/var/run/cdi")
    cdi_drivers: tuple[str, ...] = ()
    #: setting key → where its value came from (the file, ``env X`` or ``flag --x``), for
    #: errors found after loading (a driver name no installed driver has); a default has none
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    max_devices_per_resource: int = 10_000
    max_resources_per_driver: int = 64
    max_zombies_per_driver: int = 100
    edits_allowed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    resources: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    kubelet_dir: Path = Path("/var/lib/kubelet")
    dra_driver_names: Mapping[str, str] = field(default_factory=dict)
    dra_unhealthy: str = "taint"
    kubeconfig: Path | None = None

    @property
    def kubelet_socket(self) -> Path:
        return self.plugin_dir / "kubelet.sock"

    def driver_section(self, name: str) -> Mapping[str, Any]:
        return self.drivers.get(name, {})

    def source_of(self, key: str) -> str:
        """Where setting ``key`` was set (``config`` for a default); a key inside a
        section (``drivers.nvidia.migStrategy``) is where its section was set."""
        while key not in self.sources and "." in key:
            key = key.rpartition(".")[0]
        return self.sources.get(key, "config")

    def allowed_edits(self, driver: str) -> frozenset[str]:
        """The env names and container paths the container-edit policy lets ``driver`` use
        beyond its defaults (``containerEdits.allow``)."""
        return frozenset(self.edits_allowed.get(driver, ()))

    def api_of(self, resource: str) -> str:
        """How ``resource`` reaches the kubelet: ``devicePlugin`` unless configured ``dra``."""
        return self.resources.get(resource, {}).get("api", DEVICE_PLUGIN_API)

    @property
    def serves_dra(self) -> bool:
        """Whether any resource is configured to be served through DRA."""
        return any(self.api_of(name) == DRA_API for name in self.resources)

    def to_document(self, redact: bool = False) -> dict[str, Any]:
        """The config as a HostConfig YAML document (what ``devicehost config`` prints,
        with ``redact``: credentials in the OTLP endpoint hidden)."""
        doc: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND}
        for setting in SETTINGS:
            value = getattr(self, setting.attr)
            if redact and setting.attr == "otlp_endpoint" and value:
                value = redact_url(value)
            if setting.attr == "profiles":
                value = [p.to_document() for p in value]
            elif isinstance(value, Path):
                value = str(value)
            elif isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, Mapping):
                value = {
                    k: dict(v) if isinstance(v, Mapping) else v if isinstance(v, str) else list(v)
                    for k, v in value.items()
                }
            node = doc
            *parents, leaf = setting.key.split(".")
            for parent in parents:
                node = node.setdefault(parent, {})
            node[leaf] = value
        return doc


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "pluginDir",
        "plugin_dir",
        _absolute_path,
        "DEVICEHOST_PLUGIN_DIR",
        "the kubelet's device-plugin directory (kubelet.sock and our sockets)",
    ),
    Setting(
        "root",
        "root",
        _path,
        "DEVICEHOST_ROOT",
        "the host's / as mounted in this process, for sysfs and /dev discovery",
    ),
    Setting(
        "podResourcesSocket",
        "pod_resources_socket",
        _optional_path,
        "DEVICEHOST_POD_RESOURCES_SOCKET",
        "the kubelet's PodResources socket, for pod identity on spans (empty: off)",
    ),
    Setting(
        "nodeName",
        "node_name",
        _text,
        "DEVICEHOST_NODE_NAME",
        "this node's name, for k8s.node.name on spans",
    ),
    Setting(
        "podUid",
        "pod_uid",
        _pod_uid,
        "DEVICEHOST_POD_UID",
        "this pod's UID: DRA sockets named per pod, for rolling updates with surge",
    ),
    Setting(
        "pluginDirHandoverSeconds",
        "plugin_dir_handover_seconds",
        _seconds_or_never,
        "DEVICEHOST_PLUGIN_DIR_HANDOVER_SECONDS",
        "how long to wait for the devicehost already serving the device-plugin directory "
        "to stop (a rolling update's old pod), serving DRA and ready meanwhile; 0: refuse "
        "to start at once",
    ),
    Setting(
        "enabledDrivers",
        "enabled_drivers",
        _optional_name_list,
        "DEVICEHOST_DRIVERS",
        "serve only these drivers (comma-separated in env; default: every installed)",
    ),
    Setting(
        "disabledDrivers",
        "disabled_drivers",
        _name_list,
        "DEVICEHOST_DISABLE_DRIVERS",
        "never load these drivers (comma-separated in env)",
    ),
    Setting(
        "scanIntervalSeconds",
        "scan_interval",
        _positive_float,
        "DEVICEHOST_SCAN_INTERVAL",
        "seconds between full re-enumerations of a driver without a watch hook",
    ),
    Setting(
        "watchedScanIntervalSeconds",
        "watched_scan_interval",
        _positive_float,
        "DEVICEHOST_WATCHED_SCAN_INTERVAL",
        "seconds between safety re-enumerations of a driver whose watch hook reports "
        "changes itself",
    ),
    Setting(
        "podIdentityTimeoutSeconds",
        "pod_identity_timeout",
        _positive_float,
        "DEVICEHOST_POD_IDENTITY_TIMEOUT",
        "seconds an allocation's pod is looked for in PodResources (a pod on a busy node "
        "can take tens of seconds to be listed); then its spans go without, counted",
    ),
    Setting(
        "hookTimeoutSeconds",
        "hook_timeout",
        _positive_float,
        "DEVICEHOST_HOOK_TIMEOUT",
        "seconds a driver hook may run before the host answers without it",
    ),
    Setting(
        "driverStartTimeoutSeconds",
        "driver_start_timeout",
        _positive_float,
        "DEVICEHOST_DRIVER_START_TIMEOUT",
        "seconds a driver's worker process may take to import the driver (and, under "
        "--simulate, to build its simulated node) before it is restarted",
    ),
    Setting(
        "unavailableRetrySeconds",
        "unavailable_retry_interval",
        _seconds_or_never,
        "DEVICEHOST_UNAVAILABLE_RETRY",
        "seconds between tries of a driver that found none of its hardware, so hardware "
        "created after start (VFs a provisioning step makes) is served; 0: never",
    ),
    Setting(
        "registration.initialBackoffSeconds",
        "initial_backoff",
        _positive_float,
        None,
        "first registration retry delay",
    ),
    Setting(
        "registration.maxBackoffSeconds",
        "max_backoff",
        _positive_float,
        None,
        "longest registration retry delay while the kubelet is unreachable",
    ),
    Setting(
        "registration.rejectedBackoffSeconds",
        "rejected_backoff",
        _positive_float,
        None,
        "retry delay after the kubelet rejected a registration",
    ),
    Setting(
        "simulate",
        "simulate",
        _boolean,
        "DEVICEHOST_SIMULATE",
        "serve every driver on its simulated hardware",
    ),
    Setting(
        "simulateNode",
        "simulate_node",
        _text,
        "DEVICEHOST_SIMULATE_NODE",
        "with simulate: the machine to simulate, published or a driver's own "
        "(devicehost demo --list-nodes)",
    ),
    Setting(
        "simulateDir",
        "simulate_dir",
        _optional_path,
        "DEVICEHOST_SIMULATE_DIR",
        "with simulate: where the simulated node's tree is made (default: $TMPDIR, else "
        "/dev/shm); in a pod, a hostPath at the same path, so the runtime finds what "
        "answers name",
    ),
    Setting(
        "log.format",
        "log_format",
        _choice("text", "json"),
        "DEVICEHOST_LOG_FORMAT",
        "log format: text for humans, json for collectors",
    ),
    Setting(
        "log.level",
        "log_level",
        _choice("debug", "info", "warning", "error"),
        "DEVICEHOST_LOG_LEVEL",
        "log level",
    ),
    Setting(
        "metrics.address",
        "metrics_address",
        _address,
        "DEVICEHOST_METRICS_ADDRESS",
        "host:port for /metrics, /healthz and /readyz (empty: off)",
    ),
    Setting(
        "tracing.otlpEndpoint",
        "otlp_endpoint",
        _endpoint,
        "DEVICEHOST_OTLP_ENDPOINT",
        "OTLP endpoint for traces (OTEL_EXPORTER_OTLP_ENDPOINT also works; empty: off)",
    ),
    Setting(
        "labels.featureFile",
        "feature_file",
        _optional_path,
        "DEVICEHOST_FEATURE_FILE",
        "node-feature-discovery local feature file for the drivers' labels (empty: off)",
    ),
    Setting(
        "profiles",
        "profiles",
        parse_profiles,
        None,
        "per-node driver settings, chosen by node name pattern or driver labels",
    ),
    Setting(
        "drivers",
        "drivers",
        _driver_sections,
        None,
        "per-driver settings, passed to each driver's configure hook",
    ),
    Setting(
        "cdi.enabled",
        "cdi_enabled",
        _boolean,
        "DEVICEHOST_CDI_ENABLED",
        "write a CDI spec per resource and answer Allocate with CDI device names",
    ),
    Setting(
        "cdi.dir",
        "cdi_dir",
        _absolute_path,
        "DEVICEHOST_CDI_DIR",
        "with cdi.enabled: the runtime's CDI spec directory, as this process sees it",
    ),
    Setting(
        "cdi.drivers",
        "cdi_drivers",
        _name_list,
        "DEVICEHOST_CDI_DRIVERS",
        "with cdi.enabled: only these drivers' resources use CDI (empty: every driver)",
    ),
    Setting(
        "limits.devicesPerResource",
        "max_devices_per_resource",
        _count(1, 100_000),
        "DEVICEHOST_MAX_DEVICES_PER_RESOURCE",
        "a resource enumerated with more devices is refused whole; its last good list stays",
    ),
    Setting(
        "limits.resourcesPerDriver",
        "max_resources_per_driver",
        _count(1, 256),
        "DEVICEHOST_MAX_RESOURCES_PER_DRIVER",
        "a driver declaring more resources has the ones past this refused",
    ),
    Setting(
        "limits.zombiesPerDriver",
        "max_zombies_per_driver",
        _count(1, 100_000),
        "DEVICEHOST_MAX_ZOMBIES_PER_DRIVER",
        "a driver worker leaving more finished children unreaped (zombies) is restarted",
    ),
    Setting(
        "containerEdits.allow",
        "edits_allowed",
        _allowances,
        None,
        "per driver: env names and container paths the container-edit policy refuses by "
        "default that this driver may use",
    ),
    Setting(
        "resources",
        "resources",
        parse_resource_sections,
        None,
        "per resource: api: devicePlugin (the default) or dra, how the kubelet gets it "
        "(docs/dra.md)",
    ),
    Setting(
        "dra.kubeletDir",
        "kubelet_dir",
        _absolute_path,
        "DEVICEHOST_KUBELET_DIR",
        "the kubelet's directory, where DRA drivers' sockets go (plugins/, plugins_registry/)",
    ),
    Setting(
        "dra.driverNames",
        "dra_driver_names",
        _names,
        None,
        "per driver: its DRA driver name (default: <driver>.devicehost.io)",
    ),
    Setting(
        "dra.unhealthy",
        "dra_unhealthy",
        _choice("withdraw", "taint"),
        "DEVICEHOST_DRA_UNHEALTHY",
        "what a ResourceSlice does with an Unhealthy device: taint it NoSchedule (listed, "
        "never allocated; Kubernetes 1.37's device taints), or withdraw it",
    ),
    Setting(
        "dra.kubeconfig",
        "kubeconfig",
        _optional_path,
        "DEVICEHOST_KUBECONFIG",
        "the API server's kubeconfig for DRA (default: the pod's service account)",
    ),
)
_BY_KEY = {s.key: s for s in SETTINGS}


def _flatten(doc: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten nested sections into dotted keys, keeping ``drivers`` whole."""
    flat: dict[str, Any] = {}
    for key, value in doc.items():
        path = f"{prefix}{key}"
        if path not in _BY_KEY and isinstance(value, dict):
            if not any(k.startswith(path + ".") for k in _BY_KEY):
                flat[path] = value  # reported as unknown below
            else:
                flat.update(_flatten(value, path + "."))
        else:
            flat[path] = value
    return flat


def _read_config_text(path: Path) -> str:
    """The file's text, refusing what is not a small regular file *before* reading it: a
    FIFO would block start-up forever, ``/dev/zero`` would never end."""
    source = str(path)
    try:
        # O_NONBLOCK: opening a FIFO with no writer returns at once instead of hanging.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ConfigError(source, "", f"cannot read: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = _FILE_KINDS.get(stat.S_IFMT(mode), "not a regular file")
            raise ConfigError(source, "", f"is {kind}; expected a regular YAML file")
        with os.fdopen(fd, "rb", closefd=False) as stream:
            data = stream.read(MAX_CONFIG_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(
            source, "", f"is larger than {MAX_CONFIG_BYTES // 1024} KiB; not a HostConfig"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(source, "", f"is not UTF-8 text (byte {exc.start})") from None


_FILE_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def _from_file(path: Path) -> dict[str, Any]:
    import yaml  # only when there is a file to read

    source = str(path)
    stream = io.StringIO(_read_config_text(path))
    stream.name = source  # YAML errors then name the file, not "<unicode string>"
    try:
        doc = yaml.safe_load(stream)
    except yaml.YAMLError as exc:
        raise ConfigError(source, "", f"not valid YAML: {exc}") from None
    except (ValueError, RecursionError) as exc:  # a 5000-digit number, nesting too deep
        raise ConfigError(source, "", f"not a usable YAML document: {exc}") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ConfigError(source, "", "expected a HostConfig mapping at the top level")
    # Both are required, so a later version of the format can never be misread as this one.
    header = f"every config file starts with 'apiVersion: {API_VERSION}' and 'kind: {KIND}'"
    for key, expected in (("apiVersion", API_VERSION), ("kind", KIND)):
        value = doc.pop(key, None)
        if value is None:
            raise ConfigError(source, key, f"missing; {header}")
        if value != expected:
            raise ConfigError(source, key, f"expected {expected!r}, got {value!r}; {header}")
    values: dict[str, Any] = {}
    for key, raw in _flatten(doc).items():
        setting = _BY_KEY.get(key)
        if setting is None:
            raise ConfigError(source, key, f"unknown key; known keys: {', '.join(_BY_KEY)}")
        values[setting.attr] = _parse(setting, raw, source)
    return values


def _sourced(values: dict[str, Any], source: str) -> dict[str, tuple[Any, str]]:
    return {attr: (value, source) for attr, value in values.items()}


def _parse(setting: Setting, raw: Any, source: str) -> Any:
    try:
        return setting.parse(raw)
    except ValueError as exc:
        raise ConfigError(source, setting.key, str(exc)) from None


def _from_env(env: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    values: dict[str, tuple[Any, str]] = {}
    for setting in SETTINGS:
        if setting.env and setting.env in env:
            source = f"env {setting.env}"
            values[setting.attr] = (_parse(setting, env[setting.env], source), source)
    return values


def load_config(
    path: Path | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
    flag_names: Mapping[str, str] | None = None,
) -> HostConfig:
    """Build the effective config. ``flags`` maps setting attributes to flag values
    (``None`` meaning "not given"), and ``flag_names`` each attribute to its flag as the
    command line spells it (``--drivers``), for errors; a config path may also come from
    ``DEVICEHOST_CONFIG``. Each value's source is kept in ``HostConfig.sources``.
    """
    env = os.environ if env is None else env
    if path is None and env.get("DEVICEHOST_CONFIG"):
        path = Path(env["DEVICEHOST_CONFIG"])
    values = _sourced(_from_file(path), str(path)) if path else {}
    values.update(_from_env(env))
    by_attr = {s.attr: s for s in SETTINGS}
    for attr, raw in (flags or {}).items():
        if raw is not None:
            flag = (flag_names or {}).get(attr) or f"--{attr.replace('_', '-')}"
            values[attr] = (_parse(by_attr[attr], raw, f"flag {flag}"), f"flag {flag}")
    # The standard variables, the traces-specific one first (OTLP exporter specification).
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        if "otlp_endpoint" not in values and env.get(name):
            endpoint = by_attr["otlp_endpoint"]
            values["otlp_endpoint"] = (_parse(endpoint, env[name], f"env {name}"), f"env {name}")
    if not values.get("node_name", ("", ""))[0] and env.get("NODE_NAME"):
        values["node_name"] = (env["NODE_NAME"], "env NODE_NAME")
    sources = {by_attr[attr].key: source for attr, (_, source) in values.items()}
    chosen = {attr: value for attr, (value, _) in values.items()}
    return dataclasses.replace(HostConfig(), **chosen, sources=sources)


def with_overrides(
    config: HostConfig, overrides: Mapping[str, Any], source: str = "overrides"
) -> HostConfig:
    """``config`` with ``overrides`` applied, keyed as in the YAML file
    (docs/configuration.md): ``pluginDir``, ``enabledDrivers``, ``simulateNode``, nested
    sections as mappings (``registration={"maxBackoffSeconds": 1}``) or dotted keys, and
    ``drivers={"template": {...}}``. Values are checked exactly as a file's would be.

    HostConfig field names (``plugin_dir``) are accepted too and applied as given, so
    tests written against the dataclass keep working.
    """
    fields = {f.name for f in dataclasses.fields(HostConfig)}
    yaml_keys: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    for key, value in overrides.items():
        if key in fields and key not in _BY_KEY:
            raw[key] = value
        else:
            yaml_keys[key] = value
    values: dict[str, Any] = {}
    for key, value in _flatten(yaml_keys).items():
        setting = _BY_KEY.get(key)
        if setting is None:
            raise ConfigError(source, key, f"unknown key; known keys: {', '.join(_BY_KEY)}")
        values[setting.attr] = _parse(setting, value, source)
    return dataclasses.replace(config, **raw, **values)
