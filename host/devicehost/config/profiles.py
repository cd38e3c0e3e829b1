"""Per-node config profiles: one DaemonSet, one ConfigMap, different settings by node.

A mixed fleet has nodes that need different driver settings (Ascend 910 rings of four
beside full-mesh 910B servers, GPUs with MIG on beside GPUs without), and a fleet moving
to DRA has nodes that serve a resource through it beside nodes that still serve it as a
device plugin. Instead of one DaemonSet per node type, the HostConfig lists ``profiles``;
the first whose ``match`` holds for the node is applied over the ``drivers`` section
(driver by driver, key by key) and over ``resources`` (resource by resource).

A profile matches on *node facts*: the node's name (``nodeNames``, shell-style patterns, any
may match), the labels the drivers report (``labels``, every one must be equal; keys as
``<driver>.<key>``, the part after ``devicehost.feature.node.kubernetes.io/``), and the
labels of the Node object (``nodeLabels``, every one must be equal; read from the API
server at start, so ``kubectl label node`` and a restart of that node's pod move it).
Given together, all must hold. The drivers' labels are the natural facts for hardware
because they are exactly what the drivers detect (chip family, MIG capability); an
operator's own label is the natural switch for a choice like DRA.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devicehost.config.resource_api import lay_over, parse_resource_sections
from devicehost.errors import ConfigError

log = logging.getLogger(__name__)

#: The label prefix the host writes (see devicehost.node.labels); stripped from facts.
LABEL_PREFIX = "devicehost.feature.node.kubernetes.io/"
MATCH_KEYS = {"nodeNames", "labels", "nodeLabels"}


@dataclass(frozen=True)
class NodeFacts:
    """What a profile can match on."""

    node_name: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    #: The Node object's own labels (any key), when they were read.
    node_labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Profile:
    """One named set of driver and resource settings and the nodes it is for."""

    name: str
    node_names: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    node_labels: Mapping[str, str] = field(default_factory=dict)
    drivers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    resources: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def matches(self, facts: NodeFacts) -> bool:
        if self.node_names and not any(
            fnmatch.fnmatchcase(facts.node_name, p) for p in self.node_names
        ):
            return False
        if not all(facts.node_labels.get(k) == v for k, v in self.node_labels.items()):
            return False
        return all(facts.labels.get(k) == v for k, v in self.labels.items())

    def to_document(self) -> dict[str, Any]:
        match: dict[str, Any] = {}
        if self.node_names:
            match["nodeNames"] = list(self.node_names)
        if self.labels:
            match["labels"] = dict(self.labels)
        if self.node_labels:
            match["nodeLabels"] = dict(self.node_labels)
        document = {
            "name": self.name,
            "match": match,
            "drivers": {k: dict(v) for k, v in self.drivers.items()},
        }
        if self.resources:
            document["resources"] = {k: dict(v) for k, v in self.resources.items()}
        return document


def _strings(where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{where}: expected a list of non-empty strings, got {value!r}")
    return tuple(value)


def _node_label_map(where: str, value: Any) -> dict[str, str]:
    """A Node's labels as the profile names them: any key, kept whole."""
    return _label_map(where, value, prefix="")


def _label_map(where: str, value: Any, prefix: str = LABEL_PREFIX) -> dict[str, str]:
    """Label key to value, values as strings (YAML's ``true`` is the label value
    ``"true"``), ``prefix`` taken off each key (the drivers' labels are matched without
    it)."""
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected a mapping of label key to value, got {value!r}")
    labels: dict[str, str] = {}
    for key, raw in value.items():
        if isinstance(raw, bool):
            raw = "true" if raw else "false"
        if not isinstance(key, str) or not key or not isinstance(raw, str | int | float):
            raise ValueError(f"{where}: label {key!r}: expected a string value, got {raw!r}")
        labels[key.removeprefix(prefix) if prefix else key] = str(raw)
    return labels


