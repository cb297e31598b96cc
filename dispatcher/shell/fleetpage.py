"""The fleet view: a read-only HTML page served by the controller (``server.fleetView``).

``/fleet`` answers the question users ask most, "why is my workload still pending, and
where is there room?", in a browser: the members with their free GPUs per product and the
free blocks of single nodes, the queue in the order it is tried with each workload's
reason, and the recent decisions with every member's verdict. Server-rendered from the
controller's memory (``control.overview``) on each request: no JavaScript, no build step,
a little inline CSS, a meta refresh.

Read-only by construction: only GET (and HEAD) routes, nothing on the page submits, and the
data holds no credentials. Tenants write workload names, annotations and so the messages
quoting them, so every value goes through ``html.escape`` (``_t``), and the response
forbids scripts and every other active content outright (Content-Security-Policy
``default-src 'none'``), so a missed escape could not run anything either.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from dispatcher.control.controller import Controller
from dispatcher.control.observe import Handler
from dispatcher.control.overview import (
    DecisionRow,
    MemberRow,
    Overview,
    ProductRow,
    QueueRow,
    overview,
)
from dispatcher.output import age

__all__ = ["HEADERS", "PATH", "pages", "render"]

PATH = "/fleet"
REFRESH_S = 10
OPEN_DECISIONS = 5
CACHE_S = 1.0
"""A page is rendered at most once a second, however many ask (it is built on the loop)."""

HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                               "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
"""Every response of the page: no script, frame, form, image or fetch may run or load."""

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;
  color:#1d2330;background:#f5f6f8}
header{background:#1d2330;color:#fff;padding:14px 24px}
header h1{font-size:20px;margin:0}header h1 span{font-weight:400;color:#aab3c5}
header p{margin:4px 0 0;color:#cfd6e4}
main{padding:8px 24px 32px}
h2{font-size:16px;margin:22px 0 8px}
table{border-collapse:collapse;background:#fff;width:100%;
  box-shadow:0 1px 2px rgba(0,0,0,.08)}
th,td{text-align:left;vertical-align:top;padding:6px 10px;border-bottom:1px solid #e6e8ec}
th{font-weight:600;font-size:12px;color:#5b6475;background:#fafbfc}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.b{display:inline-block;padding:1px 7px;border-radius:9px;font-size:12px;font-weight:600}
.ok{background:#dcf5e3;color:#146c2e}.warn{background:#fdf0cf;color:#7a5600}
.bad{background:#fde0de;color:#a3231a}.mute{background:#eceef2;color:#4d5566}
.chip{display:inline-block;background:#eceef2;border-radius:4px;padding:0 5px;margin:1px;
  font-size:12px}
.p{margin:0 0 4px}.p b{font-weight:600}.blocks{color:#4d5566}
.msg{color:#4d5566;max-width:60em}.pad{margin:0;padding:0 10px 8px}
.empty{color:#6b7385;font-style:italic;padding:8px 0}
details{background:#fff;margin:0 0 6px;box-shadow:0 1px 2px rgba(0,0,0,.08)}
summary{padding:7px 10px;cursor:pointer}
details table{box-shadow:none}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace}
"""


def _t(value: Any) -> str:
    """Any value as escaped text (quotes too: safe in attributes)."""
    return html.escape("" if value is None else str(value), quote=True)



def _clock(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).strftime("%H:%M:%S")


def _badge(text: str, tone: str) -> str:
    return f'<span class="b {tone}">{_t(text)}</span>'


def _table(headers: Sequence[str], rows: Iterable[str]) -> str:
    head = "".join(f"<th>{_t(h)}</th>" for h in headers)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _product(product: ProductRow) -> str:
    blocks = ", ".join(
        f"{b.gpus} GPUs &times; {b.nodes} node{'s' if b.nodes != 1 else ''}"
        + (f" <span class=\"chip\">taint {_t(', '.join(b.taints))}</span>" if b.taints else "")
        for b in product.blocks) or "no node with a free GPU"
    return (f'<p class="p"><b>{_t(product.product or "(no product label)")}</b> '
            f'{product.free} / {product.allocatable} free on {product.nodes} '
            f'node{"s" if product.nodes != 1 else ""}<br>'
            f'<span class="blocks">free on one node: {blocks}</span></p>')


def _member(member: MemberRow) -> str:
    if not member.reachable:
        state = _badge("unreachable", "bad")
    elif not member.ready:
        state = _badge("not ready", "bad")
    else:
        state = _badge("ready", "ok")
    if member.cordoned:
        state += " " + _badge("cordoned", "warn")
    reason = f'<div class="msg">{_t(member.reason)}</div>' if member.reason else ""
    labels = "".join(f'<span class="chip">{_t(k)}={_t(v)}</span>'
                     for k, v in sorted(member.labels.items()))
    reserved = f"<br>{member.reserved} reserved" if member.reserved else ""
    products = "".join(_product(p) for p in member.products) or \
        '<span class="empty">no GPU nodes</span>'
    return (f"<tr><td><b>{_t(member.name)}</b></td><td>{state}{reason}</td>"
            f'<td class="n">{member.free} / {member.allocatable}{reserved}</td>'
            f"<td>{products}</td><td>{labels}</td></tr>")


