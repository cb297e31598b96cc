"""Health transitions and error classification.

Covers: connect -> sync -> Ready; a network failure keeps Reachable until
``unreachable_after`` from the *first* loss (kept across repeated failures); answered
failures (401/403/5xx) are reachable; kubeconfig/Secret problems leave Reachable unknown;
each KubeError maps to an actionable reason; messages never gain content beyond the error's.
Not covered: the I/O that produces these outcomes (integration tests).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.fleet import health
from dispatcher.fleet.health import Problem, Reason
from dispatcher.fleet.kubeconfigs import KubeconfigProblem
from dispatcher.kube import errors
from dispatcher.kube.client import KubeconfigError

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GRACE = timedelta(seconds=30)
REFUSED = Problem(Reason.CONNECTION_REFUSED, "cannot connect")


def ready_at(now: datetime) -> health.Health:
    h = health.connected(health.initial(), now=now, version="v1.35.4")
    return health.synced(h, now=now)


def test_initial_is_unknown_and_not_ready() -> None:
    h = health.initial()
    assert (h.reachable, h.ready, h.reason) == (None, False, Reason.CONNECTING)


def test_connect_then_sync_is_ready_and_stamps_last_seen() -> None:
    h = health.connected(health.initial(), now=T0, version="v1.35.4")
    assert (h.reachable, h.ready, h.reason) == (True, False, Reason.SYNCING)
    h = health.synced(h, now=T0 + timedelta(seconds=1))
    assert (h.reachable, h.ready, h.reason) == (True, True, Reason.CONNECTED)
    assert h.last_seen == T0 + timedelta(seconds=1)
    assert health.probed(h, now=T0 + timedelta(seconds=9)).last_seen == T0 + timedelta(seconds=9)


def test_network_loss_keeps_reachable_until_grace_from_first_loss() -> None:
    h = ready_at(T0)
    lost = health.failed(h, now=T0 + timedelta(seconds=5), problem=REFUSED,
                         unreachable_after=GRACE)
    assert (lost.reachable, lost.ready, lost.reason) == (True, False, Reason.CONNECTION_REFUSED)
    assert lost.first_loss == T0 + timedelta(seconds=5)
    assert lost.last_seen == T0
    again = health.failed(lost, now=T0 + timedelta(seconds=20), problem=REFUSED,
                          unreachable_after=GRACE)
    assert again.first_loss == T0 + timedelta(seconds=5)
    assert again.reachable is True
    assert health.unreachable_deadline(again, unreachable_after=GRACE) == \
        T0 + timedelta(seconds=35)
    assert health.expire(again, now=T0 + timedelta(seconds=34),
                         unreachable_after=GRACE).reachable is True
    gone = health.expire(again, now=T0 + timedelta(seconds=35), unreachable_after=GRACE)
    assert gone.reachable is False
    assert gone.first_loss == T0 + timedelta(seconds=5)
    assert health.unreachable_deadline(gone, unreachable_after=GRACE) is None
    late = health.failed(gone, now=T0 + timedelta(seconds=90), problem=REFUSED,
                         unreachable_after=GRACE)
    assert (late.reachable, late.first_loss) == (False, T0 + timedelta(seconds=5))


def test_recovery_clears_first_loss() -> None:
    lost = health.failed(ready_at(T0), now=T0, problem=REFUSED, unreachable_after=GRACE)
    back = health.connected(lost, now=T0 + timedelta(seconds=3), version="v1")
    assert back.first_loss is None
    assert back.reachable is True


def test_never_connected_network_failure_is_unreachable_at_once() -> None:
    h = health.failed(health.initial(), now=T0, problem=REFUSED, unreachable_after=GRACE)
    assert h.reachable is False


@pytest.mark.parametrize(("reason", "reachable"), [
    (Reason.AUTHENTICATION_FAILED, True),
    (Reason.FORBIDDEN, True),
    (Reason.SERVER_ERROR, True),
    (Reason.KUBECONFIG_INVALID, None),
    (Reason.SECRET_MISSING, None),
    (Reason.TLS_ERROR, False),
    (Reason.TIMEOUT, False),
])
def test_reachability_by_reason_for_a_new_member(reason: Reason, reachable: bool | None) -> None:
    h = health.failed(health.initial(), now=T0, problem=Problem(reason, "m"),
                      unreachable_after=GRACE)
    assert h.reachable is reachable
    assert h.ready is False
    assert h.reason == reason


@pytest.mark.parametrize(("exc", "reason"), [
    (errors.Unauthorized("401", status=401), Reason.AUTHENTICATION_FAILED),
    (errors.Forbidden("403", status=403), Reason.FORBIDDEN),
    (errors.Unreachable("m: GET /version: TLS verification failed: x"), Reason.TLS_ERROR),
    (errors.Unreachable("m: GET /version: TLS error"), Reason.TLS_ERROR),
    (errors.Unreachable("m: GET /version: timed out"), Reason.TIMEOUT),
    (errors.Unreachable("m: GET /version: cannot connect: Connection refused"),
     Reason.CONNECTION_REFUSED),
    (errors.Unreachable("m: watch /api/v1/pods: ServerDisconnectedError"),
     Reason.CONNECTION_REFUSED),
    (errors.ServerError("500", status=500), Reason.SERVER_ERROR),
    (errors.NotFound("404", status=404), Reason.SERVER_ERROR),
    (KubeconfigError("kubeconfig for m is not usable: x"), Reason.KUBECONFIG_INVALID),
    (KubeconfigProblem("no key", reason="SecretMissing"), Reason.SECRET_MISSING),
    (TimeoutError(), Reason.TIMEOUT),
    (KeyError("token-abc"), Reason.SERVER_ERROR),
])
def test_classify(exc: BaseException, reason: Reason) -> None:
    assert health.classify(exc).reason == reason


def test_unexpected_errors_do_not_leak_their_text() -> None:
    problem = health.classify(KeyError("sekret-token"))
    assert "sekret-token" not in problem.message


@given(st.lists(st.sampled_from(list(Reason)), max_size=8),
       st.lists(st.integers(min_value=0, max_value=120), max_size=8))
def test_first_loss_never_moves_while_failing(reasons: list[Reason], gaps: list[int]) -> None:
    h = ready_at(T0)
    now = T0
    first = None
    for reason, gap in zip(reasons, gaps, strict=False):
        now += timedelta(seconds=gap)
        h = health.failed(h, now=now, problem=Problem(reason, "m"), unreachable_after=GRACE)
        first = first or now
        assert h.first_loss == first
        assert h.ready is False
