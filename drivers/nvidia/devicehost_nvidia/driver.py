"""Placeholder until the driver lands: serves nothing."""

from devicehost import DriverUnavailable, hookimpl


class NvidiaDriver:
    @hookimpl
    def devicehost_configure(self) -> None:
        raise DriverUnavailable("driver not implemented yet")
