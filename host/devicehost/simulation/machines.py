"""The simulated machines ``--node`` names: published ones devicehost knows, and those
installed drivers contribute.

A driver contributes a machine with an entry point in the group ``devicehost.nodes``: its
name is the machine's name, its target a one-line description (``module:ATTRIBUTE``, a
string). The names come from the installed metadata alone, so checking ``--node`` imports
no driver; only ``devicehost demo --list-nodes`` loads the descriptions, in a child process
of its own (a driver's module is its code, and never runs in the host).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

from devicehost.errors import ConfigError

NODE_GROUP = "devicehost.nodes"
DESCRIPTION_TIMEOUT_SECONDS = 20.0
MAX_DESCRIPTION = 200

#: Published machines the bundled drivers build (``--node NAME``). Each driver builds its
#: own part of the machine (and nothing when it has none of that hardware); the sources of
#: each layout are named in the drivers' fixtures.
BUNDLED: dict[str, str] = {
    "dgx-h100": "NVIDIA DGX H100: 8x H100 SXM5 80GB on NVSwitch over 2 NUMA nodes, 8 "
    "ConnectX-7 400G InfiniBand compute NICs, 2 dual-port ConnectX-7 storage NICs, an "
    "Intel E810 management NIC",
    "atlas-800-9000": "Huawei Atlas 800 training server (model 9000): 8x Ascend 910 in two "
    "HCCS rings (0-3, 4-7)",
    "atlas-800t-a2": "Huawei Atlas 800T A2 training server: 8x Ascend 910B, fully meshed",
    "atlas-800-3000": "Huawei Atlas 800 inference server (model 3000): Atlas 300I Pro/Duo "
    "cards with Ascend 310P",
}


@dataclass(frozen=True)
class Machine:
    """One machine ``--node`` can name, and who publishes it."""

    name: str
    description: str
    distribution: str = "devicehost"


@dataclass(frozen=True)
class _Contributed:
    name: str
    distribution: str
    value: str


def _contributed() -> list[_Contributed]:
    """The ``devicehost.nodes`` entry points, from the installed metadata (nothing imported)."""
    from importlib_metadata import entry_points

    from devicehost.system.entry_points import name_and_version

    found = []
    for ep in entry_points().select(group=NODE_GROUP):
        dist = ep.dist
        metadata = (dist.read_text("METADATA") or "") if dist is not None else ""
        found.append(_Contributed(ep.name, name_and_version(metadata)[0], ep.value))
    return sorted(found, key=lambda c: (c.name, c.distribution))


def known_names() -> list[str]:
    """Every name ``--node`` accepts: the published machines, then the contributed ones."""
    contributed = [c.name for c in _contributed() if c.name not in BUNDLED]
    return [*BUNDLED, *sorted(set(contributed))]


def check_node(node: str, source: str) -> None:
    """Refuse a ``--node`` (``simulateNode``) no published or installed machine has: it
    would build an empty node, or a part of one, and serve it as if it were meant."""
    if not node:
        return
    names = known_names()
    if node not in names:
        raise ConfigError(
            source,
            "simulateNode",
            f"no simulated machine is named {node!r}; known: {', '.join(names)} "
            "(devicehost demo --list-nodes describes them)",
        )


_LOAD_DESCRIPTIONS = """
import json, sys
from devicehost.system.entry_points import load_object
answers = {}
for value in json.loads(sys.argv[1]):
    try:
        text = load_object(value)
        answers[value] = text if isinstance(text, str) else f"(not a string: {text!r:.60})"
    except BaseException as exc:
        answers[value] = f"(description not loaded: {type(exc).__name__}: {exc})"
print(json.dumps(answers))
"""


def _descriptions(values: list[str]) -> dict[str, str]:
    """Each contributed machine's description, imported in a child process with a
    timeout: a driver module that fails, hangs or crashes costs only its description."""
    if not values:
        return {}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        result = subprocess.run(
            [sys.executable, "-c", _LOAD_DESCRIPTIONS, json.dumps(values)],
            capture_output=True,
            text=True,
            timeout=DESCRIPTION_TIMEOUT_SECONDS,
            env=env,
        )
        answers = json.loads(result.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return {}
    return {str(k): str(v) for k, v in answers.items()} if isinstance(answers, dict) else {}


def machines() -> list[Machine]:
    """Every machine ``--node`` names, described: published first, then contributed."""
    contributed = [c for c in _contributed() if c.name not in BUNDLED]
    descriptions = _descriptions(sorted({c.value for c in contributed}))
    found = [Machine(name, text) for name, text in BUNDLED.items()]
    seen: set[str] = set()
    for entry in contributed:
        if entry.name in seen:
            continue  # two distributions publish one name: the first (by name) describes it
        seen.add(entry.name)
        text = " ".join(descriptions.get(entry.value, "(description not loaded)").split())
        found.append(Machine(entry.name, text[:MAX_DESCRIPTION], entry.distribution))
    return found
