"""A devicehost driver for widgets, made from devicehost's driver template."""
