"""What faces the kubelet: the DevicePlugin service, registration, the restart watch,
the PodResources client, and the host's default preferred allocation."""
