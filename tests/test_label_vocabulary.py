"""Node feature labels are named alike across vendors: docs/hooks.md's table of the bundled
drivers' labels is exactly what each driver reports on its published machine, and the keys
every vendor shares are written by every bundled driver."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest
from devicehost_ascend.driver import AscendDriver
from devicehost_nvidia import NvidiaDriver
from devicehost_rdma.driver import RdmaDriver

HOOKS_DOC = Path(__file__).resolve().parents[1] / "docs" / "hooks.md"
HEADING = "#### Labels the bundled drivers write"
DRIVERS: dict[str, type[Any]] = {"nvidia": NvidiaDriver, "ascend": AscendDriver, "rdma": RdmaDriver}
#: Keys every bundled driver writes, under the same name.
SHARED = {"present", "count", "product", "firmware-version"}


def documented() -> dict[str, tuple[str, dict[str, str]]]:
    """driver -> (machine, {key: value}) from the table under HEADING."""
    section = HOOKS_DOC.read_text().split(HEADING, 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    columns = {}
    for index, title in enumerate(header[2:], start=2):
        match = re.fullmatch(r"(\w+) \(`([\w-]+)`\)", title)
        assert match, f"column title {title!r} is not 'driver (`machine`)'"
        columns[index] = match.groups()
    table: dict[str, tuple[str, dict[str, str]]] = {d: (m, {}) for d, m in columns.values()}
    for row in rows[2:]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        key = cells[0].strip("`")
        for index, (driver, _) in columns.items():
            if cells[index] != "—":
                table[driver][1][key] = cells[index].strip("`")
    return table


def labels_on(driver_name: str, machine: str, root: Path) -> dict[str, str]:
    driver = DRIVERS[driver_name]()
    # pluggy hands an implementation only the arguments it names; so does this.
    wanted = inspect.signature(driver.devicehost_simulate).parameters
    given = {"root": root, "config": {}, "node": machine}
    driver.devicehost_simulate(**{k: v for k, v in given.items() if k in wanted})
    driver.devicehost_configure(config={}, root=root, simulated=True)
    try:
        return dict(driver.devicehost_labels())
    finally:
        if hasattr(driver, "devicehost_shutdown"):  # an optional hook
            driver.devicehost_shutdown()


def test_the_table_covers_every_bundled_driver() -> None:
    assert set(documented()) == set(DRIVERS)


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_documented_labels_are_what_the_driver_reports(driver: str, tmp_path: Path) -> None:
    """The driver's labels on its published machine, keys and values, are the table's."""
    machine, expected = documented()[driver]
    assert labels_on(driver, machine, tmp_path) == expected


def test_shared_keys_are_written_by_every_vendor() -> None:
    """present, count, product and firmware-version are written by all three drivers;
    keys two drivers write mean one thing (the table has one meaning per key)."""
    for driver, (_, labels) in documented().items():
        assert set(labels) >= SHARED, driver
