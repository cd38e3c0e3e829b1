"""A driver whose hook asks for a parameter the spec does not have."""

from devicehost import hookimpl


@hookimpl
def devicehost_enumerate(resource, colour):  # type: ignore[no-untyped-def]
    return []


@hookimpl
def devicehost_resources():  # type: ignore[no-untyped-def]
    return []
