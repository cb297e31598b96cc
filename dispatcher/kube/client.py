"""One connection to one cluster: JSON requests and watch streams over kubernetes_asyncio.

kubernetes_asyncio does the parts worth reusing (kubeconfig parsing: tokens, client
certificates, exec plugins, TLS; the aiohttp session). Requests go through its ``call_api``
with ``_preload_content=False`` so this module sees every HTTP status itself and maps it to
``dispatcher.kube.errors``: the library's DynamicClient silently returns error bodies as
objects (see reference/test-control-plane.md §5.3), which a controller cannot afford.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.config.config_exception import ConfigException
from yarl import URL

from dispatcher import __version__
from dispatcher.kube import connections, wirejson
from dispatcher.kube.errors import KubeError, Unreachable, error_for_status
from dispatcher.kube.resources import Discovery

__all__ = ["JSON_MERGE_PATCH", "KubeClient", "KubeconfigError", "RequestObserver",
           "observe_requests"]

JSON_MERGE_PATCH = "application/merge-patch+json"
DEFAULT_TIMEOUT_S = 10.0


RequestObserver = Callable[["KubeClient", str, int, float], None]
"""Called after every request's response headers (or its failure) with the client, the verb
(``GET`` ... or ``WATCH``), the HTTP status (0: no answer) and the seconds it took."""

_observer: RequestObserver | None = None


def observe_requests(observer: RequestObserver | None) -> RequestObserver | None:
    """Process-wide: every client reports each request to ``observer`` (the controller's
    metrics, set by ``shell.app``; it must be cheap and never raise); returns the one it
    replaces. None: nothing is reported (a time.perf_counter() pair is all it costs)."""
    global _observer
    previous, _observer = _observer, observer
    return previous


_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class KubeconfigError(KubeError):
    """The kubeconfig cannot be used (malformed, missing context, unreadable credentials)."""


def _describe(exc: BaseException) -> str:
    """A short cause without request details (headers could carry credentials)."""
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"TLS verification failed: {exc.certificate_error}"
    if isinstance(exc, aiohttp.ClientSSLError):
        return "TLS error"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect: {exc.os_error.strerror or exc.os_error}"
    return type(exc).__name__


def _proxy_once(api: ApiClient, server: str) -> None:
    """Take the environment's proxy for ``server`` once, not on every request.

    kubernetes_asyncio opens its aiohttp session with ``trust_env=True``, and aiohttp then
    looks up ``~/.netrc`` and the proxy variables in worker threads for *every* request
    (about 0.8 ms of CPU per request against a local apiserver). The proxy is the same for
    every request of a client (one server, one process environment), so it is resolved here
    with aiohttp's own rule (``HTTPS_PROXY``/``HTTP_PROXY`` by the server's scheme, any case;
    ``NO_PROXY`` bypasses it; proxy credentials from the proxy URL or ``~/.netrc``) and the
    lookups are turned off. A kubeconfig's ``proxy-url`` still wins over the environment.
    netrc credentials for the apiserver itself are no longer added: a kubeconfig carries the
    credentials (kubectl reads no netrc either), and a netrc password must not reach an
    apiserver that authenticates by client certificate.
    """
    rest = api.rest_client
    if not rest.proxy:
        try:
            proxy, auth = get_env_proxy_for_url(URL(server))
        except LookupError:  # no proxy for this scheme, or NO_PROXY names the server
            pass
        else:
            rest.proxy = str(proxy)
            if auth is not None and not rest.proxy_headers:
                rest.proxy_headers = {"Proxy-Authorization": auth.encode()}
    rest.pool_manager._trust_env = False


class KubeClient:
    """An authenticated client for one cluster. Create with ``from_kubeconfig``; close it."""

    def __init__(self, api: ApiClient, *, name: str) -> None:
        self._api = api
        self._closed = False
        self.name = name
        self.server = str(api.configuration.host)
        self.discovery = Discovery(self)
        # the apiserver names a request's field manager (managedFields) and audit entries
        # after the user agent: "dispatcher", not kubernetes_asyncio's "OpenAPI-Generator"
        api.user_agent = f"dispatcher/{__version__}"
        self._connections = connections.track(api.rest_client.pool_manager)
        _proxy_once(api, self.server)

    @classmethod
    async def from_kubeconfig(cls, kubeconfig: Mapping[str, Any], *, name: str,
                              context: str | None = None) -> KubeClient:
        """Build a client from a parsed kubeconfig; KubeconfigError says what is wrong.

        Inline certificate data is written to files in one private per-process directory
        (kubernetes_asyncio caches those files by content, process-wide).
        """
        try:
            api = await kube_config.new_client_from_config_dict(
                config_dict=dict(kubeconfig), context=context, temp_file_path=_credential_dir())
        except (ConfigException, KeyError, TypeError, ValueError, OSError, AttributeError,
                AssertionError, IndexError) as exc:
            raise KubeconfigError(f"kubeconfig for {name} is not usable: "
                                  f"{_config_message(exc)}") from None
        return cls(api, name=name)

    async def close(self) -> None:
        """Close the HTTP session; return once every connection it opened is closed, also
        those released earlier and still in their TLS shutdown (``kube/connections.py``)."""
        self._closed = True
        await self._api.close()
        await connections.close_all(self._connections)

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, method: str, path: str, *, query: Sequence[tuple[str, str]],
                    body: Any, content_type: str, request_timeout: aiohttp.ClientTimeout
                    ) -> aiohttp.ClientResponse:
        """One HTTP request as kubernetes_asyncio's ``call_api(..., _preload_content=False)``
        sends it, without its generic model serialiser walking every header, parameter and
        body (``sanitize_for_serialization``: a third of a write's client CPU; the bodies
        here are plain JSON data already).

        Kept from ``call_api``: its default headers (the user agent), the cookie, the auth
        step (``update_params_for_auth``: the configuration's token refresh hook, exec and
        OIDC plugins, then the ``authorization`` header), the URL from the configuration's
        host, and what its REST client adds (proxy and proxy headers, TLS server name,
        the JSON body for the methods that carry one). ``date``/``datetime`` values are
        written in ISO 8601 as the serialiser did.
        """
        api = self._api
        headers = {"Content-Type": content_type, "Accept": "application/json",
                   **api.default_headers}
        if api.cookie:
            headers["Cookie"] = api.cookie
        params = list(query)
        await api.update_params_for_auth(headers, params, ["BearerToken"])
        url = self.server + path  # the configuration's host
        if params:
            url += "?" + urlencode(params)
        data: bytes | str | None = None
        if body is not None and method in _BODY_METHODS:
            data = body if isinstance(body, bytes) else wirejson.dumps(body)
        rest = api.rest_client
        extra: dict[str, Any] = {}
        if rest.proxy:
            extra["proxy"] = rest.proxy
        if rest.proxy_headers:
            extra["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            extra["server_hostname"] = rest.server_hostname
        session: aiohttp.ClientSession = rest.pool_manager
        return await session.request(method, url, headers=headers, data=data,
                                     timeout=request_timeout, **extra)

    async def _send(self, method: str, path: str, *, query: Sequence[tuple[str, str]] = (),
                    body: Any = None, content_type: str = "application/json",
                    request_timeout: aiohttp.ClientTimeout, verb: str = ""
                    ) -> aiohttp.ClientResponse:
        started, status = time.perf_counter(), 0  # 0: no answer; -1: cancelled, not reported
        try:
            resp = await self._call(method, path, query=query, body=body,
                                    content_type=content_type, request_timeout=request_timeout)
            status = resp.status
        except asyncio.CancelledError:
            status = -1
            raise
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise Unreachable(f"{self.name}: {method} {path}: {_describe(exc)}") from None
        except (RuntimeError, AssertionError) as exc:
            # Closed (member lost, credentials reloaded) while a caller still held this
            # client: aiohttp says RuntimeError("Session is closed"), or AssertionError when
            # the close lands in the middle of a request. The caller sees an outage.
            if not (self._closed or "Session is closed" in str(exc)):
                raise
            raise Unreachable(f"{self.name}: {method} {path}: client closed") from None
        except ValueError as exc:
            # aiohttp refuses header values with control characters: a credential from a
            # corrupt kubeconfig. Typed, so callers retry or report it; never echo the value.
            if "header" not in str(exc).lower() and "newline" not in str(exc).lower():
                raise
            raise KubeconfigError(f"{self.name}: {method} {path}: the request headers are "
                                  "invalid (a credential with control characters?)") from None
        finally:
            if _observer is not None and status >= 0:
                _observer(self, verb or method, status, time.perf_counter() - started)
        if resp.status >= 300:
            try:
                raw = await resp.read()
            except (TimeoutError, aiohttp.ClientError):
                raw = b""
            resp.release()
            message, reason = _status_message(raw)
            raise error_for_status(
                status=resp.status, reason=reason, detail=message,
                message=f"{self.name}: {method} {path}: HTTP {resp.status}: {message}")
        return resp

    async def request(self, method: str, path: str, *, query: Sequence[tuple[str, str]] = (),
                      body: Any = None, content_type: str = "application/json",
                      request_timeout: float = DEFAULT_TIMEOUT_S) -> Any:
        """One JSON request; returns the decoded body. Raises a KubeError subclass."""
        resp = await self._send(method, path, query=query, body=body,
                                content_type=content_type,
                                request_timeout=aiohttp.ClientTimeout(total=request_timeout))
        try:
            raw = await resp.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise Unreachable(f"{self.name}: {method} {path}: {_describe(exc)}") from None
        finally:
            resp.release()
        if not raw:
            return None
        try:
            return wirejson.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    async def stream(self, path: str, *, query: Sequence[tuple[str, str]],
                     read_timeout: float) -> AsyncIterator[dict[str, Any]]:
        """Yield the JSON lines of a watch response until the server ends it.

        ``read_timeout`` bounds the silence between lines, so a dead connection cannot
        hang a watch; ask the server for bookmarks to keep a quiet watch talking.
        """
        resp = await self._send("GET", path, query=query, verb="WATCH",
                                request_timeout=aiohttp.ClientTimeout(
            connect=DEFAULT_TIMEOUT_S, sock_connect=DEFAULT_TIMEOUT_S, sock_read=read_timeout))
        try:
            while True:
                try:
                    line = await resp.content.readline()
                except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                    raise Unreachable(f"{self.name}: watch {path}: {_describe(exc)}") from None
                except RuntimeError as exc:
                    # The connection closed under the read (aiohttp: "Connection closed."),
                    # e.g. the client closed while its watch streamed: an outage, as
                    # ``_send`` says it, never a crash of the watcher.
                    if not (self._closed or "closed" in str(exc).lower()):
                        raise
                    raise Unreachable(f"{self.name}: watch {path}: connection closed") from None
                if not line:
                    return
                if line.strip():
                    yield wirejson.loads(line)
        finally:
            resp.release()


_CREDENTIAL_DIR: tempfile.TemporaryDirectory[str] | None = None


def _credential_dir() -> str:
    """A 0700 directory for certificate files, removed when the process exits."""
    global _CREDENTIAL_DIR  # noqa: PLW0603 - one per process, like the library's cache
    if _CREDENTIAL_DIR is None:
        _CREDENTIAL_DIR = tempfile.TemporaryDirectory(prefix="dispatcher-kube-")
    return _CREDENTIAL_DIR.name


def _status_message(raw: bytes) -> tuple[str, str]:
    try:
        status = json.loads(raw)
        return str(status.get("message", "")), str(status.get("reason", ""))
    except (ValueError, AttributeError):
        return raw[:200].decode(errors="replace"), ""


def _config_message(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    # Never echo kubeconfig contents: keep the first line, capped.
    return text.splitlines()[0][:200]
