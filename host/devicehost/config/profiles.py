"""Per-node config profiles: one DaemonSet, one ConfigMap, different driver settings by node.

A mixed fleet has nodes that need different driver settings (Ascend 910 rings of four
beside full-mesh 910B servers, GPUs with MIG on beside GPUs without). Instead of one
DaemonSet per node type, the HostConfig lists ``profiles``; the first whose ``match``
holds for the node is applied over the ``drivers`` section, driver by driver, key by key.

A profile matches on *node facts*: the node's name (``nodeNames``, shell-style patterns, any
may match) and the labels the drivers report (``labels``, every one must be equal; keys as
``<driver>.<key>``, the part after ``devicehost.feature.node.kubernetes.io/``). Both given:
both must hold. The labels are the natural facts because they are exactly what the drivers
detect (chip family, MIG capability) and what the node is labelled with, so
``kubectl get node -o yaml`` shows an operator what a profile will see.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devicehost.errors import ConfigError

log = logging.getLogger(__name__)

#: The label prefix the host writes (see devicehost.node.labels); stripped from facts.
LABEL_PREFIX = "devicehost.feature.node.kubernetes.io/"


@dataclass(frozen=True)
class NodeFacts:
    """What a profile can match on."""

    node_name: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Profile:
    """One named set of driver settings and the nodes it is for."""

    name: str
    node_names: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    drivers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def matches(self, facts: NodeFacts) -> bool:
        if self.node_names and not any(
            fnmatch.fnmatchcase(facts.node_name, p) for p in self.node_names
        ):
            return False
        return all(facts.labels.get(k) == v for k, v in self.labels.items())

    def to_document(self) -> dict[str, Any]:
        match: dict[str, Any] = {}
        if self.node_names:
            match["nodeNames"] = list(self.node_names)
        if self.labels:
            match["labels"] = dict(self.labels)
        return {
            "name": self.name,
            "match": match,
            "drivers": {k: dict(v) for k, v in self.drivers.items()},
        }


def _strings(where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{where}: expected a list of non-empty strings, got {value!r}")
    return tuple(value)


def _label_map(where: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected a mapping of label key to value, got {value!r}")
    labels: dict[str, str] = {}
    for key, raw in value.items():
        if isinstance(raw, bool):
            raw = "true" if raw else "false"
        if not isinstance(key, str) or not isinstance(raw, str | int | float):
            raise ValueError(f"{where}: label {key!r}: expected a string value, got {raw!r}")
        labels[key.removeprefix(LABEL_PREFIX)] = str(raw)
    return labels


def parse_profiles(value: Any) -> tuple[Profile, ...]:
    """The ``profiles`` setting: a list of ``{name, match: {nodeNames, labels}, drivers}``."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValueError(f"expected a list of profiles, got {value!r}")
    profiles: list[Profile] = []
    for index, entry in enumerate(value):
        where = f"[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: expected a mapping, got {entry!r}")
        unknown = set(entry) - {"name", "match", "drivers"}
        if unknown:
            raise ValueError(
                f"{where}: unknown keys {sorted(unknown)}; known: name, match, drivers"
            )
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}.name: expected a non-empty string, got {name!r}")
        where = f"[{index}] ({name})"
        match = entry.get("match") or {}
        if not isinstance(match, dict) or set(match) - {"nodeNames", "labels"} or not match:
            raise ValueError(
                f"{where}.match: expected nodeNames and/or labels, got {match!r} "
                "(a profile without a match would apply to every node: use drivers instead)"
            )
        drivers = entry.get("drivers") or {}
        if not isinstance(drivers, dict) or not all(isinstance(v, dict) for v in drivers.values()):
            raise ValueError(f"{where}.drivers: expected a mapping of driver name to settings")
        profiles.append(
            Profile(
                name=name,
                node_names=_strings(f"{where}.match.nodeNames", match["nodeNames"])
                if "nodeNames" in match
                else (),
                labels=_label_map(f"{where}.match.labels", match.get("labels") or {}),
                drivers={str(k): dict(v) for k, v in drivers.items()},
            )
        )
    names = [p.name for p in profiles]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"profile names must be unique: {', '.join(duplicates)}")
    return tuple(profiles)


def choose(profiles: Sequence[Profile], facts: NodeFacts) -> Profile | None:
    """The first profile that matches ``facts``, or None (the base settings apply)."""
    return next((p for p in profiles if p.matches(facts)), None)


def apply(
    drivers: Mapping[str, Mapping[str, Any]], profile: Profile | None
) -> dict[str, dict[str, Any]]:
    """The driver sections with ``profile``'s keys laid over them (a key replaces a key)."""
    merged = {name: dict(section) for name, section in drivers.items()}
    if profile is not None:
        for name, section in profile.drivers.items():
            merged[name] = {**merged.get(name, {}), **section}
    return merged


def needs_labels(profiles: Sequence[Profile]) -> bool:
    """True when some profile matches on labels, so the drivers must be asked first."""
    return any(p.labels for p in profiles)


def facts_from_document(doc: Any) -> NodeFacts:
    """Node facts from a facts file: ``{nodeName, labels}``, or a Kubernetes Node object
    as ``kubectl get node NAME -o yaml`` prints it (its name and labels)."""
    if not isinstance(doc, dict):
        raise ValueError("expected a mapping with nodeName and labels, or a Node object")
    if doc.get("kind") == "Node":
        metadata = doc.get("metadata") or {}
        name, raw_labels = metadata.get("name", ""), metadata.get("labels") or {}
        labels = {k: v for k, v in raw_labels.items() if str(k).startswith(LABEL_PREFIX)}
    else:
        unknown = set(doc) - {"nodeName", "labels"}
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}; known: nodeName, labels")
        name, labels = doc.get("nodeName", ""), doc.get("labels") or {}
    if not isinstance(name, str):
        raise ValueError(f"nodeName: expected a string, got {name!r}")
    return NodeFacts(name, _label_map("labels", labels))


def facts_file(path: Path) -> NodeFacts:
    """Node facts from a YAML or JSON file (``devicehost config --node-facts FILE``)."""
    import yaml

    try:
        return facts_from_document(yaml.safe_load(path.read_text()))
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot read: {exc.strerror}") from None
    except (yaml.YAMLError, ValueError) as exc:
        raise ConfigError(str(path), "", f"not a node facts file: {exc}") from None
