"""What a driver may put into a container: environment names and container paths.

Enforced where a driver's answer enters the host (``validation``), so no device, resource or
allocation breaks it, and every CDI spec the host writes meets CDI's own rules for env
(``validateEnv`` in the container-device-interface's default validator: ``NAME=value`` with
a non-empty name before the first ``=``) and paths (non-empty; the model makes them absolute
and normalised). The rules and how to allow an exception are in docs/hooks.md.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from devicehost.model import ContainerEdits

#: Kubernetes' own pattern for an environment variable name (``IsEnvVarName`` in
#: k8s.io/apimachinery's validation): a pod spec cannot carry any other, and neither may a
#: driver. It excludes the empty name, ``=``, whitespace and control characters.
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
#: Names the dynamic loader (``LD_*``, glibc's ``GCONV_PATH`` and ``GLIBC_TUNABLES``) or a
#: shell (``PATH``, ``IFS``, ``ENV``, ``BASH_ENV``, …) act on: in a container they choose
#: what code runs, which is no device's business.
SPECIAL_ENV_PREFIXES = ("LD_",)
SPECIAL_ENVS = frozenset(
    {
        "PATH",
        "IFS",
        "ENV",
        "BASH_ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "PROMPT_COMMAND",
        "GCONV_PATH",
        "GLIBC_TUNABLES",
    }
)
#: Container paths a mount or device node must not cover (the path itself or anything
#: under it): the loader's preload and search lists, the kernel's views (/proc, /sys),
#: raw memory and I/O ports, the account and sudo files.
SENSITIVE_PATHS = (
    "/proc",
    "/sys",
    "/dev/mem",
    "/dev/kmem",
    "/dev/port",
    "/etc/ld.so.preload",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/ld.so.cache",
    "/etc/passwd",
    "/etc/shadow",
    "/etc/group",
    "/etc/sudoers",
    "/etc/sudoers.d",
)


#: The longest value each field of a driver's edits may carry (docs/reliability.md,
#: "Limits"), so one device's answer can neither fail the container nor cost the host
#: memory at every scan. Lengths of names in characters, of values and paths in bytes.
MAX_ENV_NAME = 256
#: ``NAME=value`` reaches the container's first process through execve, which refuses one
#: string over the kernel's MAX_ARG_STRLEN (32 pages, 131 072 bytes) with E2BIG: the
#: container would fail to start. Half of it leaves room for the name and other entries.
MAX_ENV_VALUE = 65_536
#: Linux's PATH_MAX (4 096 bytes with the terminating NUL): a longer path fails every call.
MAX_PATH = 4_095
#: A Kubernetes qualified name: a 253-character DNS-subdomain prefix, '/', 63 characters.
MAX_ANNOTATION_KEY = 317
MAX_ANNOTATION_VALUE = 65_536
#: CDI sets no length; far above any real ``vendor/class=name`` (the bundled ones: < 60).
MAX_CDI_NAME = 512

_LIMITS_DOC = "docs/reliability.md, Limits"


def _over(field: str, length: int, limit: int, unit: str) -> str:
    return f"{field} is {length} {unit}, over the limit of {limit} ({_LIMITS_DOC})"


def size_problem(edits: ContainerEdits) -> str | None:
    """The first field of ``edits`` longer than its limit, named with the limit, or None."""
    for name, value in edits.envs.items():
        if len(name) > MAX_ENV_NAME:
            return _over(f"env name {name[:40]!r}…", len(name), MAX_ENV_NAME, "characters")
        size = len(value.encode())
        if size > MAX_ENV_VALUE:
            return _over(f"env {name!r}'s value", size, MAX_ENV_VALUE, "bytes")
    for key, value in edits.annotations.items():
        if len(key) > MAX_ANNOTATION_KEY:
            return _over(
                f"annotation key {key[:40]!r}…", len(key), MAX_ANNOTATION_KEY, "characters"
            )
        size = len(value.encode())
        if size > MAX_ANNOTATION_VALUE:
            return _over(f"annotation {key!r}'s value", size, MAX_ANNOTATION_VALUE, "bytes")
    paths = [("mount", m.host_path, m.container_path) for m in edits.mounts]
    paths += [("device node", d.host_path, d.container_path) for d in edits.devices]
    for kind, *both in paths:
        for side, path in zip(("host", "container"), both, strict=True):
            size = len(path.encode(errors="surrogateescape"))
            if size > MAX_PATH:
                return _over(f"{kind} {side} path {path[:40]!r}…", size, MAX_PATH, "bytes")
    for name in edits.cdi_devices:
        if len(name) > MAX_CDI_NAME:
            return _over(f"CDI device name {name[:40]!r}…", len(name), MAX_CDI_NAME, "characters")
    return None


def _under(path: str, place: str) -> bool:
    return path == place or path.startswith(place + "/")


def env_problem(name: str, allowed: Collection[str] = ()) -> str | None:
    """Why a driver may not set ``name``, or None when it may."""
    if not ENV_NAME.fullmatch(name):
        return f"env name {name!r:.80} does not match {ENV_NAME.pattern}"
    if name in allowed:
        return None
    if name in SPECIAL_ENVS or name.startswith(SPECIAL_ENV_PREFIXES):
        return (
            f"env {name!r} is one the dynamic loader or a shell acts on; refused unless "
            "containerEdits.allow lists it for this driver"
        )
    return None


def path_problem(kind: str, path: str, allowed: Collection[str] = ()) -> str | None:
    """Why a driver may not put ``kind`` at container path ``path``, or None."""
    if path == "/":
        return f"{kind} container path '/' would cover the whole container"
    place = next((p for p in SENSITIVE_PATHS if _under(path, p)), None)
    if place is None or any(_under(path, a) for a in allowed if a.startswith("/")):
        return None
    return (
        f"{kind} container path {path!r} is over {place}; refused unless "
        "containerEdits.allow lists it for this driver"
    )


def edits_problem(edits: ContainerEdits, allowed: Collection[str] = ()) -> str | None:
    """The first rule ``edits`` break, or None when a container may be given them."""
    problem = size_problem(edits)
    if problem:
        return problem
    for name in edits.envs:
        problem = env_problem(name, allowed)
        if problem:
            return problem
    for mount in edits.mounts:
        problem = path_problem("mount", mount.container_path, allowed)
        if problem:
            return problem
    for node in edits.devices:
        problem = path_problem("device node", node.container_path, allowed)
        if problem:
            return problem
    return None
