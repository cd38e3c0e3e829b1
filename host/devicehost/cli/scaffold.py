"""``devicehost new-driver NAME``: write a standalone driver distribution to start from.

The source is the template driver itself (``drivers/_template`` in the repository, shipped
inside the wheel as ``devicehost/_template``): a real driver that the project's own tests
install, test and serve, so what a new author gets is known to work. Writing a copy
renames the distribution, the package, the entry point and the resource; nothing else
changes, and the copy depends on devicehost only through its published name.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import sys
from importlib import resources
from pathlib import Path

from devicehost.model import resource_name_problem

TEMPLATE_NAME = "template"
TEMPLATE_RESOURCE = "example.com/widget"
_NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
_SKIPPED = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", "build", "dist"}


class ScaffoldError(Exception):
    """The driver cannot be written as asked; the message says why."""


def template_dir() -> Path:
    """The template driver: inside the installed package, or in the source checkout."""
    packaged = resources.files("devicehost") / "_template"
    if packaged.is_dir():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parents[3] / "drivers" / "_template"
    if (checkout / "pyproject.toml").is_file():
        return checkout
    raise ScaffoldError("the driver template is missing from this devicehost installation")


def next_steps(dest: Path) -> list[str]:
    """The commands that install the written driver beside this devicehost and run its
    tests: into this very environment (a fresh one could not find devicehost), with its
    pip, or with uv where it has none (as the development environment does not)."""
    python = sys.executable
    project = shlex.quote(f"{_shown(dest)}[test]")
    if importlib.util.find_spec("pip") is not None:
        install = f"{shlex.quote(python)} -m pip install -e {project}"
    else:
        uv = shutil.which("uv") or _checkout_uv() or "uv"
        install = f"{shlex.quote(uv)} pip install --python {shlex.quote(python)} -e {project}"
    return [install, f"cd {shlex.quote(_shown(dest))} && {shlex.quote(python)} -m pytest"]


def _shown(path: Path) -> str:
    """``path`` as a command line shows it best: ``./x`` below the current directory (a
    path to pip and uv, never a package name), else absolute."""
    relative = os.path.relpath(path)
    return str(Path(path).resolve()) if relative.startswith("..") else f"./{relative}"


def _checkout_uv() -> str | None:
    """The uv of a source checkout's ``make setup`` (``.tools/bin/uv``), if this is one."""
    uv = Path(__file__).resolve().parents[3] / ".tools" / "bin" / "uv"
    return _shown(uv) if uv.is_file() else None


def _check_name(name: str) -> None:
    if not _NAME_RE.match(name) or len(name) > 40:
        raise ScaffoldError(
            f"driver name {name!r}: expected lower-case letters and digits, words joined by "
            "'-' (e.g. acme or acme-npu), at most 40 characters"
        )


def write_driver(name: str, dest: Path | None = None, *, resource: str | None = None) -> Path:
    """Write the driver ``name`` into ``dest`` (default ``./devicehost-<name>``); return it.

    ``resource`` defaults to ``<name>.example.com/widget``, so a new driver never claims
    the template's own resource in the same host.
    """
    _check_name(name)
    module = name.replace("-", "_")
    package = f"devicehost_{module}"
    resource = resource or f"{name}.example.com/widget"
    problem = resource_name_problem(resource)
    if problem:
        raise ScaffoldError(problem)
    dest = Path(dest) if dest else Path.cwd() / f"devicehost-{name}"
    if dest.exists() and any(dest.iterdir()):
        raise ScaffoldError(f"{dest} exists and is not empty; choose another --dest")
    source = template_dir()
    replacements = [
        ("devicehost-template", f"devicehost-{name}"),
        ("devicehost_template", package),
        (TEMPLATE_RESOURCE, resource),
        (f'{TEMPLATE_NAME} = "{package}.driver"', f'{name} = "{package}.driver"'),
        (f'NAME = "{TEMPLATE_NAME}"', f'NAME = "{name}"'),
        (f"drivers.{TEMPLATE_NAME}", f"drivers.{name}"),
        (f"  {TEMPLATE_NAME}:\n", f"  {name}:\n"),
        (f"--drivers {TEMPLATE_NAME}", f"--drivers {name}"),
        (f"{TEMPLATE_NAME}-box", f"{name}-box"),
    ]
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if _SKIPPED & set(relative.parts) or relative.suffix == ".pyc" or path.is_dir():
            continue
        if relative.name.endswith(".egg-info") or any(
            p.endswith(".egg-info") for p in relative.parts
        ):
            continue
        parts = [
            p.replace("devicehost_template", package).replace("test_template", f"test_{module}")
            for p in relative.parts
        ]
        target = dest.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            shutil.copyfile(path, target)
            continue
        for old, new in replacements:
            text = text.replace(old, new)
        target.write_text(text, encoding="utf-8")
    return dest
