"""What /readyz answers: the host is ready when every resource it serves is registered with
the kubelet and no driver has been down past its first restarts."""

from __future__ import annotations


def not_ready(not_registered: list[str], drivers_down: list[str]) -> list[str]:
    """Why the host is not ready (empty when it is): the resources not registered (yet, or
    no longer), and each driver down past its first restarts with its reason."""
    waiting = [f"not registered: {', '.join(not_registered)}"] if not_registered else []
    return waiting + drivers_down