_REASON_TONE = {"NoFeasibleMember": "warn", "Queued": "mute"}


def _queued(row: QueueRow, now: float) -> str:
    waited = None if row.since is None else max(now - row.since, 0.0)
    where = str(row.position) if row.position is not None else "parked"
    return (f'<tr><td class="n">{_t(where)}</td>'
            f"<td>{_t(row.namespace)}/<b>{_t(row.name)}</b><br>"
            f'<span class="chip">{_t(row.kind)}</span></td>'
            f'<td class="n">{_t("-" if row.gpus is None else row.gpus)}</td>'
            f"<td>{_badge(row.reason or 'NotDecided', _REASON_TONE.get(row.reason, 'bad'))}"
            f'</td><td class="n">{_t(age(waited))}</td>'
            f'<td class="msg">{_t(row.message)}</td></tr>')


def _decision(row: DecisionRow, *, opened: bool) -> str:
    """One decision: the workload and its outcome, then every member's verdict (a parked
    workload's decision has none: its summary says why no member was asked)."""
    head = (f"{_t(_clock(row.at))} {_t(row.namespace)}/<b>{_t(row.name)}</b> "
            f'<span class="chip">{_t(row.kind)}</span> ')
    if not row.verdicts:
        return (f"<details{' open' if opened else ''}><summary>{head}"
                f"{_badge('parked', 'bad')}</summary>"
                f'<p class="msg pad">{_t(row.summary)}</p></details>')
    outcome = (_badge(f"→ {row.chosen}", "ok") if row.chosen
               else _badge("no member now", "warn"))
    verdicts = _table(["member", "verdict", "free", "fits", "reason"], (
        f"<tr><td>{_t(v.member)}</td><td>{_badge(v.verdict, _VERDICT_TONE[v.verdict])}</td>"
        f'<td class="n">{v.free}</td><td class="n">{_t("-" if v.fits is None else v.fits)}'
        f'</td><td class="msg">{_t(v.reason)}</td></tr>' for v in row.verdicts))
    return (f"<details{' open' if opened else ''}><summary>{head}{outcome} "
            f'<span class="msg">{row.pods} pod(s), {row.gpus} GPU(s), policy '
            f"{_t(row.policy)}</span></summary>{verdicts}</details>")


_VERDICT_TONE = {"chosen": "ok", "fits": "mute", "no": "bad", "-": "mute"}


def render(view: Overview) -> str:
    """The whole page for ``view`` (every value escaped)."""
    free = sum(m.free for m in view.members)
    allocatable = sum(m.allocatable for m in view.members)
    shown = sum(1 for q in view.queue if q.position is not None)
    waiting = view.waiting if view.waiting is not None else shown
    parked = view.parked if view.parked is not None else len(view.queue) - shown
    hidden = waiting + parked - len(view.queue)
    members = _table(["member", "state", "GPUs free / allocatable",
                      "per product: free / allocatable, and free GPUs on single nodes",
                      "labels"], (_member(m) for m in view.members)) \
        if view.members else '<p class="empty">no members</p>'
    queue = _table(["#", "workload", "GPUs", "reason", "waiting", "why"],
                   (_queued(q, view.at) for q in view.queue)) \
        if view.queue else '<p class="empty">nothing waiting</p>'
    if hidden > 0:
        queue += f'<p class="msg">and {hidden} more not shown</p>'
    decisions = "".join(_decision(d, opened=i < OPEN_DECISIONS)
                        for i, d in enumerate(view.decisions)) \
        or '<p class="empty">no decisions since the controller started</p>'
    state = "" if view.ready else " &middot; " + _badge("not leading or not synced", "warn")
    stamp = datetime.fromtimestamp(view.at, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{REFRESH_S}">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>dispatcher fleet &middot; {_t(view.hub_id)}</title><style>{CSS}</style></head>
<body><header><h1>dispatcher fleet <span>hub {_t(view.hub_id)}</span></h1>
<p>{_t(stamp)} &middot; {len(view.members)} members &middot; {free} of {allocatable} GPUs
free &middot; {waiting} waiting, {parked} parked &middot; refreshes every {REFRESH_S}s{state}
</p></header><main>
<h2>Members</h2>{members}
<h2>Queue <span class="msg">(in the order it is tried; parked ones wait outside it until
the fleet or the workload changes)</span></h2>{queue}
<h2>Recent decisions <span class="msg">(the latest per workload, newest first)</span></h2>
{decisions}
</main></body></html>
"""


def pages(controller: Controller, *, clock: Callable[[], float] = time.time
          ) -> list[tuple[str, Handler]]:
    """The routes to serve (``observe.serve(pages=...)``): ``/fleet``, and ``/`` sending
    the browser there."""
    cached: list[tuple[float, str]] = []  # (when, page): one render per CACHE_S at most

    async def fleet(_: web.Request) -> web.StreamResponse:
        now = clock()
        if not cached or now - cached[0][0] >= CACHE_S or now < cached[0][0]:
            cached[:] = [(now, render(overview(controller, now=now)))]
        return web.Response(text=cached[0][1], content_type="text/html", charset="utf-8",
                            headers=HEADERS)

    async def root(_: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(PATH, headers=HEADERS)

    return [(PATH, fleet), ("/", root)]
