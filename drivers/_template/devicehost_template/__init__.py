"""A minimal devicehost driver: copy this package to start your own."""
