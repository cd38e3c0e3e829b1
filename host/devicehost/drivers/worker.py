"""A driver's own process: import one driver, run its hooks, send plain data to the host.

Forked by the zygote (``zygote``: a process that never started a thread or imported gRPC),
with one end of a socket pair as ``--fd``. It holds only the driver, pluggy and
devicehost's model; no gRPC, no OpenTelemetry. Whatever the
driver does here — raise ``SystemExit``, segfault in a vendor library, hang, return junk —
costs this process alone: the host reports the driver's devices Unhealthy and restarts it.

Hook calls run in a small pool of threads, so a hung hook holds one thread while the rest
keep answering. A call the host gave up on before a thread took it is dropped, not run
late. When the host goes away (the channel closes, or the host dies: the kernel sends
SIGKILL through ``PR_SET_PDEATHSIG``), the worker exits.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import logging
import os
import queue
import signal
import socket
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from devicehost import hookspecs
from devicehost.drivers.plugin_manager import new_plugin_manager, register
from devicehost.drivers.protocol import (
    HEADER,
    MAX_MESSAGE_BYTES,
    PART_BYTES,
    NotPlain,
    body_length,
    decode,
    encode,
    in_parts,
    to_plain,
)
from devicehost.errors import DriverUnavailable, RequestRefused, UnknownDevice
from devicehost.system.entry_points import load_object
from devicehost.system.subprocesses import add_parent_pid_argument, die_with_parent, name_process

log = logging.getLogger("devicehost.worker")
#: the job entry that volunteers enumerations after a start-up sequence
VOLUNTEER = "volunteer enumerations"

CALL_THREADS = 4
SHUTDOWN_SECONDS = 1.5
WATCH_RESTART_MAX_SECONDS = 30.0
#: Hooks that take the host's ``/`` as a path.
PATH_ARGUMENTS = frozenset({"root"})


def _missing_vendor_module(exc: BaseException, value: str) -> str | None:
    """The name of a missing third-party module, if that is why the import failed."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    own_package = value.split(":", 1)[0].split(".", 1)[0]
    if exc.name.split(".", 1)[0] == own_package:
        return None
    return exc.name


def _find_entry_point(group: str, name: str, distribution: str) -> str | None:
    """``module:attribute`` of the driver's entry point, read from the installed metadata
    (only when the host did not pass it: reading metadata costs start-up time and memory)."""
    from importlib_metadata import entry_points

    for ep in entry_points(group=group, name=name):
        dist = ep.dist
        if dist is None or not distribution or (dist.metadata["Name"] or dist.name) == distribution:
            return ep.value  # type: ignore[no-any-return]
    return None


