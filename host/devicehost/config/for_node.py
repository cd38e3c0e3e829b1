"""A HostConfig with this node's profile laid over its driver and resource sections.

Apart from ``profiles`` (which parses and matches profiles and knows nothing of HostConfig)
so that the config and its profiles import each other in one direction only.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping

from devicehost.config.host_config import HostConfig
from devicehost.config.profiles import (
    LABEL_PREFIX,
    NodeFacts,
    Profile,
    apply,
    apply_resources,
    choose,
    needs_labels,
    needs_node_labels,
)

log = logging.getLogger(__name__)


def with_profile(config: HostConfig, facts: NodeFacts) -> tuple[HostConfig, Profile | None]:
    """``config`` with the profile ``facts`` choose laid over its driver and resource
    sections."""
    profile = choose(config.profiles, facts)
    chosen = dataclasses.replace(
        config,
        drivers=apply(config.drivers, profile),
        resources=apply_resources(config.resources, profile),
    )
    return chosen, profile


LabelSource = Callable[[HostConfig], Awaitable[Mapping[str, str]]]


async def for_this_node(
    config: HostConfig, probe: LabelSource, node_labels: LabelSource
) -> HostConfig:
    """The config with this node's profile applied. Facts: the node name; only when some
    profile matches on them, the labels the drivers report under the base settings, asked
    by ``probe`` (a throw-away host that configures the drivers, reads their labels and
    stops them, so each driver is still configured once per host); and the Node object's
    labels, read by ``node_labels`` (from the API server). Node labels that cannot be read
    are logged as an error and taken as none: the profiles that need them do not match,
    and the node is served as the base settings say."""
    if not config.profiles:
        return config
    labels: Mapping[str, str] = {}
    if needs_labels(config.profiles):
        labels = {k.removeprefix(LABEL_PREFIX): v for k, v in (await probe(config)).items()}
    own: Mapping[str, str] = {}
    if needs_node_labels(config.profiles):
        own = await _node_labels(config, node_labels)
    chosen, profile = with_profile(config, NodeFacts(config.node_name, labels, own))
    if profile is None:
        log.info("node %r: no profile matches; the base driver settings apply", config.node_name)
    else:
        log.info("node %r: profile %r applies", config.node_name, profile.name)
    return chosen


async def _node_labels(config: HostConfig, read: LabelSource) -> Mapping[str, str]:
    if not config.node_name:
        log.error(
            "profiles match on nodeLabels, but the node's name is not known (nodeName, "
            "DEVICEHOST_NODE_NAME): they do not apply"
        )
        return {}
    try:
        return await read(config)
    except Exception as exc:
        log.error(
            "node %r: cannot read its labels (%s): the profiles matching on nodeLabels do "
            "not apply",
            config.node_name,
            exc,
        )
        return {}
