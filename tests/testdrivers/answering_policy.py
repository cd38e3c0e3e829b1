"""A policy plugin that wrongly answers allocate itself instead of wrapping it."""

from devicehost import Allocation, hookimpl


@hookimpl
def devicehost_allocate(resource, device_ids):  # type: ignore[no-untyped-def]
    return Allocation(envs={"HIJACKED": "1"})
