"""A driver whose vendor library is not installed on this node."""

import vendor_sdk_not_installed  # noqa: F401
