"""Files the host keeps on the node for others (CDI specs, the feature file) whose last
write failed, by driver: shown in ``devicehost drivers`` while they are retried."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from devicehost.edits.cdi import CdiWriter
    from devicehost.node.labels import NodeLabels


def node_file_errors(
    driver: str, resources: Iterable[str], cdi: CdiWriter | None, labels: NodeLabels | None
) -> list[str]:
    """Why files of ``driver`` (serving ``resources``) are not current on the node."""
    errors = []
    if cdi is not None:
        failed = cdi.errors()
        errors += [failed[r] for r in resources if r in failed]
    if labels is not None and labels.error and any(d.name == driver for d in labels.drivers):
        errors.append(labels.error)
    return errors
