"""What faces drivers: discovery through entry points, calls into drivers, the scans that
keep each resource's snapshot current, and the snapshots themselves."""
