"""Per-node config profiles: chosen by node name or by the labels the drivers report."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import pytest
import yaml
from apiserver import ApiServer

from devicehost.cli.main import main
from devicehost.config.for_node import for_this_node, with_profile
from devicehost.config.host_config import load_config
from devicehost.config.profiles import NodeFacts, choose, parse_profiles
from devicehost.errors import ConfigError
from devicehost.host import _node_labels, _probe_labels

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


@pytest.mark.parametrize("match", [{"labels": {}}, {"nodeLabels": {}}, {"nodeLabels": None}])
def test_a_match_that_names_nothing_is_a_config_error(tmp_path, match):
    """An empty condition would match every node: refused, naming the profile."""
    path = write_config(tmp_path, [{"name": "all", "match": match}])
    with pytest.raises(ConfigError, match=r"\[0\] \(all\)\.match"):
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
    chosen = asyncio.run(for_this_node(base, _probe_labels, _node_labels))
    assert chosen.drivers["alpha"]["prefix"] == "b"
    assert chosen.drivers["alpha"]["resources"] == {"test.example/dev": 1}


#: A fleet moving to DRA node by node: the label an operator sets moves a node.
TO_DRA = [
    {
        "name": "dra",
        "match": {"nodeLabels": {"devicehost.io/api": "dra"}},
        "resources": {"test.example/dev": {"api": "dra"}},
    }
]


def dra_config(tmp_path, **changes):
    config = load_config(write_config(tmp_path, TO_DRA), env={})
    return dataclasses.replace(
        config, resources={"test.example/other": {"api": "dra"}}, node_name="gpu-1", **changes
    )


def test_a_node_label_chosen_profile_lays_its_resources_over_the_base():
    """A node labelled devicehost.io/api=dra serves the profile's resource through DRA and
    keeps the base's other settings; an unlabelled node keeps the device plugin."""
    config = dataclasses.replace(
        load_config(None, env={}),
        profiles=parse_profiles(TO_DRA),
        resources={"test.example/other": {"api": "dra"}},
    )
    labelled, profile = with_profile(config, NodeFacts("gpu-1", {}, {"devicehost.io/api": "dra"}))
    assert profile is not None and profile.name == "dra"
    assert labelled.api_of("test.example/dev") == "dra"
    assert labelled.api_of("test.example/other") == "dra"
    plain, none = with_profile(config, NodeFacts("gpu-1", {}, {"devicehost.io/api": "off"}))
    assert none is None
    assert plain.api_of("test.example/dev") == "devicePlugin"


def test_a_profile_s_resources_are_checked_naming_the_profile(tmp_path):
    bad = [{**TO_DRA[0], "resources": {"test.example/dev": {"api": "cdi"}}}]
    with pytest.raises(
        ConfigError, match=r"\[0\] \(dra\)\.resources: resource 'test\.example/dev'"
    ):
        load_config(write_config(tmp_path, bad), env={})


def test_at_start_the_node_s_own_labels_are_read_from_the_api_server(tmp_path):
    """With a profile matching on nodeLabels, the host reads its Node (as the DRA face
    reads it: the kubeconfig or the pod's service account) and the profile applies."""
    with ApiServer() as api:
        api.add_node("gpu-1", {"devicehost.io/api": "dra", "kubernetes.io/os": "linux"})
        config = dra_config(tmp_path, kubeconfig=api.write_kubeconfig(tmp_path / "kubeconfig"))
        chosen = asyncio.run(for_this_node(config, _probe_labels, _node_labels))
    assert chosen.api_of("test.example/dev") == "dra"


def test_node_labels_that_cannot_be_read_leave_the_base_settings_with_an_error(tmp_path, caplog):
    """No such Node on the API server: an error line names the node and the answer, and
    the node is served as the base settings say (nothing stops)."""
    with ApiServer() as api:
        config = dra_config(tmp_path, kubeconfig=api.write_kubeconfig(tmp_path / "kubeconfig"))
        with caplog.at_level(logging.ERROR, logger="devicehost.config.for_node"):
            chosen = asyncio.run(for_this_node(config, _probe_labels, _node_labels))
    assert chosen.api_of("test.example/dev") == "devicePlugin"
    (line,) = [r.getMessage() for r in caplog.records]
    assert "'gpu-1': cannot read its labels" in line and "404" in line, line


def test_config_node_facts_reads_the_node_s_labels_from_a_node_object(install, tmp_path, capsys):
    """`devicehost config --node-facts` with `kubectl get node -o yaml`'s output shows the
    resources the node's labels choose."""
    install("devicehost-alpha", drivers={"alpha": "testdrivers.labelled:Labelled"})
    facts = tmp_path / "node.yaml"
    node = {"name": "gpu-1", "labels": {"devicehost.io/api": "dra"}}
    facts.write_text(yaml.safe_dump({"kind": "Node", "metadata": node}))
    args = ["config", "--config", str(write_config(tmp_path, TO_DRA)), "--drivers", "alpha"]
    assert main([*args, "--node-facts", str(facts)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "# profile: dra"
    assert yaml.safe_load(out)["resources"] == {"test.example/dev": {"api": "dra"}}
