"""Make a module discoverable as an installed distribution, without building a wheel.

Writes ``<dist>-<version>.dist-info`` (METADATA and entry_points.txt, as pip would) into a
site directory. Put that directory on ``sys.path`` (or ``PYTHONPATH`` for a subprocess) and
``importlib.metadata`` finds the entry points exactly as it finds pip-installed drivers.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def write_distribution(
    site: Path | str,
    dist: str,
    entry_points: Mapping[str, Mapping[str, str]],
    version: str = "1.0",
) -> Path:
    """Write the dist-info of ``dist`` with ``{group: {name: "module:attr"}}`` entry points
    into ``site`` (a path or a string, like the rest of the kit)."""
    info = Path(site) / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = []
    for group, points in entry_points.items():
        lines.append(f"[{group}]")
        lines += [f"{name} = {target}" for name, target in points.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return info
