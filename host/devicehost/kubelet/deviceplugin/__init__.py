"""The Device Plugin API v1beta1 face: one DevicePlugin server per resource (``servicer``),
served, registered and re-served as a unit (``runner``, ``registration``, ``restart_watch``),
the plugin directory's checks, and who got a device (``podresources``, ``checkpoint``)."""
