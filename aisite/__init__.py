"""aisite: an on-prem AI cluster site, as code."""

__version__ = "0.1.0"
# The site repository a command works in (aisite.roots); `aisite --site-dir DIR` sets it (aisite.entry).
SITE_DIR_ENV = "AISITE_SITE_DIR"
