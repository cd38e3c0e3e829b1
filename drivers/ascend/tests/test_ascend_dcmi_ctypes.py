"""The ctypes declarations keep dcmi_interface_api.h's layouts, and loading reports why not.

No libdcmi.so exists here, so the calls themselves cannot run; what can go wrong silently
(a structure that is too small for DCMI to write into, a field at the wrong offset) is
checked against the sizes and offsets the C compiler gives the header's structures.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest
from devicehost_ascend import dcmi_ctypes as dc

from devicehost.testing import FakeRoot


@pytest.mark.parametrize(
    ("structure", "size"),
    [
        (dc.ChipInfo, 100),
        (dc.PcieInfoAll, 64),  # the header: "the size of dcmi_pcie_info_all is 64"
        (dc.PcieInfo, 28),
        (dc.BaseResource, 64),
        (dc.ComputingResource, 96),
        (dc.MediaResource, 56),
        (dc.SocTotalResource, 360),
        (dc.VdevQuery, 264),
        (dc.EventFilter, 48),
        (dc.DmsFaultEvent, 352),
        (dc.Event, 360),
        (dc.HbmInfo, 32),
        (dc.MemoryInfo, 112),
    ],
)
def test_structure_sizes_match_the_c_layout(structure: type[ctypes.Structure], size: int) -> None:
    """Each structure is exactly as large as its C counterpart on LP64 Linux."""
    assert ctypes.sizeof(structure) == size


@pytest.mark.parametrize(
    ("structure", "field", "offset"),
    [
        (dc.ChipInfo, "chip_name", 32),
        (dc.PcieInfoAll, "domain", 16),
        (dc.PcieInfoAll, "bdf_busid", 20),
        (dc.SocTotalResource, "base", 144),
        (dc.SocTotalResource, "computing", 208),
        (dc.VdevQuery, "query_info", 8),
        (dc.VdevQueryInfo, "computing", 104),
        (dc.DmsFaultEvent, "assertion", 11),
        (dc.DmsFaultEvent, "alarm_raised_time", 24),
        (dc.DmsFaultEvent, "event_name", 32),
        (dc.Event, "event_t", 8),
    ],
)
def test_fields_the_driver_reads_sit_at_the_c_offsets(
    structure: type[ctypes.Structure], field: str, offset: int
) -> None:
    """The fields read back from DCMI are where the C compiler puts them."""
    assert getattr(structure, field).offset == offset


def test_usual_install_paths_are_searched_under_root() -> None:
    """Without dcmiLibrary, the usual install paths are tried under the host root."""
    assert dc.library_candidates(Path("/host"), "") == [
        Path("/host/usr/local/dcmi/libdcmi.so"),
        Path("/host/usr/local/Ascend/driver/lib64/driver/libdcmi.so"),
        Path("/host/usr/local/Ascend/driver/lib64/libdcmi.so"),
        Path("/host/usr/local/Ascend/driver/lib64/common/libdcmi.so"),
    ]


def test_configured_library_is_the_only_one_tried() -> None:
    """dcmiLibrary replaces the search, still under the host root."""
    assert dc.library_candidates(Path("/host"), "/opt/dcmi/libdcmi.so") == [
        Path("/host/opt/dcmi/libdcmi.so")
    ]


def test_missing_library_says_where_it_looked(fake_root: FakeRoot) -> None:
    """No file at any path: no library, and the reason lists the paths and the root."""
    library, reason = dc.load_dcmi(fake_root.path, "/opt/libdcmi.so")
    assert library is None
    assert reason == f"no libdcmi.so at /opt/libdcmi.so under {fake_root.path}"
