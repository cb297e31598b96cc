"""One hub resource listed and watched forever, for the fleet (MemberClusters, Secrets).

The reconnect loop is ``kube/retry.forever`` with the fleet's backoff: any error but
cancellation is retried, and none once the fleet is stopping (a cancellation that a
library turned into an error must not start another watch).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog

from dispatcher.fleet.connection import backoff
from dispatcher.fleet.settings import FleetSettings
from dispatcher.kube import retry, watch
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import ResourceRef

__all__ = ["Handler", "watch_hub"]

log = structlog.get_logger(__name__)

Handler = Callable[[watch.Listed | watch.Changed], Awaitable[None]]


async def watch_hub(hub: KubeClient, ref: ResourceRef, namespace: str | None, handle: Handler,
                    *, settings: FleetSettings, stopping: Callable[[], bool]) -> None:
    """List+watch ``ref`` on the hub forever, each item to ``handle``, reconnecting with
    backoff."""

    def report(exc: BaseException | None, delay: float) -> None:
        log.warning("hub.watch_failed", resource=ref.plural,
                    error=type(exc).__name__ if exc else "ended",
                    message=str(exc).splitlines()[0][:300] if exc else "",
                    retry_in=round(delay, 1))

    async def body() -> None:
        async for item in watch.informer(hub, ref, namespace=namespace,
                                         timeout_seconds=settings.watch_timeout_s):
            await handle(item)

    await retry.forever(body, wait=backoff(settings), on_failure=report, fresh_after=60.0,
                        retry_on=lambda exc: True, stopping=stopping)
