"""nanum: one queue for a research organisation's GPU servers."""

__version__ = "0.1.0"
