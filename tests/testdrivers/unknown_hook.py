"""A driver implementing a hook that does not exist (a typo of devicehost_enumerate)."""

from devicehost import hookimpl


@hookimpl
def devicehost_enumerat(resource):  # type: ignore[no-untyped-def]
    return []
