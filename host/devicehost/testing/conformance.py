"""``check_driver()``: the conformance battery every driver runs on itself.

It finds the driver through its real entry point (so the distribution must be installed),
drives its hooks through the same handle the host uses, and collects every problem
instead of stopping at the first::

    def test_conformance(fake_root):
        build_my_node(fake_root)
        report = check_driver("mydriver", fake_root, config={"chips": 4})
        assert report.devices["example.com/widget"] == 4

Checked: the driver loads and validates; ``resources`` returns valid, unique
``ResourceSpec``s; every enumeration returns valid, unique IDs with legal health; every
healthy device, and all healthy devices together, compose into edits that give the container
something without a clash; a driver ``allocate`` (when implemented) refuses an ID it does not
know by raising ``devicehost.UnknownDevice(resource, device_id)`` with those two fields;
``preferred_allocation`` (when implemented) returns valid choices; every hook returns
within ``timeout``.
"""

from devicehost.host import ConformanceError, ConformanceReport, check_driver

__all__ = ["ConformanceError", "ConformanceReport", "check_driver"]
