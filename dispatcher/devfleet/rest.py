"""A tiny synchronous REST client for setting up local control planes.

Set-up runs outside any event loop (CLI, pytest session fixtures), so it uses urllib rather
than the async client the controller uses. It never reads a proxy from the environment:
every control plane is on loopback.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ApiError", "Rest"]


class ApiError(RuntimeError):
    """An HTTP error from the apiserver, with its status code and the server's message."""

    def __init__(self, *, status: int, method: str, path: str, message: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {message}")
        self.status = status


@dataclass
class Rest:
    """Token-authenticated JSON calls to one apiserver, verifying TLS with ``ca_file``."""

    server: str
    token: str
    ca_file: Path
    _opener: urllib.request.OpenerDirector = field(init=False, repr=False)

    def __post_init__(self) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        self._opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))

    def request(self, method: str, path: str, body: Any = None, *,
                content_type: str = "application/json", timeout: float = 10.0) -> Any:
        """Send one request; returns the decoded JSON body, raises ApiError on HTTP errors."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.server + path, data=data, method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": content_type,
                     "Accept": "application/json"})
        try:
            with self._opener.open(req, timeout=timeout) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            with contextlib.suppress(ValueError, AttributeError):
                detail = json.loads(detail).get("message", detail)
            raise ApiError(status=exc.code, method=method, path=path, message=detail) from exc
        if not payload:
            return None
        try:
            return json.loads(payload)
        except ValueError:  # /readyz, /healthz answer plain text
            return payload.decode(errors="replace")

    def get(self, path: str) -> Any:
        """GET ``path``."""
        return self.request("GET", path)

    def ensure(self, path: str, body: dict[str, Any]) -> Any:
        """POST ``body`` to the collection ``path``; an existing object (409) is fine."""
        try:
            return self.request("POST", path, body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            return None

    def wait_ok(self, path: str, *, timeout: float) -> None:
        """Poll ``path`` until it answers 200; TimeoutError names the last failure."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            try:
                self.request("GET", path, timeout=5)
                return
            except (ApiError, OSError) as exc:
                last = str(exc)
            time.sleep(0.2)
        raise TimeoutError(f"{self.server}{path} not ready after {timeout:.0f}s: {last}")
