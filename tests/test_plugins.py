"""Driver and policy discovery through real entry points, each loaded in isolation."""

from __future__ import annotations

import logging

from devicehost.drivers.discovery import DriverStatus, load_plugins
from support import SCRIPTED

RES = "test.example/dev"


def status(plugins, name):
    info = next(i for i in plugins.infos if i.name == name)
    return info.status, info.reason


def test_missing_vendor_library_marks_driver_unavailable(install):
    """A driver importing a module that is not installed is unavailable, with that reason."""
    install("devicehost-vendor", drivers={"vendor": "testdrivers.needs_vendor"})
    plugins = load_plugins(allow=["vendor"])
    assert status(plugins, "vendor") == (
        DriverStatus.UNAVAILABLE,
        "vendor library 'vendor_sdk_not_installed' is not installed",
    )
    assert plugins.drivers == []


def test_import_error_is_logged_with_traceback_and_skipped(install, caplog):
    """A driver whose import raises is failed, logged with its traceback; others load."""
    caplog.set_level(logging.ERROR, logger="devicehost")
    install("devicehost-broken", drivers={"broken": "testdrivers.broken"})
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    plugins = load_plugins(allow=["broken", "alpha"])
    state, reason = status(plugins, "broken")
    assert state is DriverStatus.FAILED
    assert reason == (
        "import of testdrivers.broken failed: RuntimeError: this driver module is broken on purpose"
    )
    record = next(r for r in caplog.records if "'broken'" in r.getMessage())
    assert record.exc_info is not None
    assert [d.name for d in plugins.drivers] == ["alpha"]


def test_invalid_hook_signature_fails_with_pluggy_message(install):
    """A hook with a parameter the spec lacks: failed, pluggy's message names driver and hook."""
    install("devicehost-bad", drivers={"bad": "testdrivers.bad_hooks"})
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    plugins = load_plugins(allow=["bad", "alpha"])
    state, reason = status(plugins, "bad")
    assert state is DriverStatus.FAILED
    assert "Plugin 'bad' for hook 'devicehost_enumerate'" in reason
    assert "colour" in reason
    assert [d.name for d in plugins.drivers] == ["alpha"]
    assert plugins.pm.get_plugin("bad") is None


def test_unknown_hook_name_fails_and_lists_the_hooks(install):
    """A misspelt hook name is refused with the list of real hooks."""
    install("devicehost-typo", drivers={"typo": "testdrivers.unknown_hook"})
    state, reason = status(load_plugins(allow=["typo"]), "typo")
    assert state is DriverStatus.FAILED
    assert reason.startswith("plugin 'typo': unknown hook 'devicehost_enumerat'; the hooks are:")
    assert "devicehost_enumerate" in reason


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
    from devicehost.config import load_config

    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    install("devicehost-beta", drivers={"beta": SCRIPTED})
    config = load_config(
        env={"DEVICEHOST_DRIVERS": "alpha,beta", "DEVICEHOST_DISABLE_DRIVERS": "alpha"}
    )
    plugins = load_plugins(allow=config.enabled_drivers, deny=config.disabled_drivers)
    assert [d.name for d in plugins.drivers] == ["beta"]


def test_handle_calls_only_its_own_driver(install):
    """Each driver's handle reaches its own hooks, not the other driver's."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    install("devicehost-beta", drivers={"beta": SCRIPTED})
    plugins = load_plugins(allow=["alpha", "beta"])
    alpha, beta = plugins.drivers
    alpha.call(
        "devicehost_configure",
        config={"resources": {"test.example/a": 1}},
        root="/",
        simulated=False,
    )
    assert alpha.call("devicehost_resources") == [[_spec("test.example/a")]]
    assert beta.plugin.calls == []


def _spec(name):
    from devicehost import ResourceSpec

    return ResourceSpec(name=name)


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
