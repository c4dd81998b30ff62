"""The Pulumi program behind `__main__.py`: the stack's site, validated and planned, deployed layer by layer."""

from __future__ import annotations

import functools
from typing import Any

import pulumi

from aisite.components import SiteArgs, SiteDeployment
from aisite.errors import SiteError
from aisite.fields import secret_env as env_name
from aisite.loader import CONFIG_KEY, parse_site
from aisite.plan import build_plan
from aisite.secrets import Use, limit_problems, resolve, username_of, uses


def _pulumi_secret(key: str) -> pulumi.Output[str] | None:
    namespace, _, name = key.rpartition(":")
    return pulumi.Config(namespace or "aisite").get_secret(name)


def _checked(source: str, name: str, username: str, used: list[Use], value: object) -> str:
    problems = limit_problems(name, username, str(value), used)
    if problems:
        raise pulumi.RunError(str(SiteError(source, problems)))
    return str(value)


def run() -> SiteDeployment:
    namespace, _, key = CONFIG_KEY.partition(":")
    data: Any = pulumi.Config(namespace).require_object(key)
    source = f"stack {pulumi.get_stack()} config {CONFIG_KEY}"
    try:
        site = parse_site(data, source)
    except SiteError as exc:
        raise pulumi.RunError(str(exc)) from None
    plan = build_plan(site)
    # A preview changes nothing and needs no credential: a secret not set is an unknown value there (each use shows
    # as computed), said once; `pulumi up` resolves it or fails naming it.
    missing: list[str] | None = [] if pulumi.runtime.is_dry_run() else None
    secrets, problems = resolve(plan, pulumi_lookup=_pulumi_secret, missing=missing)
    if problems:
        raise pulumi.RunError(str(SiteError(source, problems)))
    for name in missing or []:
        pulumi.log.warn(f"secret {name!r} is not set: the preview shows its uses as unknown; `pulumi up` needs it")
        secrets[env_name(name)] = pulumi.Output.secret(pulumi.output.UNKNOWN)
    # Values from the environment become Pulumi secrets too, so they are encrypted in state and masked in logs.
    secret_env: dict[str, pulumi.Input[str]] = {
        k: v if isinstance(v, pulumi.Output) else pulumi.Output.secret(str(v)) for k, v in secrets.items()
    }
    # A Pulumi secret's value is known only inside apply: check it there, so every resource that uses it fails
    # with the problem instead of reaching a BMC that will refuse it.
    used = uses(plan)
    for name in used:
        value = secrets.get(env_name(name))
        if isinstance(value, pulumi.Output):
            check = functools.partial(_checked, source, name, username_of(plan, name), used[name])
            secret_env[env_name(name)] = value.apply(check)
    deployment = SiteDeployment(SiteArgs(plan=plan, secret_env=secret_env, stack=pulumi.get_stack()))
    pulumi.export("site", plan.site)
    pulumi.export("nodes", len(plan.nodes))
    pulumi.export("gpus", sum(n.gpu.count for n in plan.nodes if n.gpu))
    pulumi.export("api_endpoint", f"https://{plan.kubernetes.api_vip}:{plan.kubernetes.api_port}")
    pulumi.export("kubeconfig", deployment.layers["cluster"].outputs["kubeconfig"])
    pulumi.export("layers", {name: layer.trigger for name, layer in deployment.layers.items()})
    return deployment
