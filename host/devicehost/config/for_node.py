"""A HostConfig with this node's profile laid over its driver sections.

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
    choose,
    needs_labels,
)

log = logging.getLogger(__name__)


def with_profile(config: HostConfig, facts: NodeFacts) -> tuple[HostConfig, Profile | None]:
    """``config`` with the profile ``facts`` choose laid over its driver sections."""
    profile = choose(config.profiles, facts)
    return dataclasses.replace(config, drivers=apply(config.drivers, profile)), profile


async def for_this_node(
    config: HostConfig, probe: Callable[[HostConfig], Awaitable[Mapping[str, str]]]
) -> HostConfig:
    """The config with this node's profile applied. Facts: the node name, and — only when
    some profile matches on labels — the labels the drivers report under the base settings,
    asked by ``probe`` (a throw-away host that configures the drivers, reads their labels
    and stops them, so each driver is still configured once per host)."""
    if not config.profiles:
        return config
    labels: Mapping[str, str] = {}
    if needs_labels(config.profiles):
        labels = {k.removeprefix(LABEL_PREFIX): v for k, v in (await probe(config)).items()}
    chosen, profile = with_profile(config, NodeFacts(config.node_name, labels))
    if profile is None:
        log.info("node %r: no profile matches; the base driver settings apply", config.node_name)
    else:
        log.info("node %r: profile %r applies", config.node_name, profile.name)
    return chosen
