"""Renderers: the plan written out for Ansible, Kubernetes and reviewers. Pure functions of the plan."""
