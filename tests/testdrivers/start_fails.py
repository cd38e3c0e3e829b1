"""A driver whose worker dies as it loads the driver while the file named by
``DEVICEHOST_TEST_START_FAILS`` exists: its worker can never be started, as when every
helper that starts workers dies at once (a host in a container it does not understand).
Remove the file and the next restart brings the driver up (``Scripted``)."""

from __future__ import annotations

import os
import sys

if os.path.exists(os.environ.get("DEVICEHOST_TEST_START_FAILS", "/nonexistent")):
    print("start_fails: failing on purpose while the marker file exists", file=sys.stderr)
    sys.stderr.flush()
    os._exit(3)

from testdrivers.scripted import Scripted


class StartFails(Scripted):
    """``Scripted``, once its worker may start."""
