"""The channel between the host and a driver's worker process: framed JSON, plain data only.

Each message is a 4-byte big-endian length and a UTF-8 JSON object. JSON, not pickle: the
host decodes what an untrusted process wrote, and JSON can only ever become dicts, lists,
strings, numbers, booleans and None. The host rebuilds its own frozen types from those and
checks them (``validation``); nothing a driver constructs reaches the host as an object.

Messages, host → worker:
  {"call": id, "hook": name, "kwargs": {...}}   run a hook in the worker's call threads
  {"cancel": id}                                the caller gave up: do not start it
  {"watch": [resource, ...]}                    start the driver's watch threads
  {"stop": true}                                 run ``shutdown``, then exit
Worker → host:
  {"ready": {"hooks": [...]}}                   the driver imported and registered
  {"unavailable": reason} / {"failed": reason}  it could not be loaded
  {"invalid": reason}                           pluggy refused its hooks (a code bug)
  {"result": id, "value": plain}                a hook returned
  {"part": id, "value": [...]}                  the first items of a long list answer; its
                                                "result" carries the rest (``in_parts``)
  {"error": id, "kind": "error"|"unavailable"|"value"|"refused"|"cancelled"|"over_limit",
   "message": text}                             over_limit: the answer was over MAX_MESSAGE_BYTES
  {"notify": resource}                          a watch hook called ``notify()``
  {"watch_error": resource, "message": text}    a watch hook raised (it is restarted)
"""

from __future__ import annotations

import dataclasses
import enum
import json
import struct
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

#: A message larger than this is a protocol error: the worker is restarted. The worker checks
#: its own answers against it first and sends an ``over_limit`` error instead, so only a
#: worker that breaks the protocol reaches it. Sized to the pod: JSON of tiny objects
#: (``[{},{},...]``) decodes to ~25 times its size (8 MiB → 193 MiB measured), so 4 MiB is
#: ~100 MiB at worst inside the DaemonSet's 256 MiB; it is also the kubelet's own receive
#: limit, so no single answer the kubelet could read is cut.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
HEADER = struct.Struct(">I")
#: A list answer longer than this is sent in parts of about this size: the host decodes one
#: part at a time and lets its other work run between them, instead of stalling on one
#: ``json.loads`` of megabytes (measured: docs/reliability.md, "Limits").
PART_BYTES = 128 * 1024


class ProtocolError(Exception):
    """The other side sent something that is not a framed JSON object."""


def encode(message: Mapping[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
    return HEADER.pack(len(body)) + body


def decode(body: bytes) -> dict[str, Any]:
    try:
        message = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ProtocolError(f"not a JSON message: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"expected a JSON object, got {type(message).__name__}")
    return message


def body_length(header: bytes) -> int:
    (length,) = HEADER.unpack(header)
    if length > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"a message of {length} bytes is over the {MAX_MESSAGE_BYTES} limit")
    return int(length)


def in_parts(message: dict[str, Any], size: int) -> list[dict[str, Any]]:
    """A ``result`` message whose list ``value`` encodes to ``size`` bytes, as ``part``
    messages of about ``PART_BYTES`` each and a last ``result`` with the rest."""
    items: list[Any] = message["value"]
    step = max(1, len(items) * PART_BYTES // max(size, 1))
    starts = range(0, len(items), step)
    parts = [{"part": message["result"], "value": items[i : i + step]} for i in starts]
    last = parts.pop() if parts else {"value": []}
    return [*parts, {**message, "value": last["value"]}]


class NotPlain(TypeError):
    """A driver returned something that has no plain-data form (a socket, a lambda, …)."""


#: Field names per dataclass type: ``dataclasses.fields`` rebuilds its tuple at every call,
#: and a snapshot converts thousands of devices, each with nested edits.
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def to_plain(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON-ready data: dataclasses by their declared fields, enums by value,
    paths as strings, any iterable as a list. Runs in the worker, on the driver's answer;
    the host checks the result again, so this only has to be total, not trusting."""
    if depth > 32:
        raise NotPlain("nested more than 32 levels deep")
    kind = type(value)
    if kind is str or kind is int or kind is bool:
        return value
    names = _FIELD_NAMES.get(kind)
    if names is not None:
        return {name: to_plain(getattr(value, name), depth + 1) for name in names}
    if value is None or isinstance(value, bool | int | str):
        return value.value if isinstance(value, enum.Enum) else value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise NotPlain(f"{value!r} is not a finite number")
        return value
    if isinstance(value, enum.Enum):
        return to_plain(value.value, depth + 1)
    if isinstance(value, PurePath):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = _FIELD_NAMES[kind] = tuple(f.name for f in dataclasses.fields(value))
        return {name: to_plain(getattr(value, name), depth + 1) for name in names}
    if isinstance(value, Mapping):
        return {str(k): to_plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, bytes | bytearray):
        raise NotPlain(f"bytes {bytes(value)[:20]!r} are not text")
    try:
        items = iter(value)
    except TypeError:
        raise NotPlain(f"{type(value).__name__} {value!r:.80} has no plain form") from None
    return [to_plain(item, depth + 1) for item in items]
