"""HostConfig from file, env and flags: precedence, validation, the effective document."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from devicehost.config.host_config import HostConfig, load_config
from devicehost.errors import ConfigError

HEADER = "apiVersion: devicehost/v1\nkind: HostConfig\n"


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "host.yaml"
    path.write_text(HEADER + body)
    return path


def test_defaults_without_any_source():
    """With no file, env or flag, the kubelet's standard paths and 10 s intervals apply."""
    config = load_config(env={})
    assert config.plugin_dir == Path("/var/lib/kubelet/device-plugins")
    assert config.kubelet_socket == Path("/var/lib/kubelet/device-plugins/kubelet.sock")
    assert config.scan_interval == 10.0
    assert config.metrics_address == "127.0.0.1:9400"
    assert config.enabled_drivers is None


def test_flags_beat_env_beat_file(tmp_path):
    """A flag overrides the env var, which overrides the file."""
    path = write(tmp_path, "scanIntervalSeconds: 30\nhookTimeoutSeconds: 7\nroot: /from-file\n")
    env = {"DEVICEHOST_SCAN_INTERVAL": "20", "DEVICEHOST_ROOT": "/from-env"}
    config = load_config(path, env=env, flags={"scan_interval": "5", "root": None})
    assert config.scan_interval == 5.0
    assert config.root == Path("/from-env")
    assert config.hook_timeout == 7.0


def test_config_path_from_env(tmp_path):
    """DEVICEHOST_CONFIG names the file when --config is not given."""
    path = write(tmp_path, "nodeName: node-7\n")
    assert load_config(env={"DEVICEHOST_CONFIG": str(path)}).node_name == "node-7"


def test_nested_sections_and_driver_sections(tmp_path):
    """Nested keys (registration, log, metrics) and per-driver sections are read."""
    path = write(
        tmp_path,
        "registration:\n  maxBackoffSeconds: 3\nlog:\n  format: json\n"
        "drivers:\n  nvidia:\n    migStrategy: mixed\n",
    )
    config = load_config(path, env={})
    assert config.max_backoff == 3.0
    assert config.log_format == "json"
    assert config.driver_section("nvidia") == {"migStrategy": "mixed"}
    assert config.driver_section("ascend") == {}


def test_unknown_key_names_file_and_key(tmp_path):
    """An unknown key fails with the file, the key path and the known keys."""
    path = write(tmp_path, "registration:\n  maxBackof: 3\n")
    with pytest.raises(ConfigError) as failed:
        load_config(path, env={})
    assert str(failed.value).startswith(
        f"{path}: registration.maxBackof: unknown key; known keys: pluginDir, root,"
    )


def test_bad_value_names_key_and_expectation(tmp_path):
    """A bad value fails with the key path and what was expected."""
    path = write(tmp_path, "scanIntervalSeconds: -1\n")
    with pytest.raises(ConfigError) as failed:
        load_config(path, env={})
    assert str(failed.value) == (
        f"{path}: scanIntervalSeconds: expected a positive number of seconds, got -1"
    )


def test_bad_env_value_names_the_variable():
    """A bad env value names the variable."""
    with pytest.raises(ConfigError) as failed:
        load_config(env={"DEVICEHOST_LOG_FORMAT": "xml"})
    assert str(failed.value) == (
        "env DEVICEHOST_LOG_FORMAT: log.format: expected one of text, json, got 'xml'"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "apiVersion: devicehost/v2\nkind: HostConfig\n",
            "apiVersion: expected 'devicehost/v1', got 'devicehost/v2'",
        ),
        ("apiVersion: devicehost/v1\nkind: Other\n", "kind: expected 'HostConfig', got 'Other'"),
        ("- a\n- b\n", "expected a HostConfig mapping at the top level"),
        (
            "root: /host\n",
            "apiVersion: missing; every config file starts with 'apiVersion: devicehost/v1' "
            "and 'kind: HostConfig'",
        ),
        ("apiVersion: devicehost/v1\n", "kind: missing; every config file starts with"),
        ("a: [\n", "not valid YAML"),
    ],
)
def test_wrong_document_is_refused(tmp_path, text, message):
    """Wrong apiVersion, kind, shape or YAML syntax each fail with what was expected."""
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as failed:
        load_config(path, env={})
    assert message in str(failed.value)


