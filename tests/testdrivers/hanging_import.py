"""A driver whose module never finishes importing (a vendor SDK that waits at import for a
daemon that is not there). Only its worker process may wait; the host must not."""

import threading

threading.Event().wait()
