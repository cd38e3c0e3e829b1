"""Drivers that fail to load, each in its own way."""

raise RuntimeError("this driver module is broken on purpose")
