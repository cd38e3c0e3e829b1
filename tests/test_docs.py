"""The contract stays documented and tested: a hook, setting or flag without docs or without
a test fails here (cheap, and it keeps the documentation honest)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from devicehost.cli import _FLAGS
from devicehost.config import SETTINGS
from devicehost.hookspecs import HOOK_NAMES

ROOT = Path(__file__).resolve().parent.parent
HOOKS_DOC = (ROOT / "docs" / "hooks.md").read_text()
CONFIG_DOC = (ROOT / "docs" / "configuration.md").read_text()
HOOK_TESTS = {
    node.name
    for node in ast.walk(ast.parse((ROOT / "tests" / "test_hooks.py").read_text()))
    if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
}


@pytest.mark.parametrize("hook", HOOK_NAMES)
def test_every_hook_is_documented(hook):
    """docs/hooks.md has a section for the hook."""
    assert f"### {hook}\n" in HOOKS_DOC


@pytest.mark.parametrize("hook", HOOK_NAMES)
def test_every_hook_has_its_own_test(hook):
    """tests/test_hooks.py has a test named after the hook."""
    short = hook.removeprefix("devicehost_")
    assert any(name.startswith(f"test_{short}_") for name in HOOK_TESTS), (
        f"add a test_{short}_… to tests/test_hooks.py"
    )


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.key)
def test_every_setting_is_documented(setting):
    """docs/configuration.md names the key, its env var and its flag."""
    assert f"`{setting.key}`" in CONFIG_DOC
    if setting.env:
        assert f"`{setting.env}`" in CONFIG_DOC
    if setting.attr in _FLAGS:
        assert f"`{_FLAGS[setting.attr][0]}`" in CONFIG_DOC


def test_allocate_contract_is_stated_alike_everywhere():
    """One allocate contract: hooks.md, the hook's docstring, the template and the battery
    all name the refusal of an unknown ID as UnknownDevice(resource, device_id), the
    exception's own signature."""
    import inspect

    from devicehost import UnknownDevice, hookspecs
    from devicehost.testing import conformance

    assert list(inspect.signature(UnknownDevice).parameters) == ["resource", "device_id"]
    template = (ROOT / "drivers/_template/devicehost_template/driver.py").read_text()
    for where, text in (
        ("docs/hooks.md", HOOKS_DOC),
        ("devicehost_allocate's docstring", hookspecs.devicehost_allocate.__doc__ or ""),
        ("the template driver", template),
        ("check_driver's module docstring", conformance.__doc__ or ""),
    ):
        assert "UnknownDevice(resource, device_id)" in text, where
    assert "has already refused unknown IDs" not in HOOKS_DOC


def test_configuration_says_apiversion_and_kind_are_required():
    """docs/configuration.md says a file needs apiVersion and kind, outside any example."""
    prose = CONFIG_DOC.split("## Example")[0]
    assert "both lines are required" in prose
    assert "apiVersion: devicehost/v1\nkind: HostConfig\n" in prose
