"""`aisite accept` on a lab: the stages with what the lab can run, for real, in the nodes' and switches' network
namespaces (nsenter, this machine's iperf3 and Python).

- node: rail interfaces present and up, MTU and address as planned, the per-rail routing rule and table, the
  multi-rail ARP settings of roles/roce_host; GPU, DCGM, NVLink and RDMA QoS checks are reported skipped where the
  node has no NVIDIA driver or RDMA device (the lab's containers have neither);
- link: iperf3 from each node's rail to its leaf (the rail's gateway, on the leaf's bridge) and back: a cable;
- pair: iperf3 between every ordered pair of nodes on each rail, within a unit and across units: the heat map;
- group: gloo all_reduce within each node (a rank per rail), within each unit per rail, across units per rail;
  a failing group is bisected (halves re-run; one node stands for itself by its link checks).

Thresholds: the lab's floors (site.acceptance.lab_min_gbps, lab_min_busbw_gbps) and the best of the same kind
(fail below fail_fraction of it, degraded below degraded_fraction): the lab's CPUs, not a NIC model, set its
figures.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import permutations

import yaml

from aisite.accept.bisect import isolate
from aisite.accept.report import Check, Finding, Report, expected_text, judge
from aisite.bench.lab import BenchError, launch, pid
from aisite.bench.results import collect
from aisite.lab.podman import LabError, run
from aisite.loader import ROOT
from aisite.plan import Node, Plan, Rail

Say = Callable[[str], None]
IPERF_PORT = 5301
ROCE_DEFAULTS = ROOT / "roles" / "roce_host" / "defaults" / "main.yml"
SYSCTL_FILE = "/etc/sysctl.d/91-aisite-rails.conf"  # where roles/roce_host persists them


@dataclass(frozen=True, slots=True)
class Options:
    level: str = "quick"
    seconds: int = 2  # per iperf3 direction
    mbytes: float = 32.0  # all_reduce tensor: large enough that a step is tens of ms, not noise
    iterations: int = 5
    timeout: float = 180.0


def _ns(plan: Plan, host: str, *cmd: str, check: bool = True) -> str:
    return run(["nsenter", "-t", str(pid(plan, host)), "-n", *cmd], check=check, what=f"{host}: {' '.join(cmd[:3])}")


class LabAcceptance:
    def __init__(self, plan: Plan, opts: Options, say: Say) -> None:
        self.plan, self.opts, self.say = plan, opts, say
        assert plan.acceptance is not None
        self.a = plan.acceptance
        self.nodes = [n for n in plan.by_role("gpu") if n.rails]
        self.report = Report(plan.site, opts.level, True, datetime.now(UTC).isoformat(timespec="seconds"))
        self.link_ok: dict[tuple[str, int], bool] = {}
        # A bisected group's subject -> (the members isolated, the halves that fail only together).
        self.isolated: dict[str, tuple[list[str], list[tuple[tuple[str, ...], tuple[str, ...]]]]] = {}
        self._port = IPERF_PORT

    # ------------------------------------------------------------------------------------------------ stages
    def run(self) -> Report:
        t0 = time.monotonic()
        for n in self.plan.by_role("gpu"):
            if not n.rails:
                self.report.skipped.append(f"{n.name}: no rails (nics: 0): only its node checks apply")
        if not self.nodes:
            self.report.skipped.append("no GPU node has rails: nothing to measure on the fabric")
        for n in self.nodes:
            self.say(f"node: {n.name}")
            self.node_stage(n)
        self.bandwidth_stage("link", self._links())
        self.bandwidth_stage("pair", self._pairs())
        self.group_stage()
        self.attribute()
        self.report.seconds = time.monotonic() - t0
        return self.report

    def node_stage(self, n: Node) -> None:
        add = self.report.checks.append
        tools = run(
            [
                "podman",
                "exec",
                _container(self.plan, n.name),
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
        links = {x["ifname"]: x for x in json.loads(_ns(self.plan, n.name, "ip", "-j", "-d", "addr", "show"))}
        rules = json.loads(_ns(self.plan, n.name, "ip", "-j", "rule", "show"))
        wanted = yaml.safe_load(ROCE_DEFAULTS.read_text())["roce_host_rail_sysctls"]
        container = _container(self.plan, n.name)
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

            up = "UP" in link.get("flags", []) and link.get("operstate") in ("UP", "UNKNOWN")
            check("link-state", link.get("operstate"), "UP", up)
            check(
                "mtu",
                link.get("mtu"),
                r.mtu,
                link.get("mtu") == r.mtu,
                "" if link.get("mtu") == r.mtu else f"MTU {link.get('mtu')}, the plan's {r.mtu}",
            )
            addrs = {f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", []) if a.get("family") == "inet"}
            want = f"{r.address}/{r.prefix}"
            check("address", ",".join(sorted(addrs)) or "none", want, want in addrs)
            kind = link.get("linkinfo", {}).get("info_kind")
            if kind == "veth":
                add(
                    Check(
                        "node",
                        subject,
                        "link-speed",
                        None,
                        f"{_speed(self.plan, n.name, r)} Gb/s",
                        "skipped",
                        "a veth has no line rate",
                        node=n.name,
                        rail=r.index,
                    )
                )
            rule = any(x.get("src") == r.address and str(x.get("table")) == str(r.table) for x in rules)
            check("source-rule", "present" if rule else "absent", f"from {r.address} lookup {r.table}", rule)
            routes = json.loads(
                _ns(self.plan, n.name, "ip", "-j", "route", "show", "table", str(r.table), check=False) or "[]"
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
                    f"net.ipv4.conf.{r.interface}.{key}": _ns(
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

    def _links(self) -> list[tuple[Check, Callable[[], float]]]:
        out = []
        for n in self.nodes:
            for r in n.rails:
                leaf = r.leaf
                for direction in ("tx", "rx"):
                    c = Check(
                        "link",
                        f"{n.name}:{r.interface}{'>' if direction == 'tx' else '<'}{leaf}",
                        f"iperf3-{direction}-gbps",
                        None,
                        "",
                        "pass",
                        node=n.name,
                        rail=r.index,
                        peer=None if direction == "tx" else leaf,
                    )
                    out.append((c, _bind(self._iperf, n.name, r.address, leaf, r.gateway, direction == "rx")))
        return out

    def _pairs(self) -> list[tuple[Check, Callable[[], float]]]:
        out = []
        rails = min((len(n.rails) for n in self.nodes), default=0)
        for r in range(rails):
            for a, b in permutations(self.nodes, 2):
                ra, rb = a.rails[r], b.rails[r]
                scope = "unit" if a.scalable_unit == b.scalable_unit else "across units"
                c = Check(
                    "pair",
                    f"{a.name}:{ra.interface}>{b.name}:{rb.interface}",
                    "iperf3-gbps",
                    None,
                    "",
                    "pass",
                    scope,
                    node=a.name,
                    rail=r,
                    peer=b.name,
                )
                out.append((c, _bind(self._iperf, a.name, ra.address, b.name, rb.address, False)))
        return out

    def bandwidth_stage(self, stage: str, runs: list[tuple[Check, Callable[[], float]]]) -> None:
        for i, (c, measure) in enumerate(runs):
            self.say(f"{stage} {i + 1}/{len(runs)}: {c.subject}")
            try:
                c.value = measure()
            except (LabError, BenchError, ValueError) as exc:
                c.value, c.verdict, c.detail = float("nan"), "fail", str(exc)[-300:]
        kinds: dict[str, list[Check]] = {}
        for c, _ in runs:
            kinds.setdefault(c.metric, []).append(c)
        for checks in kinds.values():
            values = [c.value for c in checks if isinstance(c.value, float) and c.value == c.value]
            best = max(values, default=0.0)
            for c in checks:
                assert isinstance(c.value, float)
                c.verdict = judge(c.value, self.a.lab_min_gbps, best, self.a.fail_fraction, self.a.degraded_fraction)
                c.expected = expected_text(self.a.lab_min_gbps, best, self.a.fail_fraction, "Gb/s")
                if stage == "link" and c.rail is not None and c.node:
                    key = (c.node, c.rail)
                    self.link_ok[key] = self.link_ok.get(key, True) and c.verdict != "fail"
            self.report.checks.extend(checks)

    def _iperf(self, client: str, src: str, server: str, dst: str, reverse: bool) -> float:
        """Gb/s received, from `src` in client's namespace to `dst` in server's (reverse: server sends)."""
        self._port += 1
        port = str(self._port)
        srv = subprocess.Popen(
            ["nsenter", "-t", str(pid(self.plan, server)), "-n", "iperf3", "-s", "-1", "-B", dst, "-p", port],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            text = ""
            for _ in range(40):
                time.sleep(0.1)
                cmd = ["iperf3", "-J", "-c", dst, "-B", src, "-p", port, "-t", str(self.opts.seconds)] + (
                    ["-R"] if reverse else []
                )
                r = subprocess.run(
                    ["nsenter", "-t", str(pid(self.plan, client)), "-n", *cmd],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                text = r.stdout
                if r.returncode == 0:
                    break
                if "Connection refused" not in text and "unable to connect" not in text:
                    break
            doc = json.loads(text or "{}")
            if "error" in doc or "end" not in doc:
                raise ValueError(f"iperf3 {src} -> {dst}: {doc.get('error', 'no result')}")
            return float(doc["end"]["sum_received"]["bits_per_second"]) / 1e9
        finally:
            if srv.poll() is None:
                srv.kill()
            srv.wait()

    # ----------------------------------------------------------------------------------------------- groups
    def group_stage(self) -> None:
        groups: list[tuple[str, str, list[tuple[Node, Rail]]]] = []
        for n in self.nodes:
            if len(n.rails) > 1:
                groups.append(("node", n.name, [(n, r) for r in n.rails]))
        units: dict[int, list[Node]] = {}
        for n in self.nodes:
            units.setdefault(n.scalable_unit or 0, []).append(n)
        rails = min((len(n.rails) for n in self.nodes), default=0)
        for su, members in units.items():
            if len(members) < 2:
                self.report.skipped.append(f"unit {su}: one node with rails: no group within the unit")
                continue
            for r in range(rails):
                groups.append(("unit", f"unit{su}/rail{r}", [(m, m.rails[r]) for m in members]))
        if len(units) > 1:
            for r in range(rails):
                groups.append(("across", f"units/rail{r}", [(m, m.rails[r]) for m in self.nodes]))
        else:
            self.report.skipped.append("across units: the site has one unit with rail nodes")
        checks = []
        for i, (scope, name, ranks) in enumerate(groups):
            self.say(f"group {i + 1}/{len(groups)}: all_reduce {name} ({len(ranks)} ranks)")
            c = Check(
                "group",
                f"{name}[{','.join(sorted({n.name for n, _ in ranks}))}]",
                f"allreduce-{scope}-busbw",
                None,
                "",
                "pass",
                members=tuple(n.name for n, _ in ranks),
                rail=ranks[0][1].index if scope != "node" else None,
                node=ranks[0][0].name if scope == "node" else None,
            )
            c.value = self._allreduce(name, ranks, c)
            checks.append((c, scope, ranks))
        best: dict[str, float] = {}
        for c, scope, _ in checks:
            if isinstance(c.value, float) and c.value == c.value:
                best[scope] = max(best.get(scope, 0.0), c.value)
        floor = self.a.lab_min_busbw_gbps
        for c, scope, ranks in checks:
            assert isinstance(c.value, float)
            c.verdict = judge(c.value, floor, best.get(scope, 0.0), self.a.fail_fraction, self.a.degraded_fraction)
            c.expected = expected_text(floor, best.get(scope, 0.0), self.a.fail_fraction, "GB/s")
            self.report.checks.append(c)
            if c.verdict == "fail" and scope != "node":
                self._bisect(c, ranks, best.get(scope, 0.0), floor)

    def _allreduce(self, name: str, ranks: Sequence[tuple[Node, Rail]], c: Check) -> float:
        args = [
            "--group",
            name,
            "--mbytes",
            str(self.opts.mbytes),
            "--iterations",
            str(self.opts.iterations),
            "--timeout",
            str(int(self.opts.timeout)),
        ]
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
            if len(found) != 1:
                raise BenchError(f"{name}: rank 0 printed {len(found)} results")
            return float(found[0].value)
        except (BenchError, LabError) as exc:
            c.detail = str(exc)[-300:]
            return float("nan")

    def _bisect(self, failed: Check, ranks: Sequence[tuple[Node, Rail]], best: float, floor: float) -> None:
        rail = ranks[0][1].index

        def test(sub: Sequence[tuple[Node, Rail]]) -> bool:
            if len(sub) == 1:  # one node stands for itself: its own link checks on this rail
                return self.link_ok.get((sub[0][0].name, rail), False)
            name = f"{failed.subject.split('[')[0]}/bisect"
            c = Check(
                "bisect",
                f"{name}[{','.join(n.name for n, _ in sub)}]",
                failed.metric,
                None,
                "",
                "pass",
                f"bisecting {failed.subject}",
                rail=rail,
                members=tuple(n.name for n, _ in sub),
            )
            self.say(f"bisect: {c.subject}")
            c.value = self._allreduce(name, sub, c)
            c.verdict = judge(c.value, floor, best, self.a.fail_fraction, self.a.degraded_fraction)
            c.expected = expected_text(floor, best, self.a.fail_fraction, "GB/s")
            self.report.checks.append(c)
            return c.verdict != "fail"

        found = isolate(list(ranks), test)
        failed.detail = (failed.detail + "; " if failed.detail else "") + (
            f"bisection ({found.tests} tests): "
            + ", ".join(f"{n.name}:{r.interface}" for n, r in found.members)
            + "".join(f"; between {[n.name for n, _ in a]} and {[n.name for n, _ in b]}" for a, b in found.between)
        )
        self.isolated[failed.subject] = (
            [n.name for n, _ in found.members],
            [(tuple(n.name for n, _ in a), tuple(n.name for n, _ in b)) for a, b in found.between],
        )

    # ------------------------------------------------------------------------------------------ attribution
    def attribute(self) -> None:
        """Findings from failed and degraded checks, most specific first: a node's own state, then its links;
        a pair or group those explain adds to their evidence. What nothing explains is named as a path (a pair,
        or halves that fail only together) or as the members bisection isolated."""
        found: dict[tuple[str, int | None, str | None], Finding] = {}
        iface = {(n.name, r.index): r.interface for n in self.nodes for r in n.rails}

        def add(node: str, rail: int | None, peer: str | None, c: Check, what: str) -> None:
            f = found.get((node, rail, peer))
            if f is None:
                interface = iface.get((node, rail)) if rail is not None else None
                found[(node, rail, peer)] = Finding(node, rail, interface, peer, c.verdict, what, [c.subject])
            elif c.subject not in f.evidence:
                f.evidence.append(c.subject)

        def explained(node: str, rail: int | None, c: Check) -> bool:
            keys = [k for k in found if k[0] == node and k[2] is None and (rail is None or k[1] in (rail, None))]
            for k in keys:
                if c.subject not in found[k].evidence:
                    found[k].evidence.append(c.subject)
            return bool(keys)

        # Degraded checks stay in the report (and the node's verdict) but name nothing: a share of the best is
        # noisy on small groups, and a finding must stand.
        bad = [c for c in self.report.checks if c.verdict == "fail"]
        for c in bad:
            if c.stage == "node" and c.node:
                detail = f" ({c.detail})" if c.detail else ""
                add(c.node, c.rail, None, c, f"{c.metric}: {c.value}, expected {c.expected}{detail}")
        for c in bad:
            if c.stage == "link" and c.node and not explained(c.node, c.rail, c):
                add(c.node, c.rail, None, c, f"{c.subject} {c.metric}: {_fmt(c.value)} Gb/s, expected {c.expected}")
        for c in bad:
            if c.stage != "pair" or not (c.node and c.peer):
                continue
            if not (explained(c.node, c.rail, c) | explained(c.peer, c.rail, c)):
                add(c.node, c.rail, c.peer, c, f"path {c.subject}: {_fmt(c.value)} Gb/s, expected {c.expected}")
        for c in bad:
            if c.stage != "group":
                continue
            members, between = self.isolated.get(c.subject, ([], []))
            if not members and not between:  # within a node, or degraded (only failures are bisected)
                if not any([explained(m, c.rail, c) for m in c.members]):
                    add(
                        ",".join(dict.fromkeys(c.members)),
                        c.rail,
                        None,
                        c,
                        f"{c.subject} {c.metric}: {_fmt(c.value)} GB/s, expected {c.expected}",
                    )
                continue
            for m in members:
                if not explained(m, c.rail, c):
                    add(m, c.rail, None, c, f"{c.metric}: bisection of {c.subject} isolated it")
            for left, right in between:
                add(
                    left[0],
                    c.rail,
                    right[0],
                    c,
                    f"{c.metric}: {list(left)} and {list(right)} pass apart, fail together",
                )
        self.report.findings = sorted(
            found.values(), key=lambda f: (f.node, -1 if f.rail is None else f.rail, f.peer or "")
        )


def _fmt(value: float | str | None) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _bind(fn: Callable[..., float], *args: object) -> Callable[[], float]:
    return lambda: fn(*args)


def _container(plan: Plan, host: str) -> str:
    from aisite.render.inventory import container_name

    return container_name(plan, host)


def _speed(plan: Plan, node: str, r: Rail) -> int:
    return next(
        (c.speed_gbps for c in plan.cables if c.kind == "rail" and c.a_device == node and c.b_port == r.leaf_port), 0
    )
