"""The DRA face: the same drivers served through Kubernetes' Dynamic Resource Allocation.

Beside the device-plugin face (``devicehost.kubelet.deviceplugin``), one DRA driver per devicehost
driver: registration with the kubelet's plugin watcher (``registration``), ResourceSlices
built from the device snapshots (``slices``, ``attributes``, ``naming``), and the kubelet's
``NodePrepareResources``/``NodeUnprepareResources`` answered from the same container
edits Allocate composes (``prepare``, ``checkpoint``, ``claims``, ``servicer``, ``plugin``).
``face`` serves them in ``devicehost run``: see docs/dra.md.
"""
