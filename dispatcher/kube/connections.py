"""Every connection one client's aiohttp session opens, so closing the client ends them all.

aiohttp's ``ClientSession.close()`` ends (and waits for) only the connections its connector
still holds: the idle pool and the ones in use. A connection closed *before* that — a watch
response released in the middle of its body (a resync, a cancelled informer), a keep-alive
that expired, a reply with ``Connection: close`` — is closed with a graceful TLS shutdown
that nobody waits for: it needs a round trip with the apiserver and several loop
iterations. When the event loop ends right after the client is closed (``asyncio.run`` of
a CLI command, a test, a controller stopping), such a socket is still open when the loop
closes and is collected later as ``ResourceWarning: unclosed transport``. aiohttp's
per-request ``trust_env`` lookups used to hide this: they create the loop's default
executor, whose shutdown at the end of ``asyncio.run`` gave the pending TLS shutdowns the
iterations they needed.

``track`` makes the connector's protocol factory remember each connection (weakly: a lost
connection is dropped by the garbage collector), and ``close_all`` aborts the ones still
open and waits until each has really gone (its ``connection_lost`` ran, so its socket is
closed). Aborting is what aiohttp itself does to its pooled TLS connections on close.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from typing import Any, cast

import aiohttp
from aiohttp.client_proto import ResponseHandler

__all__ = ["TrackedConnections", "close_all", "track"]

TrackedConnections = weakref.WeakSet["_Handler"]

_LOST_WITHIN_S = 2.0
"""How long ``close_all`` waits for aborted connections to report their loss (one loop
iteration is enough; the bound only keeps a broken transport from hanging a close)."""


class _Handler(ResponseHandler):
    """aiohttp's connection protocol, keeping its transport past ``close()`` (which forgets
    it while the TLS shutdown is still under way) so that the shutdown can be aborted."""

    opened: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.opened = cast(asyncio.Transport, transport)


def _new_handler(connections: TrackedConnections, loop: asyncio.AbstractEventLoop
                 ) -> _Handler:
    handler = _Handler(loop)
    connections.add(handler)
    return handler


def track(session: aiohttp.ClientSession) -> TrackedConnections:
    """Remember every connection ``session``'s connector opens from now on.

    The connector builds each connection's protocol with its ``_factory`` (aiohttp 3.x,
    also for TLS through a proxy); without one, nothing is tracked (``close_all`` is then a
    no-op and the close test in tests/integration/test_kube_client_close.py fails).
    """
    connections: TrackedConnections = weakref.WeakSet()
    connector: Any = session.connector
    if connector is not None and hasattr(connector, "_factory"):
        loop = getattr(connector, "_loop", None) or asyncio.get_running_loop()
        connector._factory = functools.partial(_new_handler, connections, loop)
    return connections


def _retrieve(future: asyncio.Future[None]) -> None:
    """A loss with an error sets it on the future: read it, or asyncio logs it as lost."""
    if not future.cancelled():
        future.exception()


async def close_all(connections: TrackedConnections) -> None:
    """Abort every tracked connection still open; return once each one's socket is closed
    (or after ``_LOST_WITHIN_S``). Call it after the session is closed."""
    waiting: list[asyncio.Future[None]] = []
    for handler in list(connections):
        transport = handler.opened
        if transport is None:
            continue  # never connected (refused, TLS handshake failed): nothing to end
        lost = handler.closed  # None: connection_lost already ran, nobody was waiting
        if lost is None or lost.done():
            continue
        lost.add_done_callback(_retrieve)
        transport.abort()
        waiting.append(lost)
    if waiting:
        await asyncio.wait(waiting, timeout=_LOST_WITHIN_S)
