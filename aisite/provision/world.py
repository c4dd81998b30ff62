"""The real world of `aisite provision`: the nodes' BMCs (aisite.oob), the boot server (its HTTP service, and
Ansible to arm it) and SSH to the installed nodes."""

from __future__ import annotations

import secrets
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aisite import firmware, foreign, oob
from aisite.deploy import run_playbook
from aisite.plan import Node, Plan, ProvisionTarget
from aisite.provision.run import HostKey

CONTROLLER_TOKEN_ENV = "AISITE_BOOT_CONTROLLER_TOKEN"


def controller_token(folder: Path) -> str:
    """The token this controller reads the boot server's reports with: made once (0600 under the site's provision
    state), handed to the boot server's play only as its SHA-256."""
    path = folder / "controller-token"
    if path.is_file():
        return path.read_text().strip()
    folder.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    path.touch(mode=0o600)
    path.write_text(token + "\n")
    return token


def hostkey_env(node: str) -> str:
    """The environment variable that carries a node's new private host key to the boot-arm play."""
    return "AISITE_HOSTKEY_" + node.upper().replace("-", "_")


# The boot server is on the site's own network: never through a proxy the environment names.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ArmError(Exception):
    """The boot server could not be armed: no node of the wave can boot."""


class SiteWorld:
    def __init__(
        self,
        plan: Plan,
        inventory: str,
        secrets: Mapping[str, str],
        *,
        identity: Path | None = None,
        user: str | None = None,
        controller_token: str = "",
    ) -> None:
        assert plan.provisioning is not None
        self.plan = plan
        self.prov = plan.provisioning
        self.inventory = inventory
        self.secrets = dict(secrets)
        self.identity = identity
        self.user = user or plan.ansible_user
        self.nodes: dict[str, Node] = {n.name: n for n in plan.nodes}
        self.controller_token = controller_token
        # Per node, what its firmware baseline asked of its BMC before the boot (or why nothing), said by the CLI.
        self.firmware: dict[str, list[str]] = {}

    # -- the boot server
    def _arm(self, key: str, targets: Sequence[ProvisionTarget], host_keys: Mapping[str, HostKey]) -> None:
        # The private host keys go as secrets do: through the environment, never a file or an extra var; each node
        # is told the variable that carries its key (none: the installer makes its own).
        nodes = [
            {"node": t.node, "mac": t.mac} | ({"key_env": hostkey_env(t.node)} if t.node in host_keys else {})
            for t in targets
        ]
        secrets = self.secrets | {hostkey_env(n): k.private for n, k in host_keys.items()}
        result = run_playbook("boot-arm.yml", self.inventory, secrets, extravars={key: nodes})
        if not result.ok:
            raise ArmError(f"{key} on the boot server failed: " + "; ".join(result.failures[-3:] or [result.status]))

    def arm(self, targets: Sequence[ProvisionTarget], host_keys: Mapping[str, HostKey]) -> None:
        self._arm("boot_server_arm", targets, host_keys)

    def disarm(self, targets: Sequence[ProvisionTarget]) -> None:
        self._arm("boot_server_disarm", targets, {})

    def _get(self, path: str) -> dict[str, Any]:
        request = urllib.request.Request(f"{self.prov.url}/{path}")
        request.add_header("Authorization", f"Bearer {self.controller_token}")
        try:
            with _HTTP.open(request, timeout=10) as r:
                doc = foreign.loads(r.read(foreign.RECORD_LIMIT + 1), foreign.RECORD_LIMIT)
        except (OSError, ValueError, urllib.error.URLError):  # ForeignJSONError is a ValueError
            return {}
        return doc if isinstance(doc, dict) else {}

    def report(self, node: str) -> dict[str, Any]:
        return self._get(f"reports/{node}")

    def version(self, node: str) -> str:
        return str(self._get(f"versions/{node}").get("version", ""))

    # -- the BMC
    def _target(self, node: str) -> oob.Target:
        return oob.node_target(self.plan, self.nodes[node], self.secrets)

    def boot_from_network(self, target: ProvisionTarget) -> None:
        bmc = self._target(target.node)
        oob.set_power(bmc, "off")
        oob.wait_for_power(bmc, "off", timeout=60)
        self._baseline(target.node, bmc)
        oob.set_one_time_boot(bmc, "pxe")
        oob.set_power(bmc, "on")

    def _baseline(self, node: str, bmc: oob.Target) -> None:
        """The node's firmware baseline set while it is off: its BIOS settings pending and its release requested,
        taken at the power-on that boots the installer (the node is out of service anyway; a rollout would
        otherwise reboot it again for them). An IPMI BMC has neither: said."""
        baseline = self.nodes[node].firmware
        if baseline is None or node in self.firmware:
            # Set by an earlier attempt of this run (a retried install): its settings and staged release are taken
            # at a reset, and a second SimpleUpdate of a staged image may be refused. A request that failed raised
            # and recorded nothing: asked again.
            return
        if bmc.protocol != "redfish":
            why = f"{bmc.protocol.upper()} BMC: no BIOS settings or firmware update; the baseline was not set"
            self.firmware[node] = [why]
            return
        self.firmware[node] = firmware.apply(bmc, baseline) or ["the BMC already reports the baseline"]

    def power_cycle(self, target: ProvisionTarget) -> None:
        bmc = self._target(target.node)
        oob.set_power(bmc, "off")
        oob.wait_for_power(bmc, "off", timeout=60)
        oob.set_power(bmc, "on")

    # -- the installed node
    def installed_version(self, target: ProvisionTarget, host_keys: Sequence[str]) -> str | None:
        """The version in the node's /etc/aisite/installed.json, read over SSH with exactly `host_keys` trusted;
        None when it does not answer so."""
        if not host_keys:
            return None
        with tempfile.NamedTemporaryFile("w", prefix="aisite-known-", suffix=".hosts") as known:
            known.write("".join(f"{target.address} {key}\n" for key in host_keys))
            known.flush()
            args = [
                "ssh",
                "-o",
                "BatchMode=yes",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                f"UserKnownHostsFile={known.name}",
                "-o",
                "ConnectTimeout=5",
                "-o",
                "LogLevel=ERROR",
            ]
            if self.identity:
                args += ["-o", "IdentitiesOnly=yes", "-i", str(self.identity)]
            args += [
                f"{self.user}@{target.address}",
                "head -c 65537 /etc/aisite/installed.json",
            ]  # bounded: loads refuses more
            try:
                r = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
            except subprocess.TimeoutExpired:
                return None
        if r.returncode:
            return None
        try:
            doc = foreign.loads(r.stdout, 1 << 16)
        except foreign.ForeignJSONError:
            return None
        version = doc.get("version") if isinstance(doc, dict) else None
        return version if isinstance(version, str) else None
