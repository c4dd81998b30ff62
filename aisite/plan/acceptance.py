"""The thresholds `aisite accept` holds this site's hardware to: the catalog's table (with its sources), replaced
figure by figure by the site's `acceptance`."""

from __future__ import annotations

from aisite.catalog import DCGM_LEVELS, IB_WRITE_BW_GBPS, NCCL_BUSBW_GBPS
from aisite.model import Site
from aisite.plan.types import AcceptancePlan, Node, Threshold


def acceptance_plan(site: Site, nodes: tuple[Node, ...], rail_speeds: set[int]) -> AcceptancePlan:
    a = site.acceptance
    gpu_types = list(dict.fromkeys(n.gpu.type for n in nodes if n.gpu))
    nccl = []
    for g in gpu_types:
        if g in a.nccl_busbw_gbps:
            nccl.append(Threshold(g, a.nccl_busbw_gbps[g], "GB/s", "site.acceptance.nccl_busbw_gbps"))
        elif fig := NCCL_BUSBW_GBPS.get(g):
            nccl.append(Threshold(g, fig.value, fig.unit, fig.source))
    ib = []
    for speed in sorted(rail_speeds):
        if speed in a.ib_write_bw_gbps:
            ib.append(Threshold(str(speed), a.ib_write_bw_gbps[speed], "Gb/s", "site.acceptance.ib_write_bw_gbps"))
        elif fig := IB_WRITE_BW_GBPS.get(speed):
            ib.append(Threshold(str(speed), fig.value, fig.unit, fig.source))
    return AcceptancePlan(
        namespace=a.namespace,
        dcgm_levels=dict(DCGM_LEVELS),
        nccl_busbw=tuple(nccl),
        ib_write_bw=tuple(ib),
        fail_fraction=a.fail_fraction,
        degraded_fraction=a.degraded_fraction,
        lab_min_gbps=a.lab_min_gbps,
        lab_min_busbw_gbps=a.lab_min_busbw_gbps,
    )
