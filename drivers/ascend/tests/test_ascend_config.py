"""The ``drivers.ascend`` config section is parsed strictly, naming the bad key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from devicehost_ascend.config import KEYS, AscendConfig, parse_config


def test_empty_section_gives_the_documented_defaults() -> None:
    """No keys: DCMI, Ascend Docker Runtime, 5 s health polling, HCCS rings from the chips'
    names (not a fixed size), not strict, no fault codes of the operator's."""
    config = parse_config({})
    assert config == AscendConfig()
    assert (
        config.use_dcmi,
        config.use_ascend_runtime,
        config.health_poll_seconds,
        config.hccs_group_size,
        config.hccs_strict,
        config.fault_codes,
    ) == (True, True, 5.0, None, False, {})


def test_unknown_key_is_refused_by_name() -> None:
    """A misspelt key is an error naming it and listing the real keys."""
    with pytest.raises(ValueError, match=r"^useAscendRuntim: unknown key; the keys are: "):
        parse_config({"useAscendRuntim": False})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("healthPollSeconds", 0, "healthPollSeconds: expected a positive number of seconds, got 0"),
        ("useAscendRuntime", "no", "useAscendRuntime: expected true or false, got 'no'"),
        ("useDcmi", "off", "useDcmi: expected true or false, got 'off'"),
        ("hccsStrict", "yes", "hccsStrict: expected true or false, got 'yes'"),
        (
            "faultCodes",
            {"Harmless": ["0x80E01801"]},
            "faultCodes: unknown fault class 'Harmless'; the classes are: NotHandleFault, "
            "SubHealthFault, RestartRequest, RestartBusiness, FreeRestartNPU, RestartNPU, "
            "PreSeparateNPU, SeparateNPU",
        ),
        (
            "faultCodes",
            {"NotHandleFault": ["0x1"], "SeparateNPU": [1]},
            "faultCodes: code 0x00000001 is listed under NotHandleFault and SeparateNPU",
        ),
        ("hccsGroupSize", -1, "hccsGroupSize: expected a non-negative integer, got -1"),
        (
            "fallbackChipType",
            "Ascend999",
            "fallbackChipType: expected one of Ascend910, Ascend310P, Ascend310, Ascend310B, "
            "got 'Ascend999'",
        ),
        (
            "driverMounts",
            ["usr/local/dcmi"],
            "driverMounts: expected absolute, normalised paths, got 'usr/local/dcmi'",
        ),
        (
            "ignoredErrorCodes",
            ["oops"],
            "ignoredErrorCodes: expected error codes as integers or '0x...' strings, got 'oops'",
        ),
        (
            "fallbackNumaNodes",
            {0: "0-x"},
            "fallbackNumaNodes: expected IDs such as '0-3' or [0, 1], got '0-x'",
        ),
        (
            "fallbackVnpuCores",
            0,
            "fallbackVnpuCores: expected a positive core count or a mapping of vNPU ID to cores, "
            "got 0",
        ),
        (
            "simulatedNode",
            "dgx",
            "simulatedNode: expected one of ascend910x8, ascend910x8-vnpu, ascend310px4, mixed, "
            "got 'dgx'",
        ),
    ],
)
def test_bad_value_names_key_and_expectation(key: str, value: Any, message: str) -> None:
    """Each bad value is refused with the key, what was expected and what was given."""
    with pytest.raises(ValueError) as caught:
        parse_config({key: value})
    assert str(caught.value) == message


def test_numa_mapping_accepts_ranges_lists_and_string_keys() -> None:
    """``fallbackNumaNodes`` maps NUMA node → physical IDs given as ranges or lists."""
    config = parse_config({"fallbackNumaNodes": {0: "0-2,3", "1": [4, 5], 2: 6}})
    assert config.fallback_numa_nodes == {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 2}


def test_chip_under_two_numa_nodes_is_refused() -> None:
    """A physical ID listed under two NUMA nodes is a contradiction, not a silent override."""
    with pytest.raises(ValueError, match="physical ID 3 is listed under two NUMA nodes"):
        parse_config({"fallbackNumaNodes": {0: "0-3", 1: "3-7"}})


def test_error_codes_accept_hex_strings_and_integers() -> None:
    """``ignoredErrorCodes`` takes the hex spelling operators copy from npu-smi."""
    config = parse_config({"ignoredErrorCodes": ["0x80E01801", 2160721929]})
    assert config.ignored_error_codes == frozenset({0x80E01801, 2160721929})


def test_fault_codes_map_each_code_to_its_class() -> None:
    """``faultCodes`` lists codes per fault class; the parser keeps code → class."""
    config = parse_config({"faultCodes": {"NotHandleFault": ["0x80E01801"], "SeparateNPU": [7]}})
    assert config.fault_codes == {0x80E01801: "NotHandleFault", 7: "SeparateNPU"}


def test_group_size_auto_or_a_number() -> None:
    """``hccsGroupSize`` is "auto" (from the chips' names, the default) or a fixed size."""
    assert parse_config({"hccsGroupSize": "auto"}).hccs_group_size is None
    assert parse_config({"hccsGroupSize": 0}).hccs_group_size == 0


def test_retired_cdi_keys_are_accepted_and_remembered() -> None:
    """useCdi and cdiDir no longer do anything (the host writes CDI), but an old config
    with them still starts; they are kept for a note."""
    config = parse_config({"useCdi": True, "cdiDir": "/var/run/cdi"})
    assert config.retired == ("useCdi", "cdiDir")


def test_skipping_dcmi_needs_a_fallback_chip_type() -> None:
    """useDcmi: false without fallbackChipType could never serve a chip, so it is refused."""
    with pytest.raises(ValueError, match=r"^useDcmi: false needs fallbackChipType "):
        parse_config({"useDcmi": False})
    config = parse_config({"useDcmi": False, "fallbackChipType": "Ascend310P"})
    assert (config.use_dcmi, config.fallback_chip_type) == (False, "Ascend310P")


def test_every_key_is_documented_in_the_readme() -> None:
    """The README's config table lists every key the parser accepts."""
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    missing = [key for key in KEYS if f"| `{key}` |" not in readme]
    assert missing == []
