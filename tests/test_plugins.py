"""Driver and policy discovery through real entry points, each loaded in isolation."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

import pytest

from devicehost.drivers.discovery import DriverStatus, load_plugins
from devicehost.errors import ConfigError
from support import SCRIPTED, modules_after

RES = "test.example/dev"


def status(plugins, name):
    info = next(i for i in plugins.infos if i.name == name)
    return info.status, info.reason


def started(host_config, *names):
    """Start the named drivers as ``devicehost drivers`` does (each in its own worker) and
    return the host once each has come up or failed."""
    from devicehost.host import Host

    host = Host(replace(host_config, enabled_drivers=names))

    async def run():
        try:
            await host.prepare(scan=False)
        finally:
            await host.stop()

    asyncio.run(run())
    return host


def test_missing_vendor_library_marks_driver_unavailable(install, host_config):
    """A driver importing a module that is not installed is unavailable, with that reason."""
    install("devicehost-vendor", drivers={"vendor": "testdrivers.needs_vendor"})
    host = started(host_config, "vendor")
    assert status(host.plugins, "vendor") == (
        DriverStatus.UNAVAILABLE,
        "vendor library 'vendor_sdk_not_installed' is not installed",
    )
    assert host.resources == {}


def test_import_error_is_logged_with_traceback_and_skipped(install, host_config, caplog):
    """A driver whose import raises is down with the error, its traceback in the log; the
    others load."""
    caplog.set_level(logging.INFO, logger="devicehost")
    install("devicehost-broken", drivers={"broken": "testdrivers.broken"})
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    host = started(host_config, "broken", "alpha")
    state, reason = status(host.plugins, "broken")
    assert state in (DriverStatus.RESTARTING, DriverStatus.CRASH_LOOPING)
    assert reason == (
        "driver 'broken', hook import: import of testdrivers.broken failed: RuntimeError: "
        "this driver module is broken on purpose"
    )
    logged = [r.getMessage() for r in caplog.records if r.name == "devicehost.driver.broken"]
    assert any("Traceback" in line for line in logged)
    assert status(host.plugins, "alpha") == (DriverStatus.ACTIVE, "")


def test_invalid_hook_signature_fails_with_pluggy_message(install, host_config):
    """A hook with a parameter the spec lacks: refused, pluggy's message names driver and
    hook; the other driver is unaffected."""
    install("devicehost-bad", drivers={"bad": "testdrivers.bad_hooks"})
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    host = started(host_config, "bad", "alpha")
    state, reason = status(host.plugins, "bad")
    assert state is DriverStatus.FAILED
    assert "Plugin 'bad' for hook 'devicehost_enumerate'" in reason
    assert "colour" in reason
    assert status(host.plugins, "alpha") == (DriverStatus.ACTIVE, "")


def test_unknown_hook_name_fails_and_lists_the_hooks(install, host_config):
    """A misspelt hook name is refused with the list of real hooks."""
    install("devicehost-typo", drivers={"typo": "testdrivers.unknown_hook"})
    state, reason = status(started(host_config, "typo").plugins, "typo")
    assert state is DriverStatus.FAILED
    assert reason.startswith("plugin 'typo': unknown hook 'devicehost_enumerat'; the hooks are:")
    assert "devicehost_enumerate" in reason


def test_unknown_enabled_driver_is_a_config_error_listing_installed(install):
    """A typo in the enabled-drivers list is an error naming the installed drivers, never a
    host that silently serves nothing."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    with pytest.raises(ConfigError) as failed:
        load_plugins(allow=["alpah"])
    assert "no installed driver is named 'alpah'" in str(failed.value)
    assert "alpha" in str(failed.value).split("installed: ")[1]


def test_same_entry_point_name_in_two_distributions_lists_both(install):
    """Two distributions using one entry-point name are both listed, the conflict named."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    install("devicehost-alpha-fork", drivers={"alpha": SCRIPTED})
    plugins = load_plugins(allow=["alpha"])
    listed = [(i.distribution, i.status) for i in plugins.infos if i.name == "alpha"]
    assert listed == [
        ("devicehost-alpha", DriverStatus.ACTIVE),
        ("devicehost-alpha-fork", DriverStatus.FAILED),
    ]
    conflict = next(i for i in plugins.infos if i.distribution == "devicehost-alpha-fork")
    assert "also used by devicehost-alpha" in conflict.reason


def test_allow_and_deny_lists_filter_by_name(install):
    """Drivers outside the allow list or inside the deny list are disabled, with why."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    install("devicehost-beta", drivers={"beta": SCRIPTED})
    install("devicehost-gamma", drivers={"gamma": SCRIPTED})
    plugins = load_plugins(allow=["alpha", "beta"], deny=["beta"])
    assert [d.name for d in plugins.drivers] == ["alpha"]
    assert status(plugins, "beta") == (
        DriverStatus.DISABLED,
        "blocked by the disabled-drivers list",
    )
    assert status(plugins, "gamma") == (DriverStatus.DISABLED, "not in the enabled-drivers list")


