"""Claims this driver has prepared, kept on the node so a restart answers as before.

One JSON file per DRA driver, beside its socket (the kubelet's ``plugins/<driver>/``),
replaced atomically. Prepare writes the claim's CDI spec first and then the checkpoint;
unprepare drops the claim from the checkpoint first and then the spec. A crash between
the two steps leaves at most a spec no checkpoint names, which the next start removes.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from devicehost.edits.cdi import write_atomically

log = logging.getLogger(__name__)

FORMAT = 1


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


def _claim_from_plain(data: dict[str, Any]) -> PreparedClaim:
    return PreparedClaim(
        namespace=str(data["namespace"]),
        name=str(data["name"]),
        spec_file=str(data["spec_file"]),
        devices=tuple(
            PreparedDevice(
                requests=tuple(d["requests"]),
                pool=d["pool"],
                device=d["device"],
                cdi_ids=tuple(d["cdi_ids"]),
            )
            for d in data["devices"]
        ),
    )


class Checkpoint:
    """The prepared claims by UID, read at start and written on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.claims: dict[str, PreparedClaim] = self._load()

    def _load(self) -> dict[str, PreparedClaim]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        except OSError as exc:  # prepares then fail on writing it, each with the reason
            log.error("DRA checkpoint %s cannot be read: %s", self.path, exc.strerror or exc)
            return {}
        try:
            data = json.loads(text)
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {FORMAT}")
            return {uid: _claim_from_plain(c) for uid, c in data["claims"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            kept = self.path.with_name(self.path.name + ".unreadable")
            os.replace(self.path, kept)
            log.error(
                "DRA checkpoint %s is unreadable (%s); kept as %s, starting with no prepared "
                "claim (the kubelet prepares them again)",
                self.path,
                exc,
                kept,
            )
            return {}

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
