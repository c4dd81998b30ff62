"""One fact, one place: where a fact must be written twice (code that runs on a node without aisite's model, a
role's default, a Literal a type checker reads), a test holds the copies to the one source."""

from __future__ import annotations

import dataclasses
import re
import typing

import yaml

from aisite.health.judge import Expected
from aisite.model import Health
from aisite.plan.ceph_types import CephClientPlan, CephPlan
from aisite.plan.types import GitopsPlan, HealthPlan, KubernetesPlan, Node, ProvisioningPlan, Switch
from aisite.playbooks import LAYERS, ROLES

THRESHOLDS = ("max_fs_used", "max_clock_offset_s", "min_certificate_days")


def test_the_health_thresholds_are_the_models_wherever_they_are_written() -> None:
    """The node's judge runs with the standard library alone (no model) and the plan's type keeps a default: each
    must be the model's; the node_health role restates none, it reads the inventory's."""
    model = Health()
    judge = {f.name: f.default for f in dataclasses.fields(Expected)}
    plan = {f.name: f.default for f in dataclasses.fields(HealthPlan)}
    defaults = yaml.safe_load((ROLES / "node_health" / "defaults" / "main.yml").read_text())
    for key in THRESHOLDS:
        want = getattr(model, key)
        assert judge[key] == want, f"health.judge.Expected.{key}"
        if plan[key] is not dataclasses.MISSING:
            assert plan[key] == want, f"plan.types.HealthPlan.{key}"
        assert defaults[f"node_health_{key}"] == f"{{{{ aisite_health.{key} }}}}", f"node_health_{key}"


def test_the_pulumi_layers_are_the_sites_layers_but_the_platform() -> None:
    """The platform is applied by the Pulumi program itself (Kubernetes resources); every other layer runs through
    Ansible with `aisite play`, whose input names them."""
    from aisite.components.site import LAYERS as COMPONENT_LAYERS
    from aisite.layer_run import PulumiLayer

    through_ansible = [name for name in LAYERS if name != "platform"]
    assert list(typing.get_args(PulumiLayer)) == through_ansible
    assert [cls.layer for cls in COMPONENT_LAYERS] == through_ansible


# The plan's part each aisite_* inventory variable holds (aisite.render.inventory).
INVENTORY_ROOTS: dict[str, type] = {
    "aisite_kubernetes": KubernetesPlan,
    "aisite_health": HealthPlan,
    "aisite_node": Node,
    "aisite_gitops": GitopsPlan,
    "aisite_switch": Switch,
    "aisite_ceph": CephPlan,
    "aisite_ceph_client": CephClientPlan,
    "aisite_provisioning": ProvisioningPlan,
}
# A path of fields; a method called on a value (`.index(...)`) is not one.
_PATH = re.compile(r"\b(aisite_[a-z_]+)((?:\.[a-z_]+(?![a-z_(]))+)")
_WHOLE = re.compile(r"^\{\{ *(aisite_[a-z_]+(?:\.[a-z_]+)+) *\}\}$")
_ANSIBLE_TYPES = {int: "int", float: "float", str: "str", bool: "bool", tuple: "list", list: "list", dict: "dict"}


def _field_type(root: str, path: list[str]) -> object:
    """The plan's type at `path` under an inventory root, or an AssertionError naming what is not there."""
    t: object = INVENTORY_ROOTS[root]
    for i, key in enumerate(path):
        t = next(a for a in (*typing.get_args(t), t) if a is not type(None)) if typing.get_args(t) else t
        assert dataclasses.is_dataclass(t), f"{root}.{'.'.join(path[:i])} is not a record of the plan"
        hints = typing.get_type_hints(t)
        assert key in hints, f"{root}.{'.'.join(path[: i + 1])}: the plan's {t.__name__} has no field {key!r}"
        t = hints[key]
    return t


def test_what_the_roles_read_of_the_inventory_is_in_the_plan_and_typed_as_the_plan_types_it() -> None:
    """A role's default that reads the inventory (`{{ aisite_health.interval_s }}`) names a field the plan has (a
    renamed field fails here, not at a deploy), and where it is the whole value, its argument spec gives the plan's
    type: the role restates the model's type, never its value."""
    checked = 0
    for defaults in sorted(ROLES.glob("*/defaults/main.yml")):
        role = defaults.parent.parent
        values = yaml.safe_load(defaults.read_text()) or {}
        spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())
        options = spec["argument_specs"]["main"]["options"]
        for name, value in values.items():
            if not isinstance(value, str):
                continue
            for root, path in _PATH.findall(value):
                if root in INVENTORY_ROOTS:
                    _field_type(root, path.lstrip(".").split("."))
            whole = _WHOLE.match(value.strip())
            if whole is None or whole[1].split(".")[0] not in INVENTORY_ROOTS:
                continue
            root, *path = whole[1].split(".")
            t = _field_type(root, path)
            base = typing.get_origin(t) or t
            args = [a for a in typing.get_args(t) if a is not type(None)]
            if base is typing.Union or type(t).__name__ == "UnionType":
                base = typing.get_origin(args[0]) or args[0]
            want = _ANSIBLE_TYPES.get(base)  # type: ignore[call-overload]
            if want is None:
                continue
            assert name in options, f"{role.name}: {name} reads {whole[1]} but its argument spec does not declare it"
            # A string may be declared a path (narrower, as Ansible reads it); raw takes anything.
            fits = {want, "raw"} | ({"path"} if want == "str" else set())
            assert options[name].get("type", "str") in fits, (
                f"{role.name}: {name} is {options[name].get('type', 'str')} in its argument spec, the plan's "
                f"{whole[1]} is {want}"
            )
            checked += 1
    assert checked >= 20, checked