def test_missing_file_is_a_config_error(tmp_path):
    """A config path that does not exist says so."""
    with pytest.raises(ConfigError) as failed:
        load_config(tmp_path / "absent.yaml", env={})
    assert str(failed.value).endswith("absent.yaml: cannot read: No such file or directory")


def test_otel_endpoint_and_node_name_fall_back_to_standard_env():
    """OTEL_EXPORTER_OTLP_ENDPOINT and NODE_NAME are honoured when ours are unset."""
    config = load_config(
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4317", "NODE_NAME": "n1"}
    )
    assert config.otlp_endpoint == "http://jaeger:4317"
    assert config.node_name == "n1"


def test_effective_document_loads_back_to_the_same_config(tmp_path):
    """What `devicehost config` prints is a valid HostConfig equal to the input."""
    path = write(tmp_path, "drivers:\n  rdma:\n    pools: []\nenabledDrivers: [rdma]\n")
    config = load_config(path, env={})
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(config.to_document()))
    assert load_config(again, env={}) == config
    assert isinstance(config, HostConfig)


# -- inputs that must be a clear config error, never a traceback, a hang or a burnt CPU --


@pytest.mark.parametrize(
    ("body", "key", "problem"),
    [
        ("metrics:\n  address: 127.0.0.1:99999\n", "metrics.address", "port 99999 is out of range"),
        ("metrics:\n  address: localhost\n", "metrics.address", "expected host:port"),
        ("pluginDir: plugins\n", "pluginDir", "expected an absolute path, got 'plugins'"),
        ("podResourcesSocket: kubelet.sock\n", "podResourcesSocket", "expected an absolute path"),
        ("scanIntervalSeconds: 0\n", "scanIntervalSeconds", "expected a positive number"),
        ("scanIntervalSeconds: 1.0e-9\n", "scanIntervalSeconds", "expected between 0.01 and"),
        ("hookTimeoutSeconds: 0.001\n", "hookTimeoutSeconds", "expected between 0.01 and"),
        ("registration:\n  maxBackoffSeconds: 1.0e+300\n", "registration.maxBackoffSeconds",
         "expected between 0.01 and 86400 seconds"),
    ],
)  # fmt: skip
def test_values_that_would_fail_later_are_refused_now(tmp_path, body, key, problem):
    """Ports out of range, relative socket paths and intervals that would spin a CPU (or
    overflow a timer) are refused at load time, naming the file and the key."""
    path = write(tmp_path, body)
    with pytest.raises(ConfigError) as failed:
        load_config(path, env={})
    assert str(failed.value).startswith(f"{path}: {key}: ")
    assert problem in str(failed.value)


def test_a_fifo_config_path_is_refused_without_blocking(tmp_path):
    """A FIFO (nothing writing to it) is refused at once instead of blocking start-up."""
    fifo = tmp_path / "host.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"is a FIFO \(named pipe\); expected a regular"):
        load_config(fifo, env={})


@pytest.mark.parametrize(
    ("path", "kind"), [("/dev/zero", "a character device"), ("/", "a directory")]
)
def test_a_device_or_directory_config_path_is_refused(path, kind):
    """/dev/zero (endless) and a directory are refused by type, never read."""
    with pytest.raises(ConfigError, match=f"is {kind}; expected a regular YAML file"):
        load_config(Path(path), env={})


def test_a_huge_config_file_is_refused(tmp_path):
    """A file over 1 MiB is not a HostConfig: refused before parsing."""
    path = write(tmp_path, "# " + "x" * (1 << 20) + "\n")
    with pytest.raises(ConfigError, match="is larger than 1024 KiB"):
        load_config(path, env={})


def test_env_and_flags_get_the_same_checks():
    """The checks apply to env vars and flags too, naming them."""
    with pytest.raises(
        ConfigError, match=r"env DEVICEHOST_METRICS_ADDRESS: metrics\.address: port"
    ):
        load_config(env={"DEVICEHOST_METRICS_ADDRESS": ":70000"})
    with pytest.raises(ConfigError, match="flag --plugin-dir: pluginDir: expected an absolute"):
        load_config(env={}, flags={"plugin_dir": "rel/dir"})


def test_yaml_syntax_errors_name_the_file(tmp_path):
    """A YAML syntax error points at the file, line and column."""
    path = write(tmp_path, "log: [unclosed\n")
    with pytest.raises(ConfigError) as failed:
        load_config(path, env={})
    assert f'in "{path}", line' in str(failed.value)


