"""Which driver owns which resource name: the table both kubelet faces read.

A name one driver declares is claimed for it; a name two or more drivers declare is served
by none of them, whichever started first (the one already serving it withdraws it), so
ownership never depends on which driver started faster. The table says what happened
through two callbacks — ``on_claimed`` and ``on_withdrawn`` — which the host connects to
whatever serves resources; it never serves anything itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from devicehost.drivers.snapshots import ResourceState
from devicehost.drivers.supervisor import DriverHandle
from devicehost.model import ResourceSpec

log = logging.getLogger(__name__)


@dataclass
class Claim:
    """A resource name owned by one driver, with its current snapshot."""

    spec: ResourceSpec
    driver: DriverHandle
    state: ResourceState


class ResourceTable:
    """Every claimed resource by name, and the names refused because they are contested.

    ``admit(name)`` says why a new resource cannot be taken on (e.g. the descriptor
    budget), or None; ``on_claimed`` and ``on_withdrawn`` are told of each claim made and
    each withdrawn because another driver declared the same name.
    """

    def __init__(
        self,
        admit: Callable[[str], str | None] = lambda name: None,
        on_claimed: Callable[[Claim], None] = lambda claim: None,
        on_withdrawn: Callable[[Claim], None] = lambda claim: None,
    ) -> None:
        self.claims: dict[str, Claim] = {}
        #: resource names two or more drivers declared: name → those drivers (by their
        #: names); served by none
        self.contested: dict[str, dict[str, DriverHandle]] = {}
        self.admit = admit
        self.on_claimed = on_claimed
        self.on_withdrawn = on_withdrawn

    def of(self, driver: DriverHandle) -> list[Claim]:
        """The claims ``driver`` holds."""
        return [c for c in self.claims.values() if c.driver is driver]

    def owned_by(self, name: str, driver: DriverHandle) -> bool:
        """Whether ``driver`` still owns ``name`` (not contested since it claimed it)."""
        claim = self.claims.get(name)
        return claim is not None and claim.driver is driver

    def claim(
        self,
        driver: DriverHandle,
        specs: list[ResourceSpec],
        first: bool,
    ) -> dict[str, ResourceState]:
        """The states of ``driver``'s resources: a name it already holds keeps its state, a
        new one is claimed, a contested one is refused (the notes of every driver that
        declared it say so)."""
        states: dict[str, ResourceState] = {}
        for spec in specs:
            owner = self.claims.get(spec.name)
            if owner is not None and owner.driver is driver:
                states[spec.name] = owner.state
                continue
            if owner is not None or spec.name in self.contested:
                self._contest(spec.name, driver, owner)
                continue
            refused = self.admit(spec.name)
            if refused:
                log.error("driver %r: %s", driver.name, refused)
                driver.info.notes.append(refused)
                continue
            if not first:
                log.warning(
                    "driver %r now reports resource %r, which it did not at start-up; it is "
                    "served from now on",
                    driver.name,
                    spec.name,
                )
            claim = Claim(spec, driver, ResourceState(spec.name))
            self.claims[spec.name] = claim
            states[spec.name] = claim.state
            self.on_claimed(claim)
        return states

    def release(self, driver: DriverHandle, name: str) -> None:
        """``driver`` no longer lists ``name``: withdraw it (its streams ended,
        ``on_withdrawn``). A name it does not own is left alone."""
        claim = self.claims.get(name)
        if claim is None or claim.driver is not driver:
            return
        del self.claims[name]
        claim.state.close()
        self.on_withdrawn(claim)

    def _contest(self, name: str, driver: DriverHandle, owner: Claim | None) -> None:
        """Refuse ``name`` for ``driver`` and for every driver that declared it before,
        withdrawing it from the one serving it (its streams ended, ``on_withdrawn``)."""
        drivers = self.contested.setdefault(name, {})
        if owner is not None:
            drivers[owner.driver.name] = owner.driver
            del self.claims[name]
            owner.state.close()
            self.on_withdrawn(owner)
        new = driver.name not in drivers  # else a restart of a driver already refused
        drivers[driver.name] = driver
        names = " and ".join(repr(d) for d in sorted(drivers))
        if new:
            log.error(
                "resource %r is declared by drivers %s; it is served by none of them — "
                "disable all but one (disabledDrivers) and restart",
                name,
                names,
            )
        note = f"resource {name!r} refused: declared by drivers {names}"
        for other in drivers.values():
            info = other.info
            info.notes = [n for n in info.notes if not n.startswith(f"resource {name!r} ")]
            info.notes.append(note)
