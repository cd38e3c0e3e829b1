"""devicehost driver package (work in progress)."""
