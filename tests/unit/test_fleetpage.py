"""The fleet view's page: everything shown, everything escaped, nothing but reads served.

Rendering is checked on plain rows (``control.overview``) carrying hostile strings in every
field a tenant or a member could influence: the parsed page holds only the page's own
tags, and each string comes back as text. The server is checked through ``observe.serve``
with the page's routes: GET and HEAD answer with the headers that forbid active content,
every other method is refused, ``/`` leads to the page, and without the page there is no
``/fleet``. Against a running controller in a real browser: tests/e2e/test_fleet_view.py.
"""

from __future__ import annotations

import html.parser
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from dispatcher.control.observe import Metrics, serve
from dispatcher.control.overview import (
    Block,
    DecisionRow,
    MemberRow,
    Overview,
    ProductRow,
    QueueRow,
    VerdictRow,
)
from dispatcher.devfleet.controlplane import free_port
from dispatcher.shell.fleetpage import HEADERS, render

EVIL = '<script>alert("x")</script><img src=x onerror=alert(1)>&amp;"\''
PAGE_TAGS = {"html", "head", "meta", "title", "style", "body", "header", "h1", "span", "p",
             "main", "h2", "table", "thead", "tr", "th", "tbody", "td", "b", "br", "div",
             "details", "summary"}


def hostile(tag: str) -> str:
    return f"{tag}{EVIL}"


def view() -> Overview:
    return Overview(
        at=1_700_000_000.0, hub_id=hostile("hub"), ready=False,
        members=(MemberRow(
            name=hostile("member"), ready=False, reason=hostile("reason"), reachable=True,
            cordoned=True, labels={hostile("lk"): hostile("lv")}, nodes=3, allocatable=24,
            reserved=2, free=10, products=(ProductRow(
                product=hostile("product"), nodes=3, allocatable=24, free=10,
                blocks=(Block(gpus=8, nodes=1, taints=(hostile("taint"),)),
                        Block(gpus=2, nodes=1)),),)),),
        queue=(QueueRow(position=1, namespace=hostile("ns"), name=hostile("name"),
                        kind=hostile("kind"), reason="NoFeasibleMember",
                        message=hostile("message"), gpus=16, priority=0,
                        since=1_699_999_900.0),
               QueueRow(position=None, namespace="team-b", name="big", kind="JobSet",
                        reason=hostile("parkreason"), message=hostile("parkmsg"),
                        gpus=None, priority=0, since=None)),
        decisions=(DecisionRow(
            at=1_699_999_990.0, namespace=hostile("dns"), name=hostile("dname"),
            kind="JobSet", chosen=hostile("chosen"), policy=hostile("policy"), pods=2,
            gpus=16, summary=hostile("summary"),
            verdicts=(VerdictRow(member=hostile("vm"), verdict="no", free=4, fits=0,
                                 reason=hostile("vreason")),)),
                   DecisionRow(at=1_699_999_980.0, namespace="team-b", name="big",
                               kind="JobSet", chosen=None, policy="most-free", pods=0,
                               gpus=0, summary=hostile("parkedsummary"), verdicts=())))


class Parsed(html.parser.HTMLParser):
    """The tags, attributes and text a browser's parser sees."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.attributes: set[str] = set()
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attributes |= {name for name, _ in attrs}

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parsed(page: str) -> Parsed:
    parser = Parsed()
    parser.feed(page)
    parser.close()
    return parser


def test_every_value_is_shown_as_text_never_as_markup() -> None:
    page = parsed(render(view()))
    assert page.tags <= PAGE_TAGS, page.tags - PAGE_TAGS  # no script, no img
    assert page.attributes <= {"lang", "charset", "http-equiv", "content", "name", "class",
                               "open", "style"}  # no onerror, no src
    text = "".join(page.text)
    for tag in ("hub", "member", "reason", "lk", "lv", "product", "taint", "ns", "name",
                "kind", "message", "parkreason", "parkmsg", "dns", "dname", "chosen",
                "policy", "vm", "vreason", "parkedsummary"):
        assert hostile(tag) in text, tag


def test_the_page_says_what_the_rows_say() -> None:
    text = " ".join(" ".join(parsed(render(view())).text).split())
    assert "10 / 24" in text and "2 reserved" in text
    assert "8 GPUs × 1 node" in text and "2 GPUs × 1 node" in text
    assert "cordoned" in text and "not ready" in text
    assert "NoFeasibleMember" in text and "parked" in text and "100s" in text
    assert "parked" in text and "→ " in text
    assert "1 waiting, 1 parked" in text


def test_a_long_queue_is_counted_whole_and_shown_in_part() -> None:
    """Issue 35: ``/fleet`` rendered every queued row on the event loop (800 KB for 300
    rows): an overview holds at most ``QUEUE_ROWS`` of them, the page counts them all."""
    base = view()
    long = replace(base, waiting=9_000, parked=1_000)
    text = " ".join(" ".join(parsed(render(long)).text).split())
    assert "9000 waiting, 1000 parked" in text
    assert f"and {10_000 - len(base.queue)} more not shown" in text
    assert "more not shown" not in " ".join(parsed(render(base)).text)


def test_empty_state_reads_as_such() -> None:
    empty = Overview(at=0.0, hub_id="hub", ready=True, members=(), queue=(), decisions=())
    text = " ".join(parsed(render(empty)).text)
    assert "no members" in text and "nothing waiting" in text and "no decisions" in text


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async def page(_: web.Request) -> web.StreamResponse:
        return web.Response(text=render(view()), content_type="text/html", headers=HEADERS)

    port = free_port()
    cleanup = await serve(metrics=Metrics.create(), address="127.0.0.1", port=port,
                          ready=lambda: True, pages=[("/fleet", page)])
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await cleanup()


async def _status(url: str, method: str, **kwargs: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.request(
            method, url, allow_redirects=False, **kwargs) as response:
        await response.read()
        return response.status, response.headers


async def test_the_page_is_served_read_only(server: str) -> None:
    status, headers = await _status(f"{server}/fleet", "GET")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert (await _status(f"{server}/fleet", "HEAD"))[0] == 200
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        assert (await _status(f"{server}/fleet", method, data=b"x"))[0] == 405, method
    assert (await _status(f"{server}/metrics", "GET"))[0] == 200  # same port as metrics


async def test_no_page_without_the_view() -> None:
    port = free_port()
    cleanup = await serve(metrics=Metrics.create(), address="127.0.0.1", port=port,
                          ready=lambda: True)
    try:
        assert (await _status(f"http://127.0.0.1:{port}/fleet", "GET"))[0] == 404
    finally:
        await cleanup()
