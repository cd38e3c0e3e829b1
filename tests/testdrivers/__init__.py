"""Drivers the host's tests install through real entry points (see conftest.install)."""
