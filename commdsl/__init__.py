"""commdsl: describe, check, run and measure the communication patterns of distributed PyTorch."""

__version__ = "0.1.0"
