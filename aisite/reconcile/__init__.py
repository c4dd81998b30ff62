"""Reconciling a site from its Git repository: passes, their lock and records, and the push hook."""
