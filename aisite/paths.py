"""Every path under `.aisite/` (git-ignored: what this machine generated, fetched or recorded), in one place."""

from __future__ import annotations

import os
from pathlib import Path

from aisite.roots import SITE

# Under the site repository (aisite.roots): each site repository keeps its own.
STATE = SITE / ".aisite"
# Images' build contexts and the rootfs debootstrap makes (the lab).
CACHE = STATE / "cache"
# The OS images `aisite provision` installs (one folder per OS and recipe digest: aisite.provision.image), in the
# user's cache rather than .aisite/: named by what they are built from, they serve every clone on the machine, as the
# lab's podman images do (a newcomer's clone, CI's).
IMAGES = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "aisite" / "images"


def site_dir(site: str) -> Path:
    """Everything this machine keeps of one site; the BMC inventories the bmc role saves are under bmc/."""
    return STATE / site


def lab_ssh_dir(site: str) -> Path:
    """The lab's SSH key and the host keys of its containers (`aisite lab up` writes them). Resolved: a
    reconciler's checkout links its .aisite to the machine's, and the inventory must not depend on the path."""
    return STATE.resolve() / site / "ssh"


def kubeconfig_path(site: str) -> Path:
    """The admin kubeconfig the cluster layer fetches (0600): the next layer's Kubernetes provider."""
    return site_dir(site) / "kubeconfig"


def deploys_dir(site: str) -> Path:
    """The outcome of the last `deploy` of each layer (or the site)."""
    return site_dir(site) / "deploys"


def results_dir(site: str) -> Path:
    """Benchmark results collected from the site's jobs."""
    return site_dir(site) / "results"


def reconcile_dir(stack: str) -> Path:
    """A reconciler's lock, status and metrics, per stack."""
    return STATE / "reconcile" / stack.replace("/", "_")


def pull_wheels_dir(site: str) -> Path:
    """The wheels of the controller's ansible-core that `lab up` fetches for nodes that pull layers (the lab's
    containers reach no package index). Resolved, as it reaches the inventory."""
    return STATE.resolve() / site / "pull-wheels"


def mirror_dir(site: str) -> Path:
    """The lab's git mirror: the repositories its git daemon serves to the nodes, and its pid file."""
    return site_dir(site) / "mirror"


def provision_dir(site: str) -> Path:
    """What `aisite provision` recorded per node (<node>.json: status, version, host keys, step times), the last
    run (last.json) and the installed nodes' host keys (known_hosts). Resolved: the inventory names known_hosts."""
    return STATE.resolve() / site / "provision"


def accept_dir(site: str) -> Path:
    """`aisite accept`'s last report (report.json) and its heat map (heatmap.png)."""
    return site_dir(site) / "accept"


def health_dir(site: str) -> Path:
    """`aisite health`'s last verdict per node (checks.json, what `aisite status --health` shows), its quarantine
    state (state.json), every action it took (actions.jsonl), its metrics and the Node objects it applies (nodes/)."""
    return site_dir(site) / "health"


def health_state_file(site: str) -> Path:
    """`aisite health`'s quarantine state per node (in health_dir)."""
    return health_dir(site) / "state.json"


def maintenance_dir(site: str) -> Path:
    """`aisite maintenance`'s rollout (rollout.json, saved after every step; finished ones in done/), its pause
    flag and its lock."""
    return site_dir(site) / "maintenance"


def members_file(site: str) -> Path:
    """Every node's and switch's one state (aisite.members.store): what holds it out of service, written by
    provisioning, health and maintenance alike."""
    return site_dir(site) / "members.json"


def applied_stack_file(site: str) -> Path:
    """The stack file a whole-site `deploy` last brought every host to (or handed to a rollout): what the next
    deploy compares with to hold disruptive changes back for their waves (aisite.maintenance.hold)."""
    return site_dir(site) / "applied-stack.yaml"


def serving_dir(site: str) -> Path:
    """The lab's served models: each model server's and proxy's pid file, log and configuration."""
    return site_dir(site) / "serving"
