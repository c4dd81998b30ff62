"""The out-of-band network: `oob discover`, `oob firmware`."""

from __future__ import annotations

import ipaddress
import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from aisite.cli.common import EXIT_FAILED, JsonOpt, StackArg, err, invalid, load_plan, out
from aisite.drivers.bmcs import BMC_PROTOCOLS
from aisite.errors import SiteError
from aisite.fields import secret_env
from aisite.firmware import REASON, read_site
from aisite.foreign import show
from aisite.loader import resolve_stack
from aisite.plan import Plan
from aisite.provision.run import boot_mac_proposals

if TYPE_CHECKING:
    from aisite.oob import Discovery
from aisite.secrets import resolve

oob_app = typer.Typer(no_args_is_help=True, help="The out-of-band network: the site's BMCs.")


def _boot_mac_proposals(p: Plan, found: Discovery) -> list[dict[str, Any]]:
    if p.provisioning is None:
        return []
    paths = {n.name: n.path for n in p.nodes}
    macs = {f.node: f.facts.macs for f in found.declared if f.node and f.facts}
    return boot_mac_proposals(p.provisioning.targets, paths, macs)


@oob_app.command("discover")
def oob_discover(
    stack: StackArg,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for each address to answer.")] = 1.0,
    via_gateway: Annotated[
        bool,
        typer.Option(
            "--via-gateway", help="Probe even though the range is reached through a gateway, not a local link."
        ),
    ] = False,
    probe_credentials: Annotated[
        str | None,
        typer.Option(
            "--probe-credentials",
            metavar="CIDR",
            help="Also try the site's BMC credentials on undeclared BMCs answering inside this range (part of "
            "the out-of-band network). Without it, credentials go only to each declared BMC's own address.",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Probe the plan's out-of-band range: which declared BMCs answer (with serials and MACs), which are
    missing, and which BMCs answer at addresses the site does not declare (new hardware); for nodes to install
    without a boot MAC, the MAC their BMC reports, as a stack change to commit. Credentials are sent only to a
    declared BMC's address (and to a range the operator names with --probe-credentials); what a BMC answers is
    shown as data (printable, bounded)."""
    from aisite import oob  # sushy and pyghmi load only for this command

    p = load_plan(stack, as_json)
    oob_net = ipaddress.IPv4Network(p.networks.oob)
    probe_net = None
    if probe_credentials is not None:
        try:
            probe_net = ipaddress.IPv4Network(probe_credentials, strict=False)
        except ValueError as exc:
            print(f"--probe-credentials: {exc}", file=sys.stderr)
            raise typer.Exit(2) from None
        if not probe_net.subnet_of(oob_net):
            print(f"--probe-credentials: {probe_net} is not inside site.networks.oob {oob_net}", file=sys.stderr)
            raise typer.Exit(2)
    values, problems = resolve(p)
    if problems:
        raise invalid(SiteError(str(resolve_stack(stack)), problems), as_json)
    route = oob.route_to(p.networks.oob)
    if not route or (route.get("gateway") and not via_gateway):
        # A range this machine does not sit on (a lab that is down, a site elsewhere) would be probed through the
        # default route: refuse unless asked.
        how = f"through gateway {route['gateway']} on {route.get('dev')}" if route else "not at all"
        print(
            f"site.networks.oob: {p.networks.oob} is reached {how}, not on a local link; bring the lab up, run "
            "from a machine on the out-of-band network, or pass --via-gateway",
            file=sys.stderr,
        )
        raise typer.Exit(EXIT_FAILED)
    declared = {n.bmc.address: (n.name, n.bmc.protocol, n.bmc.port) for n in p.nodes}
    creds = {n.bmc.address: n.bmc.credentials for n in p.nodes}
    default_creds = next(iter(creds.values()), "")
    tls = {n.bmc.address: n.bmc.tls_verify for n in p.nodes}
    # An undeclared BMC's certificate is verified unless the stack is a lab's (self-signed emulators) that turned
    # verification off for its own BMCs.
    default_tls = not (p.connection == "lab" and tls and not any(tls.values()))

    def target_for(address: str, protocol: str) -> oob.Target | None:
        # Credentials go to the address the site declares for that BMC; an undeclared one gets the site's
        # credentials (new hardware is usually set up alike) only inside the range the operator named.
        if not oob.may_send_credentials(address, declared, probe_net):
            return None
        name = creds.get(address, default_creds)
        port = declared[address][2] if address in declared else BMC_PROTOCOLS[protocol].port
        username = str(p.secrets.get(name, {}).get("username") or "")
        password = str(values.get(secret_env(name), ""))
        return oob.Target(protocol, address, port, username, password, tls.get(address, default_tls), timeout * 5)

    with err.status(f"probing {p.networks.oob} for BMCs"):
        found = oob.discover(p.networks.oob, declared, target_for, timeout=timeout)
    proposals = _boot_mac_proposals(p, found)
    if as_json:
        print(json.dumps(found.to_dict() | {"proposed": proposals}, indent=2))
        return
    table = Table(title=f"BMCs on {found.network}")
    for col in ("address", "node", "protocol", "state", "power", "serial", "MACs / error"):
        table.add_column(col)
    for what, rows, style in (
        ("declared", found.declared, "green"),
        ("missing", found.missing, "red"),
        ("undeclared", found.undeclared, "yellow"),
    ):
        for f in rows:
            facts = f.facts
            table.add_row(
                f.address,
                f.node or "-",
                f.protocol or "-",
                what,
                show(facts.power) if facts else "-",
                show(facts.serial or "-") if facts else "-",
                show(", ".join(facts.macs) if facts and facts.macs else (f.error or "-"), 300),
                style=style,
            )
    out.print(table)
    out.print(
        f"{len(found.declared)} declared BMC(s) answer, {len(found.missing)} missing, "
        f"{len(found.undeclared)} undeclared"
    )
    if proposals:
        out.print("Boot MACs for the nodes to install, read off their BMCs (a stack change to review and commit):")
        for prop in proposals:
            others = f"  # the BMC lists {', '.join(prop['nics'])}" if len(prop["nics"]) > 1 else ""
            out.print(f'  {prop["path"]}: "{prop["mac"]}"{others}', markup=False)


@oob_app.command("firmware")
def oob_firmware(stack: StackArg, as_json: JsonOpt = False) -> None:
    """Read the BIOS settings and BIOS release of every node whose group declares a firmware baseline, through
    its BMC (Redfish; an IPMI BMC has neither: said), and say how each differs. Nothing is changed: a rollout
    (`aisite maintenance start`) sets them. Exit 0 when every Redfish BMC was read and matches; 1 otherwise."""
    p = load_plan(stack, as_json)
    found = read_site(p)
    if as_json:
        print(json.dumps({"site": p.site} | found.to_dict(), indent=2))
    else:
        t = Table(title=f"{p.site}: firmware against the baseline")
        for col in ("node", "firmware"):
            t.add_column(col)
        for name, reasons in found.drift.items():
            shown = "\n".join(escape(r.removeprefix(f"{REASON}: ")) for r in reasons)
            t.add_row(name, shown or "[green]matches[/]")
        for name, why in found.unread.items():
            t.add_row(name, f"[red]not read[/]: {escape(why)}")
        for name, why in found.unsupported.items():
            t.add_row(name, f"[yellow]unsupported[/]: {escape(why)}")
        out.print(t)
        if not found.drift and not found.unread and not found.unsupported:
            out.print("no node of this site has a firmware baseline (a group's `firmware`)")
    if found.drifted or found.unread:
        raise typer.Exit(EXIT_FAILED)
