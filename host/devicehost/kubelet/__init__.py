"""The host's two faces to the kubelet, which never import each other: the Device Plugin
API v1beta1 (``deviceplugin``) and Dynamic Resource Allocation (``dra``). Both serve what
the driver side (``devicehost.drivers``) knows, through the edits layer (``devicehost.edits``)."""
