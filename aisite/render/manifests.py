"""`manifests/<site>/`: the platform's objects as YAML files, its charts as values files with an index, the
workloads' jobs under workloads/, and the nodes' inventory under inventory/ where the nodes pull layers."""

from __future__ import annotations

from typing import Any

import yaml

from aisite.plan import Plan
from aisite.platform import charts, jobs, objects, remote_manifests
from aisite.platform.gitops import gitops_objects
from aisite.render.inventory import PULL_INVENTORY_DIR, pull_inventory_files

# libyaml's emitter writes the same bytes as PyYAML's about 3x faster.
_BaseDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_BaseDumper):  # type: ignore[valid-type,misc]
    """Plain block YAML without anchors: rendered manifests are read by people in reviews."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    # Text of several lines (an embedded configuration, a CA) as a literal block, the way a person writes it.
    style = "|" if "\n" in data and not any(c in data for c in "\t\r") and not data.endswith(" ") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)


WORKLOADS_DIR = "workloads/"  # the Workloads layer's files; the rest is the Platform layer's


def layer_files(files: dict[str, str]) -> dict[str, dict[str, str]]:
    """The rendered files each Kubernetes layer applies (and its trigger hashes): workloads/ the Workloads layer's,
    everything else the Platform layer's but the nodes' inventory (inventory/, read by the nodes that pull)."""
    return {
        "platform": {k: v for k, v in files.items() if not k.startswith((WORKLOADS_DIR, PULL_INVENTORY_DIR))},
        "workloads": {k: v for k, v in files.items() if k.startswith(WORKLOADS_DIR)},
    }


def _header(plan: Plan) -> str:
    return f"# Rendered by aisite for site {plan.site}; do not edit.\n"


def _files(plan: Plan, objs_by_file: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    return {name: _header(plan) + "".join("---\n" + to_yaml(o) for o in objs) for name, objs in objs_by_file.items()}


def gitops_files(plan: Plan) -> dict[str, str]:
    """manifests/gitops/<site>/: the Flux source and the Pulumi Operator stack (applied once by hand, by a
    person with cluster-admin; from then on the cluster applies the site from its repository)."""
    return _files(plan, gitops_objects(plan))


def manifest_files(plan: Plan) -> dict[str, str]:
    header = _header(plan)
    files = _files(plan, objects(plan) | jobs(plan))
    index = [
        {
            "release": c.release,
            "chart": c.chart,
            "repository": c.repository,
            "version": c.version,
            "namespace": c.namespace,
            "values": f"{c.release}.values.yaml",
        }
        for c in charts(plan)
    ]
    remote = [{"name": m.name, "version": m.version, "url": m.url} for m in remote_manifests(plan)]
    if index or remote:
        files["charts/index.yaml"] = header + to_yaml({"releases": index, "manifests": remote})
        for c in charts(plan):
            files[f"charts/{c.release}.values.yaml"] = header + to_yaml(c.values)
    return files | pull_inventory_files(plan)
