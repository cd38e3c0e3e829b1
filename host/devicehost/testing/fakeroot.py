"""Build fake sysfs and /dev trees under a directory that stands in for the host's ``/``.

Drivers read every hardware path under their ``root``; tests and ``devicehost demo`` give
them a ``FakeRoot`` instead of ``/``. Links are relative, as in real sysfs, so a tree
moved or mounted elsewhere still resolves.

A simulated node is built at every ``devicehost run --simulate`` start, hundreds of files
each: the writes use bare system calls on string paths and create parent directories only
when the kernel says one is missing (an RDMA node: 13 → 5 ms).

Device nodes are real character devices when this process may make them (root, or
``CAP_MKNOD``): a container runtime refuses a regular file where an Allocate answer or a
CDI spec names a device node ("not a device node"). They carry the numbers of
``/dev/null`` (1:3), so a container given one can open it and nothing happens. Elsewhere
(an unprivileged demo or test) they are empty regular files, said once in the log.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
NEW_FILE = os.O_WRONLY | os.O_CREAT
#: The major and minor number of every simulated device node: ``/dev/null``'s, harmless to
#: open, read and write, and allowed in every container's device cgroup already.
SIMULATED_DEVICE = os.makedev(1, 3)

log = logging.getLogger(__name__)
#: False once mknod was refused in this process: later nodes are regular files at once.
_mknod_allowed = True


class FakeRoot:
    """A directory laid out like the parts of ``/`` that drivers read."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._base = str(self.path)

    def __fspath__(self) -> str:
        return self._base

    def __truediv__(self, rel: str) -> Path:
        return self.at(rel)

    def at(self, rel: str) -> Path:
        """The real path of ``rel`` (``/sys/...`` or ``sys/...``) inside the fake root."""
        return Path(self._real(rel))

    def _real(self, rel: str) -> str:
        return os.path.join(self._base, rel.lstrip("/"))

    def write(self, rel: str, text: str = "") -> Path:
        """Write a file (a sysfs attribute ends with a newline, as the kernel writes it),
        creating its parents; return its real path. Atomic, as sysfs is: a reader sees the
        old text or the new, never an empty or half-written attribute (the text goes to a
        file beside it, which then replaces it; a link's target is written)."""
        target = self._real(rel)
        if os.path.islink(target):
            target = os.path.realpath(target)
        data = (text if text.endswith("\n") or not text else text + "\n").encode()
        # A dot file: a driver's listing (``glob("nvidia*")``) never sees it.
        directory, name = os.path.split(target)
        temporary = os.path.join(directory, f".{name}.{os.getpid()}-{threading.get_ident()}.tmp")
        fd = _with_parents(
            temporary, lambda: os.open(temporary, NEW_FILE | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        )
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(temporary, target)
        return Path(target)

    def mkdir(self, rel: str) -> Path:
        """Make a directory and its parents; return its real path."""
        target = self._real(rel)
        os.makedirs(target, exist_ok=True)
        return Path(target)

    def symlink(self, rel: str, target: str) -> Path:
        """Link ``rel`` (root-relative) to ``target`` and return the link's real path.

        ``target`` is either root-relative when it starts with ``/`` (``/sys/devices/x``),
        or relative to the link's directory as the kernel writes sysfs links
        (``../../devices/x``). Either way the link text is relative, so the tree resolves
        wherever it is mounted; a target outside the fake root is refused."""
        link = self._real(rel)
        directory = os.path.dirname(link)
        if target.startswith("/"):
            text = os.path.relpath(self._real(target), directory)
        else:
            text = target
            base = os.path.abspath(self._base)
            resolved = os.path.abspath(os.path.join(directory, target))
            if os.path.commonpath([base, resolved]) != base:
                raise ValueError(
                    f"symlink {rel} -> {target}: the target is outside the fake root "
                    f"{self._base}; give it relative to the link's directory, inside the "
                    "tree, or root-relative with a leading '/'"
                )
        try:
            _with_parents(link, lambda: os.symlink(text, link))
        except FileExistsError:
            os.unlink(link)
            os.symlink(text, link)
        return Path(link)

    def char_device(self, rel: str) -> Path:
        """A device node: a character device 1:3 (``/dev/null``'s numbers) when mknod is
        permitted, else an empty regular file. One already there is left as it is; return its
        real path."""
        global _mknod_allowed
        target = self._real(rel)
        if _mknod_allowed:
            try:
                _with_parents(
                    target, lambda: os.mknod(target, stat.S_IFCHR | 0o666, SIMULATED_DEVICE)
                )
                return Path(target)
            except FileExistsError:
                return Path(target)
            except PermissionError as exc:
                _mknod_allowed = False
                log.warning(
                    "cannot make device nodes here (%s: needs root or CAP_MKNOD): simulated "
                    "device nodes are regular files, which a container runtime refuses to "
                    "give a container",
                    exc.strerror,
                )
        os.close(_with_parents(target, lambda: os.open(target, NEW_FILE, 0o666)))
        return Path(target)

    def remove(self, rel: str) -> None:
        """Remove a file, link or whole subtree (a device unplugged)."""
        target = self.at(rel)
        if target.is_dir() and not target.is_symlink():
            for child in sorted(target.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                child.unlink() if child.is_symlink() or not child.is_dir() else child.rmdir()
            target.rmdir()
        elif os.path.lexists(target):  # a file, link or device node
            target.unlink()

    def pci_device(
        self,
        address: str,
        *,
        vendor: str,
        device: str,
        numa_node: int = -1,
        driver: str | None = None,
        device_class: str = "0x030000",
        bus: str = "pci0000:00",
    ) -> str:
        """A PCI function: ``/sys/devices/<bus>/<address>`` with its attributes, the
        ``/sys/bus/pci/devices/<address>`` link and, with ``driver``, the function's
        ``driver`` link and ``/sys/bus/pci/drivers/<driver>/<address>``. Returns the
        device's root-relative path with its leading slash
        (``/sys/devices/pci0000:00/0000:3b:00.0``), ready to pass to the other helpers
        (``write(f"{path}/net/eth0/address", ...)``); ``at(path)`` is its real path."""
        rel = f"/sys/devices/{bus}/{address}"
        existing = self.at(f"/sys/bus/pci/devices/{address}")
        if os.path.exists(existing):
            ids = [(existing / name).read_text().strip() for name in ("vendor", "device")]
            if ids != [vendor, device]:
                raise ValueError(
                    f"PCI address {address} is already a {ids[0]}:{ids[1]} device "
                    f"in this fake root; choose another address"
                )
        self.write(f"{rel}/vendor", vendor)
        self.write(f"{rel}/device", device)
        self.write(f"{rel}/class", device_class)
        self.write(f"{rel}/numa_node", str(numa_node))
        if driver:
            # Both directions, as sysfs has them: the function's driver link, and the
            # driver's entry for each function it is bound to (what `ls` of the driver shows).
            self.mkdir(f"/sys/bus/pci/drivers/{driver}")
            self.symlink(f"{rel}/driver", f"/sys/bus/pci/drivers/{driver}")
            self.symlink(f"/sys/bus/pci/drivers/{driver}/{address}", rel)
        self.symlink(f"/sys/bus/pci/devices/{address}", rel)
        return rel


def _with_parents(path: str, make: Callable[[], T]) -> T:
    """``make()``, which creates ``path``; when a parent directory is missing, create the
    parents and try once more (checking first would cost a system call per file)."""
    try:
        return make()
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return make()
