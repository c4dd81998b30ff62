"""`aisite accept` on a lab: the measurements, for real, in the nodes' and switches' network namespaces (nsenter,
this machine's iperf3 and Python).

- node: rail interfaces present and up, MTU and address as planned, the per-rail routing rule and table, the
  multi-rail ARP settings of roles/roce_host; GPU, DCGM, NVLink and RDMA QoS checks are reported skipped where the
  node has no NVIDIA driver or RDMA device (the lab's containers have neither);
- link: iperf3 from each node's rail to its leaf (the rail's gateway, on the leaf's bridge) and back;
- pair: iperf3 from one node's rail to another's;
- all_reduce: gloo (aisite/payloads/allreduce.py), a rank per (node, rail), each leaving on its rail.

Floors: the lab's (site.acceptance.lab_min_gbps, lab_min_busbw_gbps): the lab's CPUs, not a NIC model, set its
figures; the stages judge against the best of a kind as well (aisite/accept/stages.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import yaml

from aisite.accept.report import Check
from aisite.accept.stages import MeasureError, Options
from aisite.bench.lab import BenchError, launch
from aisite.bench.results import collect
from aisite.health import parse
from aisite.lab.netns import NetnsError, in_netns, iperf3, pid
from aisite.lab.podman import LabError, run
from aisite.plan import Node, Plan, Rail
from aisite.playbooks import ROLES
from aisite.render.inventory import container_name

IPERF_PORT = 5301
ROCE_DEFAULTS = ROLES / "roce_host" / "defaults" / "main.yml"
SYSCTL_FILE = "/etc/sysctl.d/91-aisite-rails.conf"  # where roles/roce_host persists them


class LabRunner:
    lab = True
    links = True
    unit = "Gb/s"

    def __init__(self, plan: Plan, opts: Options) -> None:
        assert plan.acceptance is not None
        self.plan, self.opts, self.a = plan, opts, plan.acceptance
        self._port = IPERF_PORT

    def bandwidth_floor(self, stage: str, n: Node) -> float | None:
        return self.a.lab_min_gbps

    def busbw_floor(self, scope: str, ranks: Sequence[tuple[Node, Rail]]) -> float | None:
        return self.a.lab_min_busbw_gbps

    def node(self, n: Node) -> list[Check]:
        checks: list[Check] = []
        add = checks.append
        tools = run(
            [
                "podman",
                "exec",
                container_name(self.plan, n.name),
                "sh",
                "-c",
                "command -v nvidia-smi dcgmi; ls /sys/class/infiniband 2>/dev/null",
            ],
            check=False,
        )
        for metric, what in (
            ("gpu-count", "nvidia-smi"),
            ("dcgm-diag", f"dcgmi diag -r {self.a.dcgm_levels[self.opts.level]}"),
            ("nvlink", "nvidia-smi nvlink --status"),
        ):
            if "nvidia-smi" not in tools:
                add(
                    Check(
                        "node",
                        n.name,
                        metric,
                        None,
                        what,
                        "skipped",
                        "no NVIDIA driver on the node (lab: no GPUs)",
                        node=n.name,
                    )
                )
        text = in_netns(self.plan, n.name, "ip", "-j", "-d", "addr", "show")
        # The node health check's reader and its idea of up (UP with carrier, LOWER_UP); the raw rows for the kind.
        links = parse.ip_links(text)
        kinds = {x["ifname"]: x.get("linkinfo", {}).get("info_kind") for x in json.loads(text or "[]")}
        rules = json.loads(in_netns(self.plan, n.name, "ip", "-j", "rule", "show"))
        wanted = yaml.safe_load(ROCE_DEFAULTS.read_text())["roce_host_rail_sysctls"]
        container = container_name(self.plan, n.name)
        probe = "test -w /proc/sys/net/ipv4/conf/all/arp_ignore && echo rw || echo ro"
        read_only = run(["podman", "exec", container, "sh", "-c", probe], check=False).strip() != "rw"
        persisted = dict(
            line.strip().replace(" ", "").split("=", 1)
            for line in run(["podman", "exec", container, "cat", SYSCTL_FILE], check=False).splitlines()
            if "=" in line and not line.lstrip().startswith("#")
        )
        present = [r for r in n.rails if r.interface in links]
        add(
            Check(
                "node",
                n.name,
                "rail-interfaces",
                f"{len(present)}/{len(n.rails)}",
                f"{len(n.rails)} ({', '.join(r.interface for r in n.rails)})",
                "pass" if len(present) == len(n.rails) else "fail",
                ""
                if len(present) == len(n.rails)
                else "missing: " + ", ".join(r.interface for r in n.rails if r.interface not in links),
                node=n.name,
            )
        )
        for r in present:
            link = links[r.interface]
            subject = f"{n.name}:{r.interface}"

            def check(  # noqa: PLR0917 - a row of the node's table
                metric: str,
                value: object,
                expected: object,
                ok: bool,
                detail: str = "",
                rail: Rail = r,
                subj: str = subject,
            ) -> None:
                add(
                    Check(
                        "node",
                        subj,
                        metric,
                        str(value),
                        str(expected),
                        "pass" if ok else "fail",
                        detail,
                        node=n.name,
                        rail=rail.index,
                    )
                )

            check("link-state", link.operstate, "UP", link.up, "" if link.up else "no carrier (LOWER_UP) or down")
            check(
                "mtu",
                link.mtu,
                r.mtu,
                link.mtu == r.mtu,
                "" if link.mtu == r.mtu else f"MTU {link.mtu}, the plan's {r.mtu}",
            )
            want = f"{r.address}/{r.prefix}"
            check("address", ",".join(sorted(link.addresses)) or "none", want, want in link.addresses)
            if kinds.get(r.interface) == "veth":
                add(
                    Check(
                        "node",
                        subject,
                        "link-speed",
                        None,
                        f"{r.speed_gbps} Gb/s",
                        "skipped",
                        "a veth has no line rate",
                        node=n.name,
                        rail=r.index,
                    )
                )
            rule = any(x.get("src") == r.address and str(x.get("table")) == str(r.table) for x in rules)
            check("source-rule", "present" if rule else "absent", f"from {r.address} lookup {r.table}", rule)
            routes = json.loads(
                in_netns(self.plan, n.name, "ip", "-j", "route", "show", "table", str(r.table), check=False) or "[]"
            )
            default = any(x.get("dst") == "default" and x.get("gateway") == r.gateway for x in routes)
            check(
                "rail-route", "present" if default else "absent", f"default via {r.gateway} in table {r.table}", default
            )
            if read_only:
                # As roles/roce_host reports: the settings are persisted but cannot be applied on this node.
                add(
                    Check(
                        "node",
                        subject,
                        "arp-settings",
                        None,
                        ",".join(f"{k}={v}" for k, v in wanted.items()),
                        "skipped",
                        "/proc/sys is read-only on this node (the lab's containers): not in force",
                        node=n.name,
                        rail=r.index,
                    )
                )
                source, state = persisted, "persisted"
            else:
                source = {
                    f"net.ipv4.conf.{r.interface}.{key}": in_netns(
                        self.plan, n.name, "cat", f"/proc/sys/net/ipv4/conf/{r.interface}/{key}", check=False
                    ).strip()
                    for key in wanted
                }
                state = "in force"
            got = {k: source.get(f"net.ipv4.conf.{r.interface}.{k}", "unset") for k in wanted}
            bad = {k: v for k, v in got.items() if v != str(wanted[k])}
            check(
                "arp-settings" if state == "in force" else "arp-settings-persisted",
                ",".join(f"{k}={v}" for k, v in got.items()),
                ",".join(f"{k}={v}" for k, v in wanted.items()),
                not bad,
                "; ".join(f"{k} {v} {state}, wanted {wanted[k]}" for k, v in bad.items()),
            )
            if "/sys/class/infiniband" not in tools and "mlx5" not in tools:
                add(
                    Check(
                        "node",
                        subject,
                        "roce-qos",
                        None,
                        f"trust {self.plan.roce.trust}, PFC {self.plan.roce.pfc_enable}",
                        "skipped",
                        "no RDMA device on the node (lab: no mlx5)",
                        node=n.name,
                        rail=r.index,
                    )
                )
        return checks

    def link(self, n: Node, r: Rail, reverse: bool) -> float:
        return self._iperf(n.name, r.address, r.leaf, r.gateway, reverse)

    def pair(self, a: Node, ra: Rail, b: Node, rb: Rail) -> float:
        return self._iperf(a.name, ra.address, b.name, rb.address, False)

    def _iperf(self, client: str, src: str, server: str, dst: str, reverse: bool) -> float:
        """Gb/s received, from `src` in client's namespace to `dst` in server's (reverse: server sends)."""
        self._port += 1
        try:
            text = iperf3(
                self.plan, client, src, server, dst, seconds=self.opts.seconds, port=self._port, reverse=reverse
            )
        except NetnsError as exc:
            raise MeasureError(str(exc)) from None
        return float(json.loads(text)["end"]["sum_received"]["bits_per_second"]) / 1e9

    def _pid(self, host: str) -> int:
        try:
            return pid(self.plan, host)
        except NetnsError as exc:
            raise MeasureError(str(exc)) from None

    def allreduce(self, name: str, ranks: Sequence[tuple[Node, Rail]], scope: str) -> float:
        args = ["--group", name, "--mbytes", str(self.opts.mbytes), "--iterations", str(self.opts.iterations)]
        args += ["--timeout", str(int(self.opts.timeout))]
        self._port += 1
        try:
            out = launch(
                self.plan,
                list(ranks),
                "aisite.payloads.allreduce",
                args,
                timeout=self.opts.timeout,
                what=name,
                port=self._port,
            )
            found = collect(out[0], f"{name} rank 0")
        except (BenchError, LabError) as exc:
            raise MeasureError(str(exc)) from None
        if len(found) != 1:
            raise MeasureError(f"{name}: rank 0 printed {len(found)} results")
        return float(found[0].value)
