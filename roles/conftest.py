"""Molecule's testinfra verify (every role's `molecule/*/tests/`): each command through `podman exec`.

Molecule hands testinfra its Ansible inventory; testinfra's Ansible backend cannot drive the podman connection
itself, so every `host.run`, `host.file`, `host.service` became a whole `ansible -m shell` run (a second or more
each: verify took twice a converge). The instances are podman containers of the scenario, named by the inventory,
so the same hosts are read with testinfra's podman backend instead; their inventory variables stay readable with
`inventory_vars(host)`.
"""

from __future__ import annotations

from typing import Any

import pytest
from testinfra.utils.ansible_runner import AnsibleRunner

PODMAN_CONNECTIONS = ("podman", "containers.podman.podman")


def _runner(config: pytest.Config) -> AnsibleRunner | None:
    inventory = config.option.ansible_inventory
    return AnsibleRunner.get_runner(inventory) if inventory else None


def pytest_configure(config: pytest.Config) -> None:
    # Only molecule's own invocation (an inventory, the Ansible connection, no hosts named) is switched, and only when
    # every host of it is a podman instance; anything else is left as testinfra would run it.
    if config.option.connection != "ansible" or config.option.hosts is not None:
        return
    runner = _runner(config)
    if runner is None:
        return
    hosts = sorted(runner.get_hosts("all"))
    connections = {runner.get_variables(h).get("ansible_connection") for h in hosts}
    if hosts and connections <= set(PODMAN_CONNECTIONS):
        config.option.connection = "podman"
        config.option.hosts = ",".join(hosts)


@pytest.fixture
def inventory_vars(request: pytest.FixtureRequest) -> Any:
    """A function: the scenario inventory's variables of a testinfra host."""
    runner = _runner(request.config)
    assert runner is not None, "no Ansible inventory given (molecule gives one)"
    return lambda host: runner.get_variables(host.backend.get_hostname())
