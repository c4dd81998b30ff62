"""The Pulumi program behind `__main__.py`: the stack's site, validated and planned, deployed layer by layer."""

from __future__ import annotations

from typing import Any

import pulumi

from aisite.components import SiteArgs, SiteDeployment
from aisite.errors import SiteError
from aisite.loader import CONFIG_KEY, parse_site
from aisite.plan import build_plan
from aisite.secrets import resolve


def _pulumi_secret(key: str) -> pulumi.Output[str] | None:
    namespace, _, name = key.rpartition(":")
    return pulumi.Config(namespace or "aisite").get_secret(name)


def run() -> SiteDeployment:
    namespace, _, key = CONFIG_KEY.partition(":")
    data: Any = pulumi.Config(namespace).require_object(key)
    source = f"stack {pulumi.get_stack()} config {CONFIG_KEY}"
    try:
        site = parse_site(data, source)
    except SiteError as exc:
        raise pulumi.RunError(str(exc)) from None
    plan = build_plan(site)
    secrets, problems = resolve(plan, pulumi_lookup=_pulumi_secret)
    if problems:
        raise pulumi.RunError(str(SiteError(source, problems)))
    # Values from the environment become Pulumi secrets too, so they are encrypted in state and masked in logs.
    secret_env: dict[str, pulumi.Input[str]] = {
        k: v if isinstance(v, pulumi.Output) else pulumi.Output.secret(str(v)) for k, v in secrets.items()
    }
    deployment = SiteDeployment(SiteArgs(plan=plan, secret_env=secret_env))
    pulumi.export("site", plan.site)
    pulumi.export("nodes", len(plan.nodes))
    pulumi.export("gpus", sum(n.gpu.count for n in plan.nodes if n.gpu))
    pulumi.export("api_endpoint", f"https://{plan.kubernetes.api_vip}:{plan.kubernetes.api_port}")
    pulumi.export("layers", {name: layer.trigger for name, layer in deployment.layers.items()})
    return deployment
