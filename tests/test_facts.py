"""One fact, one place: where a fact must be written twice (code that runs on a node without aisite's model, a
role's default, a Literal a type checker reads), a test holds the copies to the one source."""

from __future__ import annotations

import dataclasses
import re
import typing

import yaml

from aisite.health.judge import Expected
from aisite.model import Health
from aisite.plan.types import HealthPlan
from aisite.playbooks import LAYERS, ROLES

THRESHOLDS = ("max_fs_used", "max_clock_offset_s", "min_certificate_days")


def test_the_health_thresholds_are_the_models_wherever_they_are_written() -> None:
    """The node's judge runs with the standard library alone (no model), the plan's type keeps a default, and the
    node_health role falls back to a figure where a host has no aisite_health: each must be the model's."""
    model = Health()
    judge = {f.name: f.default for f in dataclasses.fields(Expected)}
    plan = {f.name: f.default for f in dataclasses.fields(HealthPlan)}
    defaults = yaml.safe_load((ROLES / "node_health" / "defaults" / "main.yml").read_text())
    for key in THRESHOLDS:
        want = getattr(model, key)
        assert judge[key] == want, f"health.judge.Expected.{key}"
        if plan[key] is not dataclasses.MISSING:
            assert plan[key] == want, f"plan.types.HealthPlan.{key}"
        fallback = re.search(r"else ([0-9.]+) \}\}", defaults[f"node_health_{key}"])
        assert fallback is not None and float(fallback[1]) == want, f"node_health_{key}"


def test_the_pulumi_layers_are_the_sites_layers_but_the_platform() -> None:
    """The platform is applied by the Pulumi program itself (Kubernetes resources); every other layer runs through
    Ansible with `aisite play`, whose input names them."""
    from aisite.components.site import LAYERS as COMPONENT_LAYERS
    from aisite.layer_run import PulumiLayer

    through_ansible = [name for name in LAYERS if name != "platform"]
    assert list(typing.get_args(PulumiLayer)) == through_ansible
    assert [cls.layer for cls in COMPONENT_LAYERS] == through_ansible
