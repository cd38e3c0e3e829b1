"""The contract stays documented and tested: a hook, setting or flag without docs or without
a test fails here (cheap, and it keeps the documentation honest)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from devicehost.cli.main import _FLAGS
from devicehost.config.host_config import SETTINGS, HostConfig
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


REFERENCE = (ROOT / "docs" / "reference.md").read_text()


def _public_names() -> list[tuple[str, object]]:
    """Every public name a driver author uses: the package's, the kit's, sysfs's, and the
    types the kubelet stand-in returns."""
    import devicehost
    import devicehost.testing as kit
    from devicehost import sysfs
    from devicehost.testing.kubelet import PluginOptions, Registration

    names = [(n, getattr(devicehost, n)) for n in devicehost.__all__ if n != "__version__"]
    names += [(n, getattr(kit, n)) for n in kit.__all__]
    names += [(n, getattr(sysfs, n)) for n in sysfs.__all__]
    return [*names, ("Registration", Registration), ("PluginOptions", PluginOptions)]


def _parameters(function: object) -> list[str]:
    import inspect

    try:
        signature = inspect.signature(function)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return []
    return [p for p in signature.parameters if p not in ("self", "cls")]


def _parts(obj: object) -> list[str]:
    """What a name's section must mention: fields, constructor and function parameters,
    enum members, public methods and properties (with their parameters)."""
    import dataclasses
    import enum
    import inspect

    if not inspect.isclass(obj):
        return _parameters(obj) if callable(obj) and inspect.isfunction(obj) else []
    parts: list[str] = []
    if issubclass(obj, enum.Enum):
        return [member.name for member in obj]
    if dataclasses.is_dataclass(obj):
        parts += [f.name for f in dataclasses.fields(obj)]
    elif "__init__" in vars(obj):
        parts += [p for p in _parameters(obj.__init__) if p not in ("args", "kwargs")]
    for name, member in vars(obj).items():
        if name.startswith("_") or name in parts:
            continue
        if isinstance(member, property) or inspect.isfunction(member):
            parts.append(name)
        if inspect.isfunction(member):
            parts += _parameters(member)
    return list(dict.fromkeys(parts))


def _section(name: str) -> str | None:
    import re

    found = re.search(
        rf"^### `{re.escape(name)}`\n(.*?)(?=^##+ |\Z)", REFERENCE, re.MULTILINE | re.DOTALL
    )
    return found.group(1) if found else None


@pytest.mark.parametrize(
    ("name", "obj"), _public_names(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_public_name_is_in_the_reference(name, obj):
    """docs/reference.md has a section for each public type, error and kit function, and
    it names every field, parameter, method and property of it (in code spans)."""
    import re

    section = _section(name)
    assert section is not None, f"docs/reference.md has no '### `{name}`' section"
    alias = next((n for n, o in _public_names() if o is obj and n != name), None)
    if alias and f"same type as `{alias}`" in section:
        return  # documented with the type it names
    spans = re.findall(r"`([^`]+)`", section)
    missing = [
        part
        for part in _parts(obj)
        if not any(re.search(rf"(?<![\w]){re.escape(part)}(?!\w)", span) for span in spans)
    ]
    assert missing == [], f"docs/reference.md, {name}: not documented: {missing}"


def test_every_hook_is_in_the_reference():
    """docs/reference.md's hook table names every hook."""
    missing = [hook for hook in HOOK_NAMES if f"| `{hook}` |" not in REFERENCE]
    assert missing == []


# -- operating and observability docs --------------------------------------------------------

OBSERVABILITY_DOC = (ROOT / "docs" / "observability.md").read_text()
OPERATING_DOC = (ROOT / "docs" / "operating.md").read_text()
README = (ROOT / "README.md").read_text()
METRIC_ROW = re.compile(r"^\| `(devicehost_[a-z_]+)` \| ([a-z]+) \|", re.MULTILINE)


def exported_metrics() -> dict[str, str]:
    """Every metric a host exports (name → Prometheus type), read from the registry of a
    host built as `devicehost run` builds it: a metric added anywhere shows up here."""
    from devicehost.host import Host

    host = Host(HostConfig(metrics_address="", pod_resources_socket=None))
    exported = {}
    for family in host.telemetry.metrics.registry.collect():
        # The client names a counter's family without the _total its samples carry.
        suffix = "_total" if family.type == "counter" else ""
        exported[family.name + suffix] = family.type
    return exported


def test_every_exported_metric_is_documented():
    """docs/observability.md's metrics table lists every metric the host exports, with its
    type, and no metric the host does not export."""
    documented = dict(METRIC_ROW.findall(OBSERVABILITY_DOC))
    exported = exported_metrics()
    assert len(exported) >= 8  # the registry was read, gauges included
    assert documented == exported


def test_every_deploy_path_the_docs_cite_exists():
    """Each `deploy/...` file or directory the docs and README name is in the repository."""
    cited = {
        match.rstrip(".,:;)")
        for doc in [README, *(p.read_text() for p in (ROOT / "docs").glob("*.md"))]
        for match in re.findall(r"deploy/[A-Za-z0-9_./<>-]+", doc)
        if "<" not in match
    }
    assert "deploy/components/ascend-dcmi/dcmi.yaml" in cited
    missing = sorted(path for path in cited if not (ROOT / path).exists())
    assert not missing, missing


def test_the_docs_say_where_simulate_builds_its_node():
    """Where the docs say `--simulate` builds its node, they name the directory the code
    uses (shared memory, `$TMPDIR` when set), never /tmp alone."""
    from devicehost.simulation.trees import SHARED_MEMORY_DIR

    sentences = [
        sentence
        for doc in [OPERATING_DOC, *(p.read_text() for p in (ROOT / "deploy").rglob("*.yaml"))]
        for sentence in re.split(r"(?<=[.;])\s", " ".join(doc.split()))
        if "simulate" in sentence and re.search(r"\bbuil(t|ds)\b", sentence)
    ]
    placed = [s for s in sentences if re.search(r"/dev/shm|/tmp|\bin the pod", s)]
    assert placed, sentences
    for sentence in placed:
        assert SHARED_MEMORY_DIR in sentence, sentence


def test_the_config_recipe_says_which_yq_it_needs():
    """The recipe that extracts a rendered HostConfig with yq names mikefarah's yq (the
    Python yq wrapper prints the config JSON-quoted from the same command)."""
    recipe = OPERATING_DOC[OPERATING_DOC.index("| yq ") - 400 : OPERATING_DOC.index("| yq ") + 600]
    assert "mikefarah" in recipe


def test_the_readme_runs_uv_where_make_setup_puts_it():
    """README's set-up section starts with `make setup`, lists only targets the Makefile
    has, and names uv by the path the Makefile installs it at (.tools/bin/uv), never a
    bare `uv run`."""
    section = README[README.index("## The two commands") : README.index("## Your own driver")]
    block = re.search(r"```\n(.*?)```", section, re.DOTALL)
    assert block
    targets = re.findall(r"^make ([a-z-]+)", block.group(1), re.MULTILINE)
    assert targets[0] == "setup"
    makefile = (ROOT / "Makefile").read_text()
    assert all(re.search(rf"^{t}:", makefile, re.MULTILINE) for t in targets), targets
    assert not re.search(r"(?<![/\w])uv run", README)
    assert ".tools/bin/uv run devicehost" in README
