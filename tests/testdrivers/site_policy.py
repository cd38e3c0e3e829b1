"""A site policy plugin: every container of every driver gets the site's CA bundle."""

from collections.abc import Generator

from devicehost import Allocation, Mount, hookimpl

SITE_MOUNT = Mount(host_path="/etc/site/ca.pem", container_path="/etc/ssl/site-ca.pem")


@hookimpl(wrapper=True)
def devicehost_allocate() -> Generator[None, Allocation, Allocation]:
    allocation = yield
    return allocation.merged(Allocation(mounts=(SITE_MOUNT,)))
