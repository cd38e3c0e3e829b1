"""The exceptions devicehost raises, and the ones drivers raise to talk to it.

::

    DevicehostError
    ├── ConfigError            a config file, env var or flag is wrong; names the key path
    ├── DriverUnavailable      raised by a driver: no hardware or vendor library on this node
    ├── DriverError            a driver hook raised or returned something invalid
    │   └── DriverTimeout      a driver hook ran past its timeout
    ├── RequestRefused         raised by a driver: this request breaks a hardware rule
    └── UnknownDevice          a device ID the resource does not have
"""

from __future__ import annotations


class DevicehostError(Exception):
    """Base of every devicehost exception."""


class ConfigError(DevicehostError):
    """The configuration is invalid.

    Raised at start-up, before anything is served. The message names the source (file,
    env var or flag), the key path and what was expected; fix that value and start again.
    """

    def __init__(self, source: str, key: str, problem: str) -> None:
        self.source, self.key, self.problem = source, key, problem
        where = f"{source}: {key}" if key else source
        super().__init__(f"{where}: {problem}")


class DriverUnavailable(DevicehostError):
    """Raised by a driver (on import, ``configure`` or ``resources``) when this node lacks
    its hardware or vendor library. The host lists the driver as *unavailable* with this
    message as the reason, carries on with the others, and starts the driver again every
    ``unavailableRetrySeconds`` (60 s; 0: never). Not an error: say why, plainly.
    """


class DriverError(DevicehostError):
    """A driver hook raised, or returned a value the host cannot use.

    The message names the driver and the hook. The host isolates the driver's resources
    (its devices are reported Unhealthy) and keeps serving the others.
    """

    def __init__(self, driver: str, hook: str, message: str) -> None:
        self.driver, self.hook = driver, hook
        super().__init__(f"driver {driver!r}, hook {hook}: {message}")


class DriverOverLimit(DriverError):
    """A driver sent more than one of the host's limits allows (docs/reliability.md, "Limits").

    The data is refused whole, naming the driver and the limit; the resource's last good
    snapshot stays in force, since nothing says its devices went away."""


class DriverTimeout(DriverError):
    """A driver hook did not return within its timeout (config ``hookTimeoutSeconds``).

    The call keeps running in its own thread; the host answers without it. A driver that
    hangs often needs its vendor library or hardware checked.
    """


class RequestRefused(DevicehostError):
    """Raised by a driver's ``allocate`` (or ``pre_start``) to refuse a request that breaks
    a rule of its hardware, such as devices that cannot work together in one container.

    Not a driver fault: the host answers the kubelet ``FAILED_PRECONDITION`` with this
    message, so name the rule and where it comes from.
    """


class UnknownDevice(DevicehostError):
    """A request named a device ID the resource does not have.

    Raised by drivers: ``devicehost_allocate`` given an ID it does not know (a device gone
    since the host's last snapshot) raises ``UnknownDevice(resource, device_id)`` rather
    than invent an answer; the kubelet gets INVALID_ARGUMENT. ``check_driver`` checks
    both fields.
    """

    def __init__(self, resource: str, device_id: str) -> None:
        self.resource, self.device_id = resource, device_id
        super().__init__(f"unknown device ID {device_id!r} for resource {resource!r}")
