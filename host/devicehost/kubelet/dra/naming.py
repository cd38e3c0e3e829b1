"""Names in DRA's terms: the DRA driver name of a devicehost driver, pool and device names.

The API's rules (k8s.io/api resource/v1 ``types.go``): a driver name is a lower-case DNS
subdomain of at most 63 characters (``DriverNameMaxLength``); a pool name at most 253
characters of DNS subdomains joined by ``/`` (``PoolNameMaxLength``); a device name a DNS
label (at most 63 characters of ``[a-z0-9-]``, starting and ending alphanumeric).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

#: ``<driver>.devicehost.io``: the devicehost project's domain, one subdomain per driver.
DRIVER_DOMAIN = "devicehost.io"
MAX_DRIVER_NAME = 63
MAX_POOL_NAME = 253
MAX_DEVICE_NAME = 63
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_RE = re.compile(rf"^{_LABEL}$")
_SUBDOMAIN_RE = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
_NOT_IN_LABEL = re.compile(r"[^a-z0-9]+")
_HASH_LENGTH = 8


def driver_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a DRA driver name, or None when it can."""
    if len(name) > MAX_DRIVER_NAME or not _SUBDOMAIN_RE.match(name):
        return (
            f"DRA driver name {name!r} is not a lower-case DNS subdomain of at most "
            f"{MAX_DRIVER_NAME} characters"
        )
    return None


def driver_name(driver: str, overrides: Mapping[str, str] | None = None) -> str:
    """The DRA driver name of the devicehost driver ``driver``: the operator's override
    when given, else ``<driver>.devicehost.io`` (``nvidia`` → ``nvidia.devicehost.io``).
    ``ValueError`` names the driver when the result is not a valid driver name."""
    given = (overrides or {}).get(driver)
    label = _NOT_IN_LABEL.sub("-", driver.lower()).strip("-")
    name = given if given is not None else f"{label}.{DRIVER_DOMAIN}"
    problem = driver_name_problem(name)
    if problem:
        source = "configured" if given is not None else "derived"
        raise ValueError(f"driver {driver!r}: {source} {problem}")
    return name


def pool_name(node: str) -> str:
    """The pool of one driver on one node: the node's name (a DNS subdomain already)."""
    if len(node) > MAX_POOL_NAME or not _SUBDOMAIN_RE.match(node):
        raise ValueError(f"node name {node!r} is not a DNS subdomain, so it cannot name a pool")
    return node


def device_name(resource: str, device_id: str) -> str:
    """The device's name in its driver's pool, a DNS label, stable for as long as the
    resource and ID are: ``<resource's name part>-<ID>``, lower-cased with every run of
    other characters made one ``-``. When that changed the ID (case, ``:``, ``.``) or had to
    be shortened, ``-`` and 8 hex digits of the SHA-256 of resource and ID follow, so two
    devices that read alike still get different names."""
    short = resource.rpartition("/")[2]
    readable = _NOT_IN_LABEL.sub("-", f"{short}-{device_id}".lower()).strip("-")
    exact = readable == f"{short}-{device_id}" and len(readable) <= MAX_DEVICE_NAME
    if exact and _LABEL_RE.match(readable):
        return readable
    digest = hashlib.sha256(f"{resource}\x00{device_id}".encode()).hexdigest()[:_HASH_LENGTH]
    keep = MAX_DEVICE_NAME - _HASH_LENGTH - 1
    return f"{readable[:keep].rstrip('-') or 'device'}-{digest}"
