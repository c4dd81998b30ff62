"""Served models: the stack's serving workloads checked against the site, and their promotion by policy."""
