"""Config parsing: defaults, and every bad value refused with the key named."""

import pytest
from devicehost_nvidia.config import (
    DEFAULT_IGNORED_XIDS,
    DeviceIdStrategy,
    DeviceListStrategy,
    MigStrategy,
    ReplicaAllocation,
    SharedResource,
    parse_config,
)


def test_defaults() -> None:
    """An empty section means UUIDs, no MIG, envvar, the CDI directories, driver root /,
    the usual Xids, a pending remap not a fault, 30 s."""
    config = parse_config({})
    assert config.device_id_strategy is DeviceIdStrategy.UUID
    assert config.mig_strategy is MigStrategy.NONE
    assert config.device_list_strategy == (DeviceListStrategy.ENVVAR,)
    assert config.cdi_spec_dirs == ("/etc/cdi", "/var/run/cdi")
    assert config.driver_root == "/"
    assert config.ignored_xids == DEFAULT_IGNORED_XIDS == {13, 31, 43, 45, 68, 109}
    assert config.remap_pending_unhealthy is False
    assert config.quiet_period(simulated=False) == 30.0
    assert config.time_slicing.resources == ()


def test_quiet_period_is_short_under_simulation_unless_set() -> None:
    """The demo shows recovery in seconds; an explicit value wins everywhere."""
    assert parse_config({}).quiet_period(simulated=True) == 3.0
    assert parse_config({"quietPeriodSeconds": 7}).quiet_period(simulated=True) == 7.0


def test_full_config_is_read() -> None:
    """Every key is taken as written."""
    config = parse_config(
        {
            "deviceIdStrategy": "index",
            "migStrategy": "mixed",
            "deviceListStrategy": ["cdi", "device-nodes"],
            "cdiSpecDirs": ["/etc/cdi"],
            "driverRoot": "/run/nvidia/driver/",
            "ignoredXids": [13, 43],
            "remapPendingUnhealthy": True,
            "quietPeriodSeconds": 0.5,
            "timeSlicing": {
                "renameByDefault": True,
                "replicaAllocation": "packed",
                "resources": [{"name": "nvidia.com/gpu", "replicas": 4, "rename": "x.com/y"}],
            },
            "simulation": {"gpus": 4, "numaNodes": 1, "mig": {"0": ["1g.10gb", "2g.20gb"]}},
        }
    )
    assert config.device_id_strategy is DeviceIdStrategy.INDEX
    assert config.device_list_strategy == (DeviceListStrategy.CDI, DeviceListStrategy.DEVICE_NODES)
    assert config.cdi_spec_dirs == ("/etc/cdi",)
    assert config.driver_root == "/run/nvidia/driver"
    assert config.remap_pending_unhealthy is True
    assert config.ignored_xids == {13, 43}
    assert config.quiet_period(simulated=False) == 0.5
    assert config.time_slicing.resources == (SharedResource("nvidia.com/gpu", 4, "x.com/y"),)
    assert config.time_slicing.replica_allocation is ReplicaAllocation.PACKED
    assert config.simulation.mig == {0: ("1g.10gb", "2g.20gb")}


def test_single_strategy_string_is_accepted() -> None:
    """``deviceListStrategy: cdi`` is the same as a one-item list."""
    assert parse_config({"deviceListStrategy": "cdi"}).device_list_strategy == (
        DeviceListStrategy.CDI,
    )


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"migStrategy": "x"}, "migStrategy: expected one of none, single, mixed, got 'x'"),
        ({"deviceIdStrategy": "serial"}, "deviceIdStrategy: expected one of uuid, index, got"),
        ({"deviceListStrategy": ["envvar", "volume"]}, "deviceListStrategy[1]: expected one of"),
        ({"deviceListStrategy": []}, "deviceListStrategy: expected at least one of"),
        ({"cdiSpecDirs": ["cdi"]}, "cdiSpecDirs[0]: expected an absolute path, got 'cdi'"),
        ({"cdiSpecDir": "/var/run/cdi"}, "cdiSpecDir: this driver no longer writes a CDI spec"),
        ({"driverRoot": "run/nvidia"}, "driverRoot: expected an absolute path, got 'run/nvidia'"),
        ({"ignoredXids": [13, "x"]}, "ignoredXids[1]: expected an integer >= 0, got 'x'"),
        ({"ignoredXids": 13}, "ignoredXids: expected a list, got 13"),
        ({"quietPeriodSeconds": -1}, "quietPeriodSeconds: expected a number of seconds >= 0"),
        ({"quietPeriodSeconds": True}, "quietPeriodSeconds: expected a number of seconds >= 0"),
        ({"colour": "green"}, "colour: unknown key; known keys: deviceIdStrategy"),
        ({"timeSlicing": {"replicas": 4}}, "timeSlicing.replicas: unknown key"),
        (
            {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 1}]}},
            "timeSlicing.resources[0].replicas: expected an integer between 2 and 1000, got 1",
        ),
        (
            {"timeSlicing": {"resources": [{"name": "amd.com/gpu", "replicas": 2}]}},
            "timeSlicing.resources[0].name: expected an nvidia.com/ resource",
        ),
        (
            {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu"}]}},
            "timeSlicing.resources[0]: expected 'name' and 'replicas'",
        ),
        (
            {
                "timeSlicing": {
                    "resources": [{"name": "nvidia.com/gpu", "replicas": 2, "rename": "bad name"}]
                }
            },
            "timeSlicing.resources[0].rename: resource name 'bad name' is not of the form",
        ),
        (
            {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}] * 2}},
            "timeSlicing.resources[1].name: 'nvidia.com/gpu' is listed twice",
        ),
        ({"timeSlicing": {"renameByDefault": "yes"}}, "timeSlicing.renameByDefault: expected true"),
        (
            {"timeSlicing": {"replicaAllocation": "spread"}},
            "timeSlicing.replicaAllocation: expected one of distributed, packed, got 'spread'",
        ),
        ({"simulation": {"gpus": 99}}, "simulation.gpus: expected an integer between 0 and 16"),
        ({"simulation": {"mig": {"9": ["1g.10gb"]}}}, "simulation.mig.9: expected an integer"),
        (
            {"simulation": {"mig": {"0": ["1g.5gb"]}}},
            "simulation.mig.0: MIG profile '1g.5gb' does not exist on a simulated 80 GB GPU",
        ),
        ({"simulation": {"mig": {"0": ["big"]}}}, "simulation.mig.0: MIG profile 'big' is not"),
    ],
)
def test_bad_values_name_the_key(config: dict[str, object], message: str) -> None:
    """A wrong value stops start-up with a message that names the key and what was expected."""
    with pytest.raises(ValueError) as raised:
        parse_config(config)
    assert str(raised.value).startswith(message)


def test_readme_documents_every_key() -> None:
    """Each config key, nested ones included, has a row in the README's table."""
    from pathlib import Path

    from devicehost_nvidia.config import KEYS

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    nested = [
        "timeSlicing.resources",
        "timeSlicing.renameByDefault",
        "timeSlicing.replicaAllocation",
        "simulation.gpus",
        "simulation.numaNodes",
        "simulation.mig",
    ]
    documented = {k for k in (*KEYS, *nested) if f"| `{k}` |" in readme}
    missing = {*KEYS, *nested} - documented - {"timeSlicing", "simulation"}
    assert not missing, f"README lacks rows for {sorted(missing)}"
