"""Errors at the Kubernetes boundary, one class per thing a caller reacts to differently.

::

    KubeError                    any failed call; .status is the HTTP code (0: no answer)
    ├── Unreachable              no answer: connection refused, TLS failure, timeout
    ├── Unauthorized             401: credentials rejected or expired
    ├── Forbidden                403: RBAC says no
    ├── NotFound                 404
    ├── Conflict                 409: already exists, or stale resourceVersion
    ├── Gone                     410: resourceVersion too old; re-list
    ├── Invalid                  422: the object failed validation
    └── ServerError              5xx and anything else

Messages carry the server's own message, never request headers or credentials.
"""

from __future__ import annotations

__all__ = [
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "KubeError",
    "NotFound",
    "ServerError",
    "Unauthorized",
    "Unreachable",
    "error_for_status",
]


class KubeError(Exception):
    """A Kubernetes API call failed."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "",
                 detail: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.detail = detail or message  # the server's own message, without our prefix

    @property
    def permanent(self) -> bool:
        """Retrying the same request cannot succeed: the server refused the request itself
        (400 bad request, 403 forbidden, 404 no such kind or namespace, 405/415 not
        supported, 413 too large, 422 invalid). 401 (credentials may be reloaded), 409
        (the caller checks ownership), 429, 5xx and no answer are worth retrying."""
        return self.status in _PERMANENT


class Unreachable(KubeError):
    """The apiserver did not answer (network, TLS, timeout)."""


class Unauthorized(KubeError):
    """401: the credentials were rejected."""


class Forbidden(KubeError):
    """403: the identity may not do this."""


class NotFound(KubeError):
    """404: no such object or resource."""


class Conflict(KubeError):
    """409: the object exists already, or the update raced another writer."""


class Gone(KubeError):
    """410: the resourceVersion is too old (compacted); list again."""


class Invalid(KubeError):
    """422: the object was rejected by validation."""


class ServerError(KubeError):
    """Any other HTTP error, typically 5xx."""


_BY_STATUS: dict[int, type[KubeError]] = {
    401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 410: Gone, 422: Invalid,
}


_PERMANENT = frozenset({400, 403, 404, 405, 406, 413, 415, 422})


def error_for_status(*, status: int, message: str, reason: str = "", detail: str = ""
                     ) -> KubeError:
    """The KubeError subclass for an HTTP status; ``detail`` is the server's message."""
    return _BY_STATUS.get(status, ServerError)(message, status=status, reason=reason,
                                               detail=detail)