class Worker:
    def __init__(self, channel: socket.socket, name: str) -> None:
        self.channel = channel
        self.name = name
        self.pm = new_plugin_manager()
        self._send_lock = threading.Lock()
        #: each job is calls to run one after the other (usually one)
        self._calls: queue.SimpleQueue[list[tuple[int, str, dict[str, Any]]] | None] = (
            queue.SimpleQueue()
        )
        self._cancelled: set[int] = set()
        self._cancel_lock = threading.Lock()
        self._stop = threading.Event()
        #: the resources the last ``resources`` call named (for ``then_enumerate``)
        self._early_resources: list[str] = []
        #: resource → what the driver's enumerate last returned for it, for its watch
        self._enumerated: dict[str, tuple[Any, ...]] = {}
        #: resources whose watch runs (a resource withdrawn and listed again keeps its one)
        self._watched: set[str] = set()
        hookspecs._send_resources_changed = lambda: self.send({"resources_changed": True})

    # -- channel ---------------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        data = encode(message)
        if len(data) - HEADER.size > MAX_MESSAGE_BYTES:
            if "volunteered" in message:
                return  # the host asks for it itself, and gets the error below
            call_id = message.get("result", message.get("error"))
            data = encode(
                {
                    "error": call_id,
                    "kind": "over_limit",
                    "message": f"its answer is {len(data) - HEADER.size} bytes, over the "
                    f"channel's {MAX_MESSAGE_BYTES}-byte message limit",
                }
            )
        elif len(data) > PART_BYTES and "result" in message and isinstance(message["value"], list):
            data = b"".join(encode(part) for part in in_parts(message, len(data)))
        with self._send_lock:
            try:
                self.channel.sendall(data)
            except OSError:
                os._exit(0)  # the host is gone

    def _receive(self) -> dict[str, Any] | None:
        header = self._read_exactly(HEADER.size)
        if header is None:
            return None
        body = self._read_exactly(body_length(header))
        return None if body is None else decode(body)

    def _read_exactly(self, size: int) -> bytes | None:
        chunks, left = [], size
        while left:
            try:
                chunk = self.channel.recv(min(left, 1 << 20))
            except OSError:
                return None
            if not chunk:
                return None
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    # -- loading ---------------------------------------------------------------------------

    def load(self, group: str, distribution: str, value: str = "") -> bool:
        """Import the driver and register it; tell the host how that went."""
        value = value or _find_entry_point(group, self.name, distribution) or ""
        if not value:
            self.send({"failed": f"no entry point {self.name!r} in group {group!r}"})
            return False
        try:
            obj = load_object(value)
            plugin = obj() if inspect.isclass(obj) else obj
        except DriverUnavailable as exc:
            self.send({"unavailable": str(exc)})
            return False
        except BaseException as exc:  # SystemExit and KeyboardInterrupt at import too
            missing = _missing_vendor_module(exc, value)
            if missing:
                self.send({"unavailable": f"vendor library {missing!r} is not installed"})
            else:
                log.error("import of %s failed", value, exc_info=True)
                self.send({"failed": f"import of {value} failed: {type(exc).__name__}: {exc}"})
            return False
        problem = register(self.pm, plugin, self.name)
        if problem:
            self.send({"invalid": problem})
            return False
        hooks = [
            hook
            for hook in hookspecs.HOOK_NAMES
            if any(impl.plugin is plugin for impl in getattr(self.pm.hook, hook).get_hookimpls())
        ]
        self.send({"ready": {"hooks": hooks, "pid": os.getpid()}})
        return True

    # -- calls -----------------------------------------------------------------------------

    def call(self, hook: str, kwargs: dict[str, Any]) -> Any:
        """Run one hook; non-``firstresult`` hooks answer with the driver's single result."""
        for key in PATH_ARGUMENTS & kwargs.keys():
            kwargs[key] = Path(kwargs[key])
        caller = getattr(self.pm.hook, hook)
        result = caller(**kwargs)
        if caller.spec is not None and not caller.spec.opts.get("firstresult"):
            result = result[0] if result else None
        if hook == "devicehost_enumerate" and (
            isinstance(result, (list, tuple)) or inspect.isgenerator(result)
        ):
            result = tuple(result)  # kept whole for the watch, once consumed
            self._enumerated[str(kwargs.get("resource"))] = result
        return result

    def _run_call(self, call_id: int, hook: str, kwargs: dict[str, Any]) -> None:
        with self._cancel_lock:
            if call_id in self._cancelled:
                self._cancelled.discard(call_id)
                self.send({"error": call_id, "kind": "cancelled", "message": "not started"})
                return
        try:
            value = to_plain(self.call(hook, kwargs))
            if hook == "devicehost_resources" and isinstance(value, list):
                self._early_resources = [
                    str(r["name"]) for r in value if isinstance(r, dict) and "name" in r
                ]
        except DriverUnavailable as exc:
            self.send({"error": call_id, "kind": "unavailable", "message": str(exc)})
        except RequestRefused as exc:
            self.send({"error": call_id, "kind": "refused", "message": str(exc)})
        except UnknownDevice as exc:
            self.send(
                {
                    "error": call_id,
                    "kind": "unknown",
                    "message": str(exc),
                    "resource": str(exc.resource),
                    "device_id": str(exc.device_id),
                }
            )
        except NotPlain as exc:
            self.send({"error": call_id, "kind": "error", "message": f"returned {exc}"})
        except ValueError as exc:
            self.send({"error": call_id, "kind": "value", "message": f"ValueError: {exc}"})
        except BaseException as exc:  # SystemExit, KeyboardInterrupt, GeneratorExit, …
            log.debug("hook %s raised", hook, exc_info=True)
            self.send({"error": call_id, "kind": "error", "message": _describe(exc)})
        else:
            self.send({"result": call_id, "value": value})
        finally:
            with self._cancel_lock:
                self._cancelled.discard(call_id)

    def _call_thread(self) -> None:
        while True:
            job = self._calls.get()
            if job is None:
                return
            for call in job:
                if call[1] == VOLUNTEER:
                    self._volunteer_enumerations()
                else:
                    self._run_call(*call)

    def _volunteer_enumerations(self) -> None:
        """Enumerate each resource the early ``resources`` call named and send the answers
        unasked: the host's first snapshot needs them, and it is still importing. A hook
        that fails sends nothing; the host asks again and gets the error."""
        for resource in self._early_resources:
            try:
                value = to_plain(self.call("devicehost_enumerate", {"resource": resource}))
            except BaseException:
                continue
            self.send({"volunteered": resource, "value": value})
        self.send({"volunteered_all": True})

    # -- watch -----------------------------------------------------------------------------

    def _watch(self, resource: str) -> None:
        # The host enumerates once more as each watch starts, so a change between its first
        # snapshot and this notify is never missed; one after it but before the watch's own
        # baseline is caught only by a watch that compares with ``enumerated()`` (hookspec).
        self.send({"notify": resource})
        delay = 1.0
        while not self._stop.is_set():
            try:
                self.pm.hook.devicehost_watch(
                    resource=resource,
                    notify=lambda: self.send({"notify": resource}),
                    stop=self._stop,
                    enumerated=lambda: self._enumerated.get(resource, ()),
                )
                delay = 1.0
            except BaseException as exc:
                self.send({"watch_error": resource, "message": _describe(exc)})
            if self._stop.wait(delay):
                return
            delay = min(delay * 2, WATCH_RESTART_MAX_SECONDS)

    # -- main loop -------------------------------------------------------------------------

    def serve(self) -> None:
        for index in range(CALL_THREADS):
            threading.Thread(target=self._call_thread, name=f"call-{index}", daemon=True).start()
        while True:
            message = self._receive()
            if message is None or message.get("stop"):
                self._shutdown()
            elif "call" in message:
                self._calls.put([(int(message["call"]), str(message["hook"]), message["kwargs"])])
            elif "sequence" in message:  # start-up calls that must run in order
                calls = [(int(c["call"]), str(c["hook"]), c["kwargs"]) for c in message["sequence"]]
                if message.get("then_enumerate"):
                    calls.append((0, VOLUNTEER, {}))
                self._calls.put(calls)
            elif "ping" in message:
                self.send({"pong": True})
            elif "cancel" in message:
                with self._cancel_lock:
                    self._cancelled.add(int(message["cancel"]))
            elif "watch" in message:
                for resource in map(str, message["watch"]):
                    if resource in self._watched:
                        continue
                    self._watched.add(resource)
                    threading.Thread(
                        target=self._watch, args=(resource,), name="watch", daemon=True
                    ).start()

    def _shutdown(self) -> None:
        """Let watches return, give ``shutdown`` a moment, and exit whatever still hangs."""
        self._stop.set()
        done = threading.Event()

        def shutdown() -> None:
            with contextlib.suppress(BaseException):
                self.pm.hook.devicehost_shutdown()
            done.set()

        threading.Thread(target=shutdown, name="shutdown", daemon=True).start()
        done.wait(SHUTDOWN_SECONDS)
        sys.stderr.flush()
        os._exit(0)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _excepthook(args: threading.ExceptHookArgs) -> None:
    """A thread's stray exception is logged, never printed raw."""
    trace = "".join(traceback.format_exception(args.exc_value))
    log.error("thread %s: %s", args.thread.name if args.thread else "?", trace)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m devicehost.drivers.worker")
    parser.add_argument("--fd", type=int, required=True, help="the channel's file descriptor")
    parser.add_argument("--group", required=True, help="entry-point group")
    parser.add_argument("--name", required=True, help="entry-point name of the driver")
    parser.add_argument("--distribution", default="", help="distribution that provides it")
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--entry-point", default="", help="module:attribute of the driver")
    add_parent_pid_argument(parser)
    args = parser.parse_args(argv)
    die_with_parent(args.parent_pid)
    name_process(f"dh-{args.name}")
    # The driver's prints, and C libraries writing to fd 1, go to the log, not anywhere else.
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the host decides when a worker stops
    logging.basicConfig(
        stream=sys.stderr,
        level=args.log_level.upper(),
        format="%(levelname)s %(name)s: %(message)s",
        force=True,  # forked by the zygote: nothing of its parent's logging is ours
    )
    threading.excepthook = _excepthook
    channel = socket.socket(fileno=args.fd)
    worker = Worker(channel, args.name)
    if worker.load(args.group, args.distribution, args.entry_point):
        worker.serve()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