def test_env_vars_select_drivers(install, monkeypatch, tmp_path):
    """DEVICEHOST_DRIVERS and DEVICEHOST_DISABLE_DRIVERS reach discovery through the config."""
    from devicehost.config.host_config import load_config

    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    install("devicehost-beta", drivers={"beta": SCRIPTED})
    config = load_config(
        env={"DEVICEHOST_DRIVERS": "alpha,beta", "DEVICEHOST_DISABLE_DRIVERS": "alpha"}
    )
    plugins = load_plugins(allow=config.enabled_drivers, deny=config.disabled_drivers)
    assert [d.name for d in plugins.drivers] == ["beta"]


def test_policy_plugin_wraps_every_drivers_allocate(install, run_host, kubelet):
    """A site policy plugin adds its mount to every container of every driver."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    install("devicehost-beta", drivers={"beta": SCRIPTED})
    install("site-policy", policies={"site": "testdrivers.site_policy"})
    run_host(
        enabled_drivers=("alpha", "beta"),
        drivers={
            "alpha": {"resources": {"test.example/a": 1}},
            "beta": {"resources": {"test.example/b": 1}, "prefix": "b"},
        },
    )
    for resource, device in (("test.example/a", "dev-0"), ("test.example/b", "b-0")):
        kubelet.wait_registered(resource)
        container = kubelet.allocate(resource, [[device]])[0]
        mounts = [(m.host_path, m.container_path) for m in container.mounts]
        assert ("/etc/site/ca.pem", "/etc/ssl/site-ca.pem") in mounts
        assert container.envs["SCRIPTED_DEVICES"] == device


def test_policy_that_answers_instead_of_wrapping_is_refused(install):
    """A policy plugin with a non-wrapper hook is refused, so it cannot hijack answers."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    install("bad-policy", policies={"hijack": "testdrivers.answering_policy"})
    plugins = load_plugins(allow=["alpha"])
    state, reason = status(plugins, "hijack")
    assert state is DriverStatus.FAILED
    assert reason == (
        "policy plugin 'hijack' implements devicehost_allocate without "
        "wrapper=True; policies may only wrap driver hooks"
    )
    assert plugins.pm.get_plugin("policy:hijack") is None


def test_a_worker_imports_neither_grpc_nor_opentelemetry():
    """A worker forked from a fresh zygote carries only the zygote's imports (devicehost's
    model, pluggy, the worker's code) and its driver: gRPC, OpenTelemetry and the metadata
    reader stay in the host (memory, start-up). test_zygote.py checks the same of workers
    forked by `devicehost run`."""
    loaded, _ = modules_after(
        "import devicehost.drivers.zygote, devicehost.drivers.worker, devicehost_nvidia.driver"
    )
    tops = {m.split(".")[0] for m in loaded}
    assert not tops & {"grpc", "opentelemetry", "importlib_metadata", "prometheus_client"}


def test_name_and_version_come_from_the_metadata_headers_only():
    """The description after the headers may quote header lines; they are not the
    distribution's own (core metadata: headers end at the first blank line)."""
    from devicehost.system.entry_points import name_and_version

    metadata = (
        "Metadata-Version: 2.1\nName: devicehost-acme\nVersion: 2.3.1\n"
        "Summary: a driver; Version: 9 is not its version\n\n"
        "Name: example\nVersion: 0.0.1\n"
    )
    assert name_and_version(metadata) == ("devicehost-acme", "2.3.1")
    assert name_and_version("Metadata-Version: 2.1\n") == ("?", "?")


def test_discovery_lists_drivers_without_the_email_parser():
    """Listing drivers reads two header lines; importing the email parser that
    Distribution.metadata uses would cost every cold start ~15 ms."""

    loaded, run = modules_after(
        "from devicehost.drivers.discovery import load_plugins; "
        "print(sorted(i.version for i in load_plugins().drivers))"
    )
    versions = run.stdout.splitlines()[0]
    assert "?" not in versions and "email.parser" not in loaded


def test_the_host_reads_no_package_metadata_with_tracing_off():
    """devicehost's own version (package metadata, the email parser: ~6 ms of every cold
    start) goes only on spans; with tracing off the host never reads it."""
    loaded, _ = modules_after(
        "import devicehost.cli.main, devicehost.host; "
        "from devicehost.config.host_config import HostConfig; "
        "from devicehost.telemetry.facade import Telemetry; "
        "Telemetry.from_config(HostConfig())"
    )
    assert "email.parser" not in loaded


def test_a_host_with_the_default_config_loads_only_what_it_uses():
    """A host built with CDI, node labels and DRA off, and handed the zygote's listing,
    loads neither those modules nor the metadata reader, nor tenacity (needed only once a
    registration or a worker is retried), nor the Kubernetes client: each would only
    lengthen every start."""
    loaded, _ = modules_after(
        "import asyncio\n"
        "from devicehost.config.host_config import HostConfig\n"
        "from devicehost.drivers.discovery import Listing, load_plugins\n"
        "from devicehost.host import Host\n"
        "async def build():\n"
        "    Host(HostConfig(metrics_address='', pod_resources_socket=''))\n"
        "    load_plugins(listing=Listing())\n"
        "asyncio.run(build())"
    )
    assert not loaded & {
        "devicehost.edits.cdi",
        "devicehost.node.labels",
        "devicehost.kubelet.dra.face",
        "lightkube",
        "importlib_metadata",
        "tenacity",
    }
