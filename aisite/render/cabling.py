"""The cabling plan for the people who rack a site: every cable of the plan as CSV (what `aisite cabling` then
checks over LLDP), and a drawing of the fabric (switch tiers and the GPU nodes' rails) as SVG.

The rack column names a rack-scale tray's rack (NVL72: the plan's racks) and, where the site gives its racks'
power budget (site.facility), every GPU node's rack as the plan places them; it is empty for every other device
(switches, control plane, storage), which the model places in no rack rather than guess. A host's port is its
chassis label where the catalog knows it (a DGX H100's OSFP4P2), else its interface name."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from xml.sax.saxutils import escape, quoteattr

from aisite.plan import Plan

COLUMNS = ("rack", "device", "port", "interface", "far_device", "far_port", "kind", "speed_gbps")


def cables_csv(plan: Plan) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    racks = {t: r.name for r in plan.racks for t in r.trays} | {n: r.name for r in plan.power_racks for n in r.nodes}
    for c in plan.cables:
        rack = racks.get(c.a_device, "")
        w.writerow((rack, c.a_device, c.a_label or c.a_port, c.a_port, c.b_device, c.b_port, c.kind, c.speed_gbps))
    return buf.getvalue()


# Tiers from the top of the drawing down; GPU nodes at the bottom, each rail a line to its leaf.
_TIERS = ("super-spine", "spine", "leaf")
_BOX_W, _BOX_H, _GAP, _ROW = 84, 22, 8, 120
_COLOURS = {"fabric": "#4a6fa5", "rail": "#c0504d"}


def fabric_svg(plan: Plan) -> str:
    """Switch tiers and GPU nodes as rows of boxes, fabric links and rail cables as lines (a rail's colour is the
    rail's; management, storage and BMC cables are in the CSV)."""
    rows: list[list[str]] = [[s.name for s in plan.switches if s.role == t] for t in _TIERS]
    rows = [r for r in rows if r]
    if railed := [n.name for n in plan.nodes if n.rails]:
        rows.append(railed)
    rows = rows or [[plan.site]]  # nothing cabled to draw: the site's name alone
    width = max(len(r) for r in rows) * (_BOX_W + _GAP) + _GAP
    height = len(rows) * _ROW + _GAP
    at: dict[str, tuple[float, float]] = {}
    boxes: list[str] = []
    for y_index, row in enumerate(rows):
        step = (width - _GAP) / len(row)
        y = _GAP + y_index * _ROW
        for i, name in enumerate(row):
            x = _GAP / 2 + step * i + (step - _BOX_W) / 2
            at[name] = (x + _BOX_W / 2, y)
            boxes.append(
                f'<rect x="{x:.1f}" y="{y}" width="{_BOX_W}" height="{_BOX_H}" rx="3" fill="#f4f4f4" stroke="#333"/>'
                f'<text x="{x + _BOX_W / 2:.1f}" y="{y + 15}" text-anchor="middle">{escape(name)}</text>'
            )
    lines: list[str] = []
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for c in plan.cables:
        if c.kind not in _COLOURS or c.a_device not in at or c.b_device not in at:
            continue
        counts[(c.a_device, c.b_device)] += 1
        if counts[(c.a_device, c.b_device)] > 1:
            continue  # parallel links drawn once; the CSV lists each
        (ax, ay), (bx, by) = at[c.a_device], at[c.b_device]
        top, bottom = ((ax, ay), (bx, by + _BOX_H)) if ay > by else ((bx, by), (ax, ay + _BOX_H))
        title = f"{c.a_device} {c.a_label or c.a_port} - {c.b_device} {c.b_port} ({c.speed_gbps}G {c.kind})"
        lines.append(
            f'<line x1="{top[0]:.1f}" y1="{top[1]}" x2="{bottom[0]:.1f}" y2="{bottom[1]}" '
            f'stroke="{_COLOURS[c.kind]}" stroke-width="0.6"><title>{escape(title)}</title></line>'
        )
    title = f"{plan.site}: fabric and rails ({sum(counts.values())} cables)"
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height}" '
        f'font-family="sans-serif" font-size="9" viewBox="0 0 {width:.0f} {height}">'
        f"<title>{escape(title)}</title>"
        f"<desc>{escape('aisite plan: switch tiers top down, GPU nodes at the bottom')}</desc>"
        + "".join(lines)
        + "".join(boxes)
        + f"<text x={quoteattr(str(_GAP))} y={quoteattr(str(height - 2))}>{escape(title)}</text>"
        + "</svg>\n"
    )


def racks_svg(plan: Plan) -> str:
    """The racks the plan places GPU nodes in (site.facility): one column a rack, its nodes stacked from the
    bottom, and under it the most they draw against the rack's budget (red when over); "" without racks."""
    racks = plan.power_racks
    if not racks:
        return ""
    tallest = max(len(r.nodes) for r in racks)
    width = len(racks) * (_BOX_W + _GAP) + _GAP
    height = _GAP + tallest * (_BOX_H + 4) + 44
    parts: list[str] = []
    for i, r in enumerate(racks):
        x = _GAP + i * (_BOX_W + _GAP)
        bottom = _GAP + tallest * (_BOX_H + 4)
        over = r.max_w > r.budget_w
        parts.append(
            f'<rect x="{x - 3}" y="{_GAP - 3}" width="{_BOX_W + 6}" height="{bottom - _GAP + 3}" fill="none" '
            f'stroke="{"#c00" if over else "#999"}"><title>{escape(r.name)}</title></rect>'
        )
        for k, node in enumerate(r.nodes):
            y = bottom - (k + 1) * (_BOX_H + 4)
            parts.append(
                f'<rect x="{x}" y="{y}" width="{_BOX_W}" height="{_BOX_H}" rx="3" fill="#f4f4f4" stroke="#333"/>'
                f'<text x="{x + _BOX_W / 2}" y="{y + 15}" text-anchor="middle">{escape(node)}</text>'
            )
        label = f"{r.max_w / 1000:g} / {r.budget_w / 1000:g} kW"
        parts.append(
            f'<text x="{x + _BOX_W / 2}" y="{bottom + 14}" text-anchor="middle" font-weight="bold">{escape(r.name)}'
            f'</text><text x="{x + _BOX_W / 2}" y="{bottom + 27}" text-anchor="middle" '
            f'fill="{"#c00" if over else "#333"}">{escape(label)}</text>'
        )
    title = f"{plan.site}: {len(racks)} racks, {sum(r.max_w for r in racks) / 1000:g} kW at most (GPU nodes)"
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="9" viewBox="0 0 {width} {height}">'
        f"<title>{escape(title)}</title>"
        f"<desc>{escape('aisite plan: rack elevations, the GPU nodes each rack holds and their maximum power')}</desc>"
        + "".join(parts)
        + f"<text x={quoteattr(str(_GAP))} y={quoteattr(str(height - 2))}>{escape(title)}</text>"
        + "</svg>\n"
    )
