"""The OTLP receiver the benchmarks export to, in a process of its own.

A collector never shares a process with the kubelet: decoding a batch of spans is Python
work that, in the bench's own process, would stall the client that times Allocate and
be counted against devicehost. This runs ``devicehost.testing.OtlpReceiver`` beside the
bench, prints its endpoint, and on SIGTERM prints how many spans it received.

    python -m bench.receiver
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from devicehost.testing import OtlpReceiver


@dataclass
class Receiver:
    endpoint: str
    process: subprocess.Popen[str]
    spans: int = 0


@contextlib.contextmanager
def receiver_process() -> Iterator[Receiver]:
    """A receiver in a child process; ``spans`` is set when the block ends."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.receiver"], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    found = Receiver(process.stdout.readline().strip(), process)
    try:
        yield found
    finally:
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=30)
        found.spans = int(out.strip() or 0)


def main() -> None:
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    receiver = OtlpReceiver().start()
    print(receiver.endpoint, flush=True)
    done.wait()
    receiver.stop()
    print(len(receiver.spans), flush=True)


if __name__ == "__main__":
    main()
