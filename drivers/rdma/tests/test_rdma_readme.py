"""The README stays true: every config key documented, the example valid and as described."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from devicehost_rdma.config import POOL_KEYS, SELECTOR_KEYS, TOP_KEYS
from rdma_helpers import composed, configured, ids, listed

from devicehost.testing import FakeRoot

README = (Path(__file__).parent.parent / "README.md").read_text()


def documented_keys() -> set[str]:
    return set(re.findall(r"^\| `([A-Za-z.\[\]]+)` \|", README, flags=re.MULTILINE))


def test_every_config_key_has_a_row_in_the_table() -> None:
    """Each key the parser accepts appears in the README's config table."""
    expected = {
        *TOP_KEYS,
        *(f"pools[].{k}" for k in POOL_KEYS),
        *(f"pools[].selectors.{k}" for k in SELECTOR_KEYS),
    }
    assert expected - documented_keys() == set()


def test_example_config_is_valid_and_gives_what_the_readme_says(eight_hca_root: FakeRoot) -> None:
    """The HostConfig example parses, and on the simulated node each pool gets the HCAs
    the README lists, with no start-up note."""
    block = README.split("### Example", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    section = yaml.safe_load(block)["drivers"]["rdma"]
    driver = configured(eight_hca_root, section)
    assert driver.devicehost_notes() == []
    assert len(listed(driver, "rdma/hca_shared_devices_a")) == 1000
    assert composed(driver, "rdma/hca_shared_devices_a", ["slot-0"]).envs == {
        "RDMA_DEVICES": "mlx5_6"
    }
    assert composed(driver, "rdma/hca_storage", ["slot-0"]).envs == {"RDMA_DEVICES": "mlx5_7"}
    assert list(ids(driver, "rdma/ib_hca").values()) == [f"mlx5_{i}" for i in range(6)]
    assert ids(driver, "rdma/ib_vf") == {"0000:ad:00.1": "mlx5_8", "0000:ad:00.2": "mlx5_9"}
