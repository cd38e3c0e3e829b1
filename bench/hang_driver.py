"""A benchmark driver whose ``configure`` never returns: the vendor library that hangs.

Cold start with it beside the bundled drivers shows whether one hung driver delays the
others' resources (it must not).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from devicehost import hookimpl


class HangDriver:
    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any], root: Path) -> None:
        threading.Event().wait()