def parse_profiles(value: Any) -> tuple[Profile, ...]:
    """The ``profiles`` setting: a list of ``{name, match: {nodeNames, labels, nodeLabels},
    drivers, resources}``."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValueError(f"expected a list of profiles, got {value!r}")
    profiles: list[Profile] = []
    for index, entry in enumerate(value):
        where = f"[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: expected a mapping, got {entry!r}")
        unknown = set(entry) - {"name", "match", "drivers", "resources"}
        if unknown:
            raise ValueError(
                f"{where}: unknown keys {sorted(unknown)}; known: name, match, drivers, resources"
            )
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}.name: expected a non-empty string, got {name!r}")
        where = f"[{index}] ({name})"
        match = entry.get("match") or {}
        if not isinstance(match, dict) or set(match) - MATCH_KEYS or not match:
            raise ValueError(
                f"{where}.match: expected nodeNames, labels and/or nodeLabels, got {match!r} "
                "(a profile without a match would apply to every node: use drivers instead)"
            )
        drivers = entry.get("drivers") or {}
        if not isinstance(drivers, dict) or not all(isinstance(v, dict) for v in drivers.values()):
            raise ValueError(f"{where}.drivers: expected a mapping of driver name to settings")
        try:
            resources = parse_resource_sections(entry.get("resources"))
        except ValueError as exc:
            raise ValueError(f"{where}.resources: {exc}") from None
        profile = Profile(
            name=name,
            node_names=_strings(f"{where}.match.nodeNames", match["nodeNames"])
            if "nodeNames" in match
            else (),
            labels=_label_map(f"{where}.match.labels", match.get("labels", {})),
            node_labels=_node_label_map(f"{where}.match.nodeLabels", match.get("nodeLabels", {})),
            drivers={str(k): dict(v) for k, v in drivers.items()},
            resources=resources,
        )
        if not (profile.node_names or profile.labels or profile.node_labels):
            raise ValueError(
                f"{where}.match: names no node name, label or node label, so it would apply "
                "to every node: use drivers and resources instead"
            )
        profiles.append(profile)
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


def apply_resources(
    resources: Mapping[str, Mapping[str, str]], profile: Profile | None
) -> dict[str, dict[str, str]]:
    """The ``resources`` setting with ``profile``'s sections laid over it (per resource)."""
    return lay_over(resources, profile.resources if profile is not None else {})


def needs_labels(profiles: Sequence[Profile]) -> bool:
    """True when some profile matches on labels, so the drivers must be asked first."""
    return any(p.labels for p in profiles)


def needs_node_labels(profiles: Sequence[Profile]) -> bool:
    """True when some profile matches on the Node's labels, so they must be read first."""
    return any(p.node_labels for p in profiles)


def facts_from_document(doc: Any) -> NodeFacts:
    """Node facts from a facts file: ``{nodeName, labels, nodeLabels}``, or a Kubernetes
    Node object as ``kubectl get node NAME -o yaml`` prints it (its name and labels: the
    drivers' among them, and all of them as the Node's)."""
    if not isinstance(doc, dict):
        raise ValueError("expected a mapping with nodeName and labels, or a Node object")
    if doc.get("kind") == "Node":
        metadata = doc.get("metadata") or {}
        name, node_labels = metadata.get("name", ""), metadata.get("labels") or {}
        labels = {k: v for k, v in node_labels.items() if str(k).startswith(LABEL_PREFIX)}
    else:
        unknown = set(doc) - {"nodeName", "labels", "nodeLabels"}
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}; known: nodeName, labels, nodeLabels")
        name, labels = doc.get("nodeName", ""), doc.get("labels") or {}
        node_labels = doc.get("nodeLabels") or {}
    if not isinstance(name, str):
        raise ValueError(f"nodeName: expected a string, got {name!r}")
    return NodeFacts(name, _label_map("labels", labels), _node_label_map("nodeLabels", node_labels))


def facts_file(path: Path) -> NodeFacts:
    """Node facts from a YAML or JSON file (``devicehost config --node-facts FILE``)."""
    import yaml

    try:
        return facts_from_document(yaml.safe_load(path.read_text()))
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot read: {exc.strerror}") from None
    except (yaml.YAMLError, ValueError) as exc:
        raise ConfigError(str(path), "", f"not a node facts file: {exc}") from None
