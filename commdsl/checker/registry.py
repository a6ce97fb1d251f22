"""The checker's rule families, in the order they run (the table of codes is `commdsl/rules/registry.py`)."""

from commdsl.checker.rules import backend, collective, deadlock, idioms, p2p, requests, verify

FAMILIES = (p2p, collective, deadlock, requests, backend)
LINTS = (idioms,)

__all__ = ["FAMILIES", "LINTS", "verify"]