@pytest.mark.parametrize(
    "endpoint",
    ["http://jaeger:4317", "https://user:pw@collector.example:4318/v1/traces", "jaeger:4317", ""],
)
def test_an_otlp_endpoint_that_is_a_url_is_taken(endpoint):
    """http(s) URLs, with credentials or a path, and bare host:port (sent as http) pass."""
    config = load_config(env={"DEVICEHOST_OTLP_ENDPOINT": endpoint})
    assert config.otlp_endpoint == endpoint


@pytest.mark.parametrize(
    "endpoint", ["not a url", "ftp://collector:21", "http://", "http://jaeger:99999", "://x"]
)
def test_an_otlp_endpoint_that_is_no_url_is_refused_naming_the_key(tmp_path, endpoint):
    """An endpoint with spaces, another scheme, no host or a port out of range is refused
    at load, naming the file and tracing.otlpEndpoint."""
    path = write(tmp_path, f"tracing:\n  otlpEndpoint: {endpoint!r}\n")
    with pytest.raises(ConfigError, match=rf"{path}: tracing\.otlpEndpoint: expected an OTLP URL"):
        load_config(path, env={})


def test_an_otlp_endpoint_with_a_nul_is_refused_naming_the_key(tmp_path):
    """A NUL in the endpoint (a YAML "\\0" escape) is refused at load naming the key; it
    used to pass, and start-up died with a traceback spawning the span exporter."""
    path = tmp_path / "nul.yaml"
    path.write_text(
        'apiVersion: devicehost/v1\nkind: HostConfig\ntracing:\n  otlpEndpoint: "http://jaeger\\0:4317"\n'
    )
    with pytest.raises(ConfigError, match=rf"{path}: tracing\.otlpEndpoint: expected an OTLP URL"):
        load_config(path, env={})


def test_the_standard_otlp_variables_get_the_same_check():
    """OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is checked like the setting, naming the variable."""
    with pytest.raises(ConfigError, match="env OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: tracing"):
        load_config(env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "not a url"})


def test_a_relative_cdi_dir_is_refused(tmp_path):
    """cdi.dir must be absolute: the runtime reads specs from an absolute directory."""
    path = write(tmp_path, "cdi:\n  dir: run/cdi\n")
    with pytest.raises(ConfigError, match=rf"{path}: cdi\.dir: expected an absolute path"):
        load_config(path, env={})


def test_each_value_keeps_where_it_was_set(tmp_path):
    """HostConfig.sources names the file, env var or flag (as the command line spells it)
    each value came from; a key inside a section is where its section was set; a default
    is "config"."""
    path = write(tmp_path, "drivers:\n  nvidia: {}\nscanIntervalSeconds: 3\n")
    config = load_config(
        path,
        env={"DEVICEHOST_DISABLE_DRIVERS": "rdma"},
        flags={"enabled_drivers": "nvidia"},
        flag_names={"enabled_drivers": "--drivers"},
    )
    assert config.source_of("enabledDrivers") == "flag --drivers"
    assert config.source_of("disabledDrivers") == "env DEVICEHOST_DISABLE_DRIVERS"
    assert config.source_of("scanIntervalSeconds") == str(path)
    assert config.source_of("drivers.nvidia.migStrategy") == str(path)
    assert config.source_of("pluginDir") == "config"


def test_a_resource_is_a_device_plugin_unless_configured_dra(tmp_path):
    path = write(tmp_path, "resources:\n  nvidia.com/gpu: {api: dra}\n")
    config = load_config(path, env={})
    assert config.api_of("nvidia.com/gpu") == "dra"
    assert config.api_of("rdma/hca") == "devicePlugin"
    assert config.to_document()["resources"] == {"nvidia.com/gpu": {"api": "dra"}}


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (
            "resources:\n  nvidia.com/gpu: {api: csi}\n",
            "resource 'nvidia.com/gpu': api must be one of devicePlugin, dra, got 'csi'",
        ),
        (
            "resources:\n  nvidia.com/gpu: {apis: dra}\n",
            "resource 'nvidia.com/gpu': unknown key 'apis'; known keys: api",
        ),
        ("resources:\n  nvidia.com/gpu: dra\n", "expected a mapping for resource 'nvidia.com/gpu'"),
    ],
)
def test_a_bad_resource_setting_names_the_resource(tmp_path, body, problem):
    path = write(tmp_path, body)
    with pytest.raises(ConfigError) as failed:
        load_config(path, env={})
    assert str(failed.value).startswith(f"{path}: resources: {problem}")
