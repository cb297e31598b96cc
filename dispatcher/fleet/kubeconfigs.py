"""Member kubeconfigs: flattened for a Secret, read back from one, checked for TLS opt-outs.

``clusters add`` stores exactly one context per member, with every referenced file (CA,
client certificate and key, token file) inlined, so the controller needs nothing but the
Secret. The connection reads it back with ``from_secret``. Errors never quote kubeconfig
content: they name the member, the Secret and the missing piece only.

Two kinds of kubeconfig, two rules. One stored on the hub (a MemberCluster's Secret, or
what ``clusters add`` is about to store) is written by whoever may write that Secret, so it
is data only (``data_only_problem``): a file path would make the controller read its own
filesystem (its hub ServiceAccount token, its keys) and send the content to the Secret's
server; a credential plugin would make it run a command. One the operator wrote into the
controller's own configuration (a static member's file, the hub's) may reference files:
the operator controls both the file and the filesystem. For every member, whatever its
source, the server must be ``https://`` and verified (``transport_risk``) unless the
operator opts in with ``fleet.allowInsecureTLS``.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

__all__ = ["DEFAULT_KEY", "FILE_KEYS", "INSECURE", "PLAIN_HTTP", "SKIP_VERIFY",
           "KubeconfigProblem", "credential_plugin", "data_only_problem", "file_reference",
           "flatten", "from_secret", "read_file", "skips_tls_verify", "transport_risk"]

DEFAULT_KEY = "kubeconfig"

# kubeconfig fields that point at files, and the field that carries the same data inline.
_CLUSTER_FILES = {"certificate-authority": "certificate-authority-data"}
_USER_FILES = {"client-certificate": "client-certificate-data",
               "client-key": "client-key-data"}
FILE_KEYS: Mapping[str, Mapping[str, str]] = {
    "cluster": _CLUSTER_FILES, "user": {**_USER_FILES, "tokenFile": "token"}}
"""Every key that makes the client read a local file, per section (``clusters`` entries'
``cluster``, ``users`` entries' ``user``), with the key that carries the same data inline.
These four are all kubernetes_asyncio's loader reads through ``FileOrData`` (and all
client-go reads); exec and auth-provider plugins, which run commands or read other files,
are ``credential_plugin``'s. tests/unit/fleet/test_kubeconfig_rules.py checks the list
against the installed loader's source."""

SKIP_VERIFY = "InsecureSkipTLSVerify"
PLAIN_HTTP = "PlainHTTP"
INSECURE: Mapping[str, str] = {
    SKIP_VERIFY: "sets insecure-skip-tls-verify: the server's identity is not verified",
    PLAIN_HTTP: "has an http:// server: the server's identity is not verified and the "
                "credentials cross the network in clear text"}
"""What each insecure transport (``transport_risk``) means, to complete "the kubeconfig ..."."""


