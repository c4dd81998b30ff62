"""aisite: an on-prem AI cluster site, as code."""

__version__ = "0.1.0"
