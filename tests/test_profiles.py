"""Per-node config profiles: chosen by node name or by the labels the drivers report."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import yaml

from devicehost.cli.main import main
from devicehost.config.for_node import for_this_node
from devicehost.config.host_config import load_config
from devicehost.config.profiles import NodeFacts, choose, parse_profiles
from devicehost.errors import ConfigError
from devicehost.host import _probe_labels

PROFILES = [
    {"name": "by-name", "match": {"nodeNames": ["npu-b-*"]}, "drivers": {"alpha": {"x": 1}}},
    {
        "name": "910b",
        "match": {"labels": {"alpha.family": "910B"}},
        "drivers": {"alpha": {"prefix": "b"}},
    },
]


def write_config(tmp_path, profiles=PROFILES, drivers=None):
    path = tmp_path / "config.yaml"
    doc = {
        "apiVersion": "devicehost/v1",
        "kind": "HostConfig",
        "profiles": profiles,
        "drivers": drivers or {"alpha": {"resources": {"test.example/dev": 1}}},
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_first_matching_profile_wins():
    """Profiles are tried in order; a node name pattern and a label both select."""
    profiles = parse_profiles(PROFILES)
    named = NodeFacts("npu-b-7", {"alpha.family": "910B"})
    assert choose(profiles, named).name == "by-name"
    assert choose(profiles, NodeFacts("gpu-1", {"alpha.family": "910B"})).name == "910b"
    assert choose(profiles, NodeFacts("gpu-1", {"alpha.family": "910"})) is None


def test_a_profile_without_a_match_is_a_config_error(tmp_path):
    """A profile that would match every node is refused, naming the profile."""
    path = write_config(tmp_path, [{"name": "all", "drivers": {}}])
    with pytest.raises(ConfigError, match=r"profiles: \[0\] \(all\)\.match"):
        load_config(path, env={})


def test_config_node_facts_shows_the_profile_a_node_gets(install, tmp_path, capsys):
    """`devicehost config --node-facts` prints the chosen profile and the driver section
    with the profile's keys laid over the base's; a Node object from kubectl works too."""
    install("devicehost-alpha", drivers={"alpha": "testdrivers.labelled:Labelled"})
    config = write_config(tmp_path)
    facts = tmp_path / "node.yaml"
    facts.write_text(
        yaml.safe_dump(
            {
                "kind": "Node",
                "metadata": {
                    "name": "npu-a-1",
                    "labels": {"devicehost.feature.node.kubernetes.io/alpha.family": "910B"},
                },
            }
        )
    )
    args = ["config", "--config", str(config), "--drivers", "alpha"]
    assert main([*args, "--node-facts", str(facts)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "# profile: 910b"
    assert yaml.safe_load(out)["drivers"]["alpha"]["prefix"] == "b"


def test_at_start_the_drivers_labels_choose_the_profile(install, tmp_path):
    """At start, a label-matched profile is chosen from what the drivers report under the
    base settings (a probe host that is stopped again), then applied."""
    install("devicehost-alpha", drivers={"alpha": "testdrivers.labelled:Labelled"})
    base = load_config(write_config(tmp_path), env={})
    base = dataclasses.replace(
        base,
        enabled_drivers=("alpha",),
        plugin_dir=tmp_path,
        pod_resources_socket=None,
        metrics_address="",
        node_name="gpu-1",
    )
    chosen = asyncio.run(for_this_node(base, _probe_labels))
    assert chosen.drivers["alpha"]["prefix"] == "b"
    assert chosen.drivers["alpha"]["resources"] == {"test.example/dev": 1}