class KubeconfigProblem(ValueError):
    """The kubeconfig is missing or unusable; ``reason`` is a health reason name."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def _named(items: Any, name: str, what: str) -> Mapping[str, Any]:
    if not isinstance(items, list):
        items = ()  # absent or not a list: nothing of that name
    for item in items:
        if isinstance(item, Mapping) and item.get("name") == name:
            body = item.get(what)
            if isinstance(body, Mapping):
                return body
    raise KubeconfigProblem(f"kubeconfig has no {what} named {name!r}",
                            reason="KubeconfigInvalid")


def _context_parts(kubeconfig: Mapping[str, Any], context: str | None
                   ) -> tuple[str, Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]]:
    """(context name, context, cluster, user) of ``context`` or the current context."""
    name = context or kubeconfig.get("current-context")
    if not name or not isinstance(name, str):
        raise KubeconfigProblem("kubeconfig has no current-context; pass a context",
                                reason="KubeconfigInvalid")
    ctx = _named(kubeconfig.get("contexts"), name, "context")
    cluster = _named(kubeconfig.get("clusters"), str(ctx.get("cluster", "")), "cluster")
    user_name = ctx.get("user")
    user = _named(kubeconfig.get("users"), str(user_name), "user") if user_name else {}
    return name, ctx, cluster, user


def _inline(section: Mapping[str, Any], files: Mapping[str, str], base: Path
            ) -> dict[str, Any]:
    out = dict(section)
    for file_key, data_key in files.items():
        path = out.pop(file_key, None)
        if path and data_key not in out:
            full = (base / str(path)).expanduser()
            try:
                out[data_key] = base64.b64encode(full.read_bytes()).decode()
            except OSError as exc:
                raise KubeconfigProblem(f"cannot read {file_key} file {full}: {exc.strerror}",
                                        reason="KubeconfigInvalid") from None
    return out


def flatten(kubeconfig: Mapping[str, Any], *, context: str | None = None,
            base_dir: Path = Path()) -> dict[str, Any]:
    """A kubeconfig holding only ``context`` (default: current), files inlined.

    Relative file paths resolve against ``base_dir`` (the kubeconfig's folder), as kubectl
    does. The result names no file (the data-only rule holds by construction); exec plugins
    are kept as they are (``create_identity`` runs the admin's with this kubeconfig, and
    ``clusters add`` refuses to store one).
    """
    name, ctx, cluster, user = _context_parts(kubeconfig, context)
    cluster = _inline(cluster, _CLUSTER_FILES, base_dir)
    user = dict(_inline(user, _USER_FILES, base_dir))
    token_file = user.pop("tokenFile", None)
    if token_file and "token" not in user:
        full = (base_dir / str(token_file)).expanduser()
        try:
            user["token"] = full.read_text().strip()
        except OSError as exc:
            raise KubeconfigProblem(f"cannot read tokenFile {full}: {exc.strerror}",
                                    reason="KubeconfigInvalid") from None
    cluster_name = str(ctx.get("cluster"))
    user_name = str(ctx.get("user") or "user")
    context_body = {k: v for k, v in ctx.items() if k in ("cluster", "namespace")}
    context_body["user"] = user_name
    return {"apiVersion": "v1", "kind": "Config", "current-context": name,
            "clusters": [{"name": cluster_name, "cluster": cluster}],
            "users": [{"name": user_name, "user": user}],
            "contexts": [{"name": name, "context": context_body}]}


def _parse(text: str, what: str, *, not_mapping: str) -> dict[str, Any]:
    """``text`` as a kubeconfig mapping; errors name ``what`` and never quote the text."""
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError:
        # The parser's message quotes the offending line, which may hold a token.
        raise KubeconfigProblem(f"{what} is not valid YAML",
                                reason="KubeconfigInvalid") from None
    if not isinstance(parsed, dict):
        raise KubeconfigProblem(f"{what} {not_mapping}", reason="KubeconfigInvalid")
    return parsed


def from_secret(secret: Mapping[str, Any], *, key: str = DEFAULT_KEY) -> dict[str, Any]:
    """The kubeconfig stored under ``key`` of a v1.Secret dict (``data`` is base64)."""
    meta = secret.get("metadata") or {}
    where = f"Secret {meta.get('namespace')}/{meta.get('name')}"
    data = secret.get("data") or {}
    raw = data.get(key) if isinstance(data, Mapping) else None
    if raw is None:
        string_data = secret.get("stringData") or {}
        text = string_data.get(key) if isinstance(string_data, Mapping) else None
        if text is None:
            raise KubeconfigProblem(f"{where} has no key {key!r}", reason="SecretMissing")
    else:
        try:
            text = base64.b64decode(str(raw), validate=True).decode()
        except (binascii.Error, ValueError):  # not base64, not ASCII, not UTF-8
            raise KubeconfigProblem(f"{where} key {key!r} is not base64 text",
                                    reason="KubeconfigInvalid") from None
    kubeconfig = _parse(text, f"{where} key {key!r}", not_mapping="is not a kubeconfig mapping")
    problem = data_only_problem(kubeconfig)
    if problem:
        raise KubeconfigProblem(f"{where} key {key!r}: {problem}", reason="KubeconfigInvalid")
    return kubeconfig


def data_only_problem(kubeconfig: Mapping[str, Any]) -> str:
    """Why a kubeconfig stored on the hub may not be used: it names a file or a command
    (``file_reference``, ``credential_plugin``); '' when it is data only. Every entry is
    checked, not only the current context's: the context is chosen elsewhere (the
    MemberCluster's ``spec.context``), possibly by someone else."""
    return credential_plugin(kubeconfig) or file_reference(kubeconfig)


def _entries(kubeconfig: Mapping[str, Any], list_key: str, section: str
             ) -> list[tuple[Any, Mapping[str, Any]]]:
    """(name, body) of each well-formed entry of ``list_key`` (``clusters``, ``users``)."""
    items = kubeconfig.get(list_key)
    out = []
    for item in items if isinstance(items, list) else ():
        body = item.get(section) if isinstance(item, Mapping) else None
        if isinstance(body, Mapping):
            out.append((item.get("name"), body))
    return out


def _quoted(name: Any) -> str:
    """An entry's name for a message: repr'd (no control characters), at most 40 characters
    (the condition message is cut at 300, and what to fix comes after the name)."""
    return repr(str(name)[:40])


def file_reference(kubeconfig: Mapping[str, Any]) -> str:
    """The first key of ``kubeconfig`` that names a local file, as a message that says
    which and what to use instead; '' when there is none.

    A key counts when present at all, whatever its value: the loader tests presence, and a
    kubeconfig that is data only has no reason to carry one. The path itself is not quoted.
    """
    for list_key, section in (("clusters", "cluster"), ("users", "user")):
        for name, body in _entries(kubeconfig, list_key, section):
            for file_key, data_key in FILE_KEYS[section].items():
                if file_key in body:
                    return (f"{file_key} (in {section} {_quoted(name)}) is a path on the "
                            f"controller's own filesystem; a kubeconfig stored on the hub must "
                            f"be data only: put the content in {data_key} (dispatcher "
                            f"clusters add inlines files)")
    return ""


def credential_plugin(kubeconfig: Mapping[str, Any]) -> str:
    """Why a kubeconfig meant for the hub may not be used: a user with an ``exec`` or
    ``auth-provider`` credential plugin (the controller would run that command, chosen by
    whoever may write the Secret, on every reconnect); '' when there is none."""
    for name, user in _entries(kubeconfig, "users", "user"):
        for plugin in ("exec", "auth-provider"):
            if plugin in user:  # presence, as the loader tests it (``"exec" in user``)
                return (f"user {_quoted(name)} uses an {plugin} credential plugin; a "
                        f"kubeconfig stored on the hub must carry its credentials (a token "
                        f"or a client certificate), never a command to run")
    return ""


def skips_tls_verify(kubeconfig: Mapping[str, Any], *, context: str | None = None) -> bool:
    """Whether the chosen context's cluster has ``insecure-skip-tls-verify: true``."""
    try:
        _, _, cluster, _ = _context_parts(kubeconfig, context)
    except KubeconfigProblem:
        return False
    return bool(cluster.get("insecure-skip-tls-verify"))


def transport_risk(kubeconfig: Mapping[str, Any], *, context: str | None = None) -> str:
    """How the chosen context's server would be reached: '' over verified TLS,
    ``PLAIN_HTTP`` for an ``http://`` server, ``SKIP_VERIFY`` for
    ``insecure-skip-tls-verify``; the caller decides whether the risk is allowed.

    Raises KubeconfigProblem for a server that is neither: absent (the client would fall
    back to its default, ``http://localhost``), not a string, another scheme, an upper-case
    ``HTTPS://`` (the loader then ignores the kubeconfig's CA and client certificate), or no
    host. The server is not quoted: it may carry user information.
    """
    _, ctx, cluster, _ = _context_parts(kubeconfig, context)
    name = str(ctx.get("cluster", ""))
    server = cluster.get("server")
    if not isinstance(server, str) or not server.strip():
        raise KubeconfigProblem(f"cluster {_quoted(name)} has no server: set "
                                f"server: https://HOST", reason="KubeconfigInvalid")
    scheme, sep, rest = server.partition("://")
    if not sep or scheme not in ("https", "http") or not rest.split("/", 1)[0]:
        raise KubeconfigProblem(f"cluster {_quoted(name)} server is not an https:// URL "
                                f"(lower-case scheme and a host)", reason="KubeconfigInvalid")
    if scheme == "http":
        return PLAIN_HTTP
    return SKIP_VERIFY if cluster.get("insecure-skip-tls-verify") else ""


def _resolved(item: Any, section: str, base: Path) -> Any:
    body = item.get(section) if isinstance(item, Mapping) else None
    if not isinstance(body, Mapping):
        return item
    files = FILE_KEYS[section]
    return {**item, section: {
        k: os.path.join(base, v) if k in files and isinstance(v, str) and v
        and not os.path.isabs(v) else v for k, v in body.items()}}


def read_file(path: Path) -> tuple[dict[str, Any], str]:
    """A static member's kubeconfig file and its modification time (as the version)."""
    try:
        text = path.read_text()
        version = str(path.stat().st_mtime_ns)
    except OSError as exc:
        raise KubeconfigProblem(f"cannot read kubeconfig {path}: {exc.strerror}",
                                reason="KubeconfigInvalid") from None
    kubeconfig = _parse(text, f"kubeconfig {path}", not_mapping="is not a mapping")
    return _resolve_files(kubeconfig, path.parent), version


def _resolve_files(kubeconfig: dict[str, Any], base: Path) -> dict[str, Any]:
    """File references made absolute against ``base``, as kubectl resolves them.

    kubernetes_asyncio resolves the paths of a kubeconfig given as a dict against the
    process's working directory, so a static member's ``certificate-authority: ca.crt``
    would depend on where the controller was started. Entries are copied, never mutated.
    """
    for list_key, section in (("clusters", "cluster"), ("users", "user")):
        items = kubeconfig.get(list_key)
        if not isinstance(items, list):
            continue
        kubeconfig = {**kubeconfig, list_key: [_resolved(item, section, base) for item in items]}
    return kubeconfig
