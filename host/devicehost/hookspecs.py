# mypy: disable-error-code="empty-body"
"""The hooks a driver implements: the whole contract between devicehost and a vendor.

A driver is a module (or object) with functions marked ``@devicehost.hookimpl``, made
known through an entry point in the group ``devicehost.drivers``. All hooks are
synchronous and take keyword arguments. Each driver runs in its own worker process (forked
for it alone by a zygote that never imports a driver; the host supervises it); hooks run
there in a few threads, each
call with a timeout, so a driver may block on its vendor library and even crash without
touching another driver. Only plain data crosses back: the host rebuilds and checks every
answer. A driver implements only the hooks it needs and may accept only the parameters it
uses.

Lifecycle, in order: ``simulate`` (only under ``--simulate``/demo) → ``configure`` →
``resources`` → per resource ``enumerate`` (on an interval and on ``notify``) and
``watch`` (one thread each) → ``preferred_allocation`` / ``allocate`` / ``pre_start``
(on kubelet requests) → ``shutdown``.

Non-driver *policy plugins* (group ``devicehost.policies``) may wrap any hook with
``@devicehost.hookimpl(wrapper=True)``; they see every driver's calls but never answer
one themselves.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pluggy

from devicehost.model import Allocation, Device, HostPath, ResourceSpec

PROJECT = "devicehost"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

#: Set by the driver's worker process to send the signal to the host; None elsewhere.
_send_resources_changed: Callable[[], None] | None = None


def resources_changed() -> None:
    """Tell the host that this driver's resources changed (a PF's services reconfigured,
    VFs created after start): it calls ``devicehost_resources`` again at once, serving a
    new name and withdrawing one no longer listed. Cheap and thread-safe; call it from a
    watch or a thread of your own. Outside a worker (a driver's own unit test) it does
    nothing. Without it the host still re-asks on each safety scan."""
    send = _send_resources_changed
    if send is not None:
        send()


# -- start-up ----------------------------------------------------------------------------


@hookspec
def devicehost_simulate(root: Path, config: Mapping[str, Any], node: str) -> None:
    """Build this driver's simulated hardware under ``root``.

    Called once, before ``configure``, only by ``devicehost demo`` and
    ``devicehost run --simulate``. Write the fake sysfs/dev tree the driver reads (the
    testing kit's ``FakeRoot`` helps) and prepare the simulated vendor library, so the
    rest of the driver runs the same code paths as on real hardware.

    :param root: an empty directory of this driver's own that stands in for the host's
        ``/``; the same path is passed to ``configure`` as ``root``.
    :param config: this driver's config section (the one ``configure`` will get), so a
        simulation can follow it (how many devices, which mode).
    :param node: the name of the simulated machine to build (``--node``), such as
        ``dgx-h100`` or ``atlas-800-9000``; ``""`` means the driver's default. Build only
        this driver's part of that machine, and nothing when it has none of your hardware.
        ``devicehost demo --list-nodes`` lists the names.
    """


@hookspec
def devicehost_configure(config: Mapping[str, Any], root: Path, simulated: bool) -> None:
    """Receive this driver's config section, once, before any other hook but ``simulate``.

    :param config: the mapping under ``drivers.<name>`` in the HostConfig (empty when
        absent). Raise ``ValueError`` naming the key for a bad value: the host reports it
        as a config error at start-up.
    :param root: the host's ``/`` as seen by this process (``/host`` in the DaemonSet);
        read every sysfs and /dev path under it.
    :param simulated: true under ``--simulate`` and ``demo``: use the simulated vendor
        library shipped with the driver instead of the real one.

    Raise ``devicehost.DriverUnavailable`` when this node has no such hardware or vendor
    library; the driver is then listed as unavailable with your message, and started
    again every ``unavailableRetrySeconds`` (60) in case the hardware appears.
    """


@hookspec
def devicehost_resources() -> Sequence[ResourceSpec]:
    """Return the resources this driver serves on this node.

    Called after ``configure``, and again on each safety scan and after
    ``devicehost.resources_changed()``: a name newly listed is served, a name no longer
    listed is withdrawn. An empty sequence means "nothing here" and is normal on a
    heterogeneous fleet. Each resource gets its own socket and registration.
    A resource name another driver declares too is served by neither (docs/operating.md).
    """


@hookspec
def devicehost_notes() -> Sequence[str]:
    """Return short notes about how this driver runs on this node, for operators.

    Optional. Called after ``resources``. Each note is shown by ``devicehost drivers`` and
    ``devicehost devices`` and logged at start: a fallback taken ("no DCMI library; chips
    found from /dev"), a start-up check that failed ("RDMA namespace mode is exclusive:
    shared pools are unusable"), a pool that matched nothing and why.
    """


@hookspec
def devicehost_labels() -> Mapping[str, str]:
    """Describe this node's hardware as node feature labels.

    Optional. Called after ``resources`` and again after each scan that changed a device.
    Return ``{key: value}``; the host writes each as
    ``devicehost.feature.node.kubernetes.io/<driver>.<key>=<value>`` into a
    node-feature-discovery local feature file. Use the shared vocabulary where it fits
    (``present``, ``count``, ``product``, ``family``, ``memory-mib``, ``driver-version``,
    ``firmware-version``, ``mig-capable``, ``link-layer``): keys are lower case, at most 40
    characters of ``[a-z0-9.-]``; values at most 63 characters of ``[A-Za-z0-9._-]``.
    Anything else is dropped with a log line naming you.
    """


@hookspec
def devicehost_host_paths() -> Sequence[HostPath]:
    """Return every host path this driver reads, so the deployment mounts only those.

    Optional; called without ``configure`` (by ``devicehost mounts``) as well as after it,
    so answer from what the driver may read on any node, not only this one: sysfs
    subtrees, ``/dev`` subtrees, vendor library and driver directories. The manifests
    mount exactly the union of every installed driver's paths and the host's own.
    """


# -- devices -----------------------------------------------------------------------------


@hookspec(firstresult=True)
def devicehost_enumerate(resource: str) -> Sequence[Device]:
    """Return the full current device list of ``resource``, health included.

    Stops at the first non-None result. Called on the scan interval and at once after
    ``notify()`` from ``watch``. Return the truth now: a device that recovered is
    Healthy again, a device that vanished is absent. IDs must be unique, at most 63
    characters, without ``/``; invalid devices are dropped with a log line naming you.
    Raising marks the resource's devices Unhealthy until a later call succeeds.
    """


@hookspec
def devicehost_watch(
    resource: str,
    notify: Callable[[], None],
    stop: threading.Event,
    enumerated: Callable[[], Sequence[Device]],
) -> None:
    """Block, waiting for vendor events about ``resource``; call ``notify()`` on each.

    Optional. Runs in a dedicated thread for the life of the process. ``notify()`` is
    cheap and thread-safe: the host re-enumerates at once, so health reaches the kubelet
    in milliseconds rather than one scan interval. Return when ``stop`` is set (wait on
    it with a short timeout between vendor calls). If the hook raises, it is restarted
    after a back-off and the scan interval still applies.

    A watch that polls state rather than receiving events compares what it sees with
    ``enumerated()`` — the devices your ``devicehost_enumerate`` last returned for
    ``resource``, which is what the kubelet was told — and notifies when they differ.
    Comparing with its own last look instead misses a state an enumeration caught
    between two looks (a fault that cleared within one poll): the kubelet would keep it
    until the next safety scan. Take the parameter only if you use it.
    """


# -- kubelet requests --------------------------------------------------------------------


@hookspec(firstresult=True)
def devicehost_preferred_allocation(
    resource: str, available: Sequence[str], must_include: Sequence[str], size: int
) -> Sequence[str] | None:
    """Choose ``size`` devices from ``available`` for one container, topology-aware.

    Optional; stops at the first non-None result. Must contain every ID in
    ``must_include``. Return None to fall back to the host's default (must-include
    first, then the fewest NUMA nodes, then a stable order). The host has already
    refused impossible requests, so ``size <= len(available)`` holds.
    """


@hookspec(firstresult=True)
def devicehost_allocate(resource: str, device_ids: Sequence[str]) -> Allocation | None:
    """Do work that must happen at allocation time; return extra edits for one container.

    Optional, and rarely needed: what a device needs in a container is declared with the
    device (``Device.edits``) and the resource (``ResourceSpec.edits``), and the host
    composes every Allocate answer from those without calling the driver. Implement this
    only for work that cannot be known before the request (a per-allocation token, a
    partition created on demand). Stops at the first non-None result; the answer is merged
    with the composed edits, and a clash with them refuses the Allocate. The host has
    already checked every ID against its latest snapshot (advertised and Healthy); an ID
    you no longer know (gone since that snapshot) must raise
    ``devicehost.UnknownDevice(resource, device_id)``, which the kubelet gets as
    INVALID_ARGUMENT (``check_driver`` checks it). Policy plugins may wrap this hook to add
    to the answer.
    """


@hookspec
def devicehost_pre_start(resource: str, device_ids: Sequence[str]) -> None:
    """Prepare ``device_ids`` just before the container starts (reset, check, …).

    Optional. Implementing it makes the host register every resource of the driver with
    ``pre_start_required``, so the kubelet calls PreStartContainer before each container
    start; return at once for resources that need nothing. The kubelet gives it 30 s.
    Raise to fail the container start with your message.
    """


@hookspec(firstresult=True)
def devicehost_simulate_health(resource: str, device_id: str, healthy: bool) -> bool | None:
    """Under simulation only: make the simulated hardware report ``device_id`` (un)healthy.

    Optional; stops at the first non-None result. Return True when applied. Drive the
    simulated vendor library or fake sysfs the way a real fault or repair would show, so
    the change flows through ``watch`` and ``enumerate`` exactly as on hardware. Used by
    ``devicehost demo`` and tests.
    """


# -- shutdown ----------------------------------------------------------------------------


@hookspec
def devicehost_shutdown() -> None:
    """Release vendor handles. Called once when the process stops; keep it short."""


#: Every hook, in lifecycle order (docs and tests iterate over it).
HOOK_NAMES: tuple[str, ...] = (
    "devicehost_simulate",
    "devicehost_configure",
    "devicehost_resources",
    "devicehost_notes",
    "devicehost_labels",
    "devicehost_host_paths",
    "devicehost_enumerate",
    "devicehost_watch",
    "devicehost_preferred_allocation",
    "devicehost_allocate",
    "devicehost_pre_start",
    "devicehost_simulate_health",
    "devicehost_shutdown",
)
