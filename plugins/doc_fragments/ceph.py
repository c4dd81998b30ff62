# The option every Ceph module of this collection takes: how its CLI reaches the cluster with the admin key.
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  cluster:
    description: Arguments that reach this cluster with the admin key (C(--cluster NAME), or C(-c CONF -k KEYRING)).
    type: list
    elements: str
    default: []
"""
