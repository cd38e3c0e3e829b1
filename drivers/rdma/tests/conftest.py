"""Fixtures for the rdma driver's tests (the testing kit's come through its pytest plugin)."""

from __future__ import annotations

import pytest
from devicehost_rdma.simulated import eight_hca_node

from devicehost.testing import FakeRoot


@pytest.fixture(scope="module")
def eight_hca_root(tmp_path_factory: pytest.TempPathFactory) -> FakeRoot:
    """One eight-HCA node shared by a module's tests, which must only read it (writing
    the ~500 files of a node is the slowest part of these tests)."""
    root = FakeRoot(tmp_path_factory.mktemp("eight-hca"))
    eight_hca_node(root)
    return root
