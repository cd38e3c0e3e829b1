"""Claims this driver has prepared, kept on the node so a restart answers as before.

One JSON file per DRA driver, beside its socket (the kubelet's ``plugins/<driver>/``),
replaced atomically. Prepare writes the claim's CDI spec first and then the checkpoint;
unprepare drops the claim from the checkpoint first and then the spec. A crash between
the two steps leaves at most a spec no checkpoint names, which the next start removes.

The file sits in a directory other processes of the node can reach, so it is read as
untrusted input: every field's type is checked, a claim's UID must be a UID, and nothing
read from it names a file to act on (a claim's spec path is recomputed from its UID by
the preparer). A file that cannot be parsed as a checkpoint — not JSON, not UTF-8, nested
past the parser's depth, a field of the wrong type — is kept aside as ``.unreadable``; one
that is no regular file (a link, a FIFO) or is over ``MAX_CHECKPOINT_BYTES`` is not read.
Either way the driver starts with no prepared claim, and the next write replaces it.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from devicehost.edits.cdi import write_atomically
from devicehost.system.node_files import Refused, open_regular, read_at_most

log = logging.getLogger(__name__)

FORMAT = 1
#: A Kubernetes UID as the kubelet sends it (the preparer refuses any other).
UID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")
#: A prepared claim file holds a few hundred bytes a claim; past this it is not read.
MAX_CHECKPOINT_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class PreparedDevice:
    """One device of a prepared claim, as the kubelet was answered."""

    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class PreparedClaim:
    namespace: str
    name: str
    spec_file: str
    devices: tuple[PreparedDevice, ...]


def _text(data: Any, key: str) -> str:
    value = data[key]
    if type(value) is not str:
        raise TypeError(f"{key} is {type(value).__name__}, expected a string")
    return value


def _texts(data: Any, key: str) -> tuple[str, ...]:
    values = data[key]
    if type(values) is not list or not all(type(v) is str for v in values):
        raise TypeError(f"{key} is not a list of strings")
    return tuple(values)


def _device_from_plain(data: Any) -> PreparedDevice:
    if type(data) is not dict:
        raise TypeError("a device is not an object")
    return PreparedDevice(
        requests=_texts(data, "requests"),
        pool=_text(data, "pool"),
        device=_text(data, "device"),
        cdi_ids=_texts(data, "cdi_ids"),
    )


def _claim_from_plain(data: Any) -> PreparedClaim:
    if type(data) is not dict or type(data.get("devices")) is not list:
        raise TypeError("a claim is not an object with a list of devices")
    return PreparedClaim(
        namespace=_text(data, "namespace"),
        name=_text(data, "name"),
        spec_file=_text(data, "spec_file"),
        devices=tuple(_device_from_plain(d) for d in data["devices"]),
    )


def _claims_from_plain(data: Any) -> dict[str, PreparedClaim]:
    if type(data) is not dict or data.get("format") != FORMAT:
        found = data.get("format") if type(data) is dict else type(data).__name__
        raise ValueError(f"format {found!r}, expected {FORMAT}")
    claims = data["claims"]
    if type(claims) is not dict:
        raise TypeError("claims is not an object")
    for uid in claims:
        if not UID_RE.match(uid):
            raise ValueError(f"claim UID {uid!r:.80} is not a UID")
    return {uid: _claim_from_plain(c) for uid, c in claims.items()}


class Checkpoint:
    """The prepared claims by UID, read at start and written on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.claims: dict[str, PreparedClaim] = self._load()

    def reload(self) -> None:
        """Read the file again: another instance of this driver (a rolling update's) may
        have written it since."""
        self.claims = self._load()

    def _load(self) -> dict[str, PreparedClaim]:
        try:
            with open_regular(self.path) as (fd, _):
                raw = read_at_most(fd, MAX_CHECKPOINT_BYTES)
        except FileNotFoundError:
            return {}
        except (Refused, OSError) as exc:  # not a file: the next write replaces it, or fails
            log.error("DRA checkpoint %s cannot be read: %s", self.path, _why(exc))
            return {}
        try:
            return _claims_from_plain(json.loads(raw))
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            self._keep_aside(exc)
            return {}

    def _keep_aside(self, why: BaseException) -> None:
        kept = self.path.with_name(self.path.name + ".unreadable")
        try:
            os.replace(self.path, kept)
        except OSError as exc:
            log.error("DRA checkpoint %s cannot be kept aside: %s", self.path, exc.strerror)
        log.error(
            "DRA checkpoint %s is unreadable (%s: %.200s); kept as %s, starting with no "
            "prepared claim (the kubelet prepares them again)",
            self.path,
            type(why).__name__,
            why,
            kept,
        )

    def _save(self, claims: dict[str, PreparedClaim]) -> None:
        """Write ``claims``, then hold them: a failed write changes nothing."""
        plain = {"format": FORMAT, "claims": {u: asdict(c) for u, c in claims.items()}}
        write_atomically(self.path, json.dumps(plain, indent=1, sort_keys=True) + "\n")
        self.claims = claims

    def put(self, uid: str, claim: PreparedClaim) -> None:
        self._save({**self.claims, uid: claim})

    def drop(self, uid: str) -> PreparedClaim | None:
        claim = self.claims.get(uid)
        if claim is not None:
            self._save({u: c for u, c in self.claims.items() if u != uid})
        return claim


def _why(exc: Exception) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
