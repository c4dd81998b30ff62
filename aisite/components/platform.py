"""The Platform layer: the site's charts and objects on its cluster, through a Kubernetes provider built from the
Cluster layer's secret kubeconfig. The content is aisite.platform's, the same that `render` writes and
`deploy --layer platform` applies."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from aisite.plan import Plan
from aisite.platform import NAMESPACES, Chart, charts, jobs, objects, remote_manifests


@dataclass(frozen=True)
class PlatformArgs:
    plan: Plan
    kubeconfig: pulumi.Input[str | None]


def _release_args(c: Chart) -> k8s.helm.v3.ReleaseArgs:
    oci = c.repository.startswith("oci://")
    return k8s.helm.v3.ReleaseArgs(
        name=c.release,
        chart=f"{c.repository}/{c.chart}" if oci else c.chart,
        version=c.version,
        namespace=c.namespace,
        # The project creates it first, with its Pod Security labels (objects' namespaces.yaml).
        create_namespace=False,
        repository_opts=None if oci else k8s.helm.v3.RepositoryOptsArgs(repo=c.repository),
        values=c.values,
        # A release that fails is rolled back: a half-installed operator is worse than the previous one.
        atomic=True,
        cleanup_on_fail=True,
    )


class Platform(pulumi.ComponentResource):
    layer = "platform"

    def __init__(self, args: PlatformArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        site = args.plan.site
        super().__init__("aisite:site:Platform", f"{site}-platform", None, opts)
        self.provider = k8s.Provider(
            f"{site}-k8s", kubeconfig=args.kubeconfig, opts=pulumi.ResourceOptions(parent=self)
        )
        on_cluster = pulumi.ResourceOptions(parent=self, provider=self.provider)
        self.releases: dict[str, k8s.helm.v3.Release] = {}
        providing: dict[str, pulumi.Resource] = {}  # kind -> the release that installs its CRD
        files = objects(args.plan)
        self.groups: dict[str, k8s.yaml.v2.ConfigGroup] = {}
        if NAMESPACES in files:
            self.groups[NAMESPACES] = k8s.yaml.v2.ConfigGroup(
                f"{site}-objects-namespaces", objs=files.pop(NAMESPACES), opts=on_cluster
            )
        before = pulumi.ResourceOptions.merge(on_cluster, pulumi.ResourceOptions(depends_on=list(self.groups.values())))
        for c in charts(args.plan):
            release = k8s.helm.v3.Release(f"{site}-{c.release}", _release_args(c), opts=before)
            self.releases[c.release] = release
            providing |= dict.fromkeys(c.provides, release)
        for m in remote_manifests(args.plan):
            applied = k8s.yaml.v2.ConfigFile(f"{site}-{m.name}", file=m.url, opts=on_cluster)
            providing |= dict.fromkeys(m.provides, applied)
        # A file's objects wait for the releases whose CRDs they use (and every release's webhooks, through them).
        self.providing = providing
        for name, objs in files.items():
            needs = list(dict.fromkeys(providing[o["kind"]] for o in objs if o["kind"] in providing))
            self.groups[name] = k8s.yaml.v2.ConfigGroup(
                f"{site}-objects-{name.removesuffix('.yaml')}",
                objs=objs,
                opts=pulumi.ResourceOptions.merge(on_cluster, pulumi.ResourceOptions(depends_on=needs)),
            )
        self.register_outputs(
            {"releases": {name: r.status for name, r in self.releases.items()}, "objects": list(self.groups)}
        )


@dataclass(frozen=True)
class JobsArgs:
    plan: Plan
    platform: Platform


class Jobs(pulumi.ComponentResource):
    """The Workloads layer's jobs (aisite.platform.jobs, the files `render` writes under workloads/), created
    suspended in the tenants' queues once the operators that define them and the tenants' objects exist."""

    def __init__(self, args: JobsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        site = args.plan.site
        super().__init__("aisite:site:Jobs", f"{site}-jobs", None, opts)
        p = args.platform
        on_cluster = pulumi.ResourceOptions(parent=self, provider=p.provider)
        tenant_files: list[pulumi.Resource] = list(p.groups.values())
        self.groups: dict[str, k8s.yaml.v2.ConfigGroup] = {}
        for name, objs in jobs(args.plan).items():
            needs = list(dict.fromkeys(p.providing[o["kind"]] for o in objs if o["kind"] in p.providing))
            self.groups[name] = k8s.yaml.v2.ConfigGroup(
                f"{site}-{name.removesuffix('.yaml').replace('/', '-')}",
                objs=objs,
                opts=pulumi.ResourceOptions.merge(on_cluster, pulumi.ResourceOptions(depends_on=needs + tenant_files)),
            )
        self.register_outputs({"jobs": list(self.groups)})
