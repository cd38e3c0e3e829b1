"""The host's configuration: HostConfig from file, environment and flags
(``host_config``), per-node profiles (``profiles``) and how one applies (``for_node``).

``devicehost.config.HostConfig`` is documented for the kit's ``run_host``; it stays here.
"""

from devicehost.config.host_config import HostConfig

__all__ = ["HostConfig"]
