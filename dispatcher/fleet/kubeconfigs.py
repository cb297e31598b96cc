"""Member kubeconfigs: flattened for a Secret, read back from one, checked for TLS opt-outs.

``clusters add`` stores exactly one context per member, with every referenced file (CA,
client certificate and key, token file) inlined, so the controller needs nothing but the
Secret. The connection reads it back with ``from_secret``. Errors never quote kubeconfig
content: they name the member, the Secret and the missing piece only.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

__all__ = ["DEFAULT_KEY", "KubeconfigProblem", "credential_plugin", "flatten", "from_secret",
           "read_file", "skips_tls_verify"]

DEFAULT_KEY = "kubeconfig"

# kubeconfig fields that point at files, and the field that carries the same data inline.
_CLUSTER_FILES = {"certificate-authority": "certificate-authority-data"}
_USER_FILES = {"client-certificate": "client-certificate-data",
               "client-key": "client-key-data"}


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
    does. Exec plugins are kept as they are: the controller's image must provide them.
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
    plugin = credential_plugin(kubeconfig)
    if plugin:
        raise KubeconfigProblem(f"{where} key {key!r}: {plugin}", reason="KubeconfigInvalid")
    return kubeconfig


def credential_plugin(kubeconfig: Mapping[str, Any]) -> str:
    """Why a kubeconfig meant for the hub may not be used: a user with an ``exec`` or
    ``auth-provider`` credential plugin (the controller would run that command, chosen by
    whoever may write the Secret, on every reconnect); '' when there is none."""
    users = kubeconfig.get("users")
    for item in users if isinstance(users, list) else ():
        user = item.get("user") if isinstance(item, Mapping) else None
        if not isinstance(user, Mapping):
            continue
        for plugin in ("exec", "auth-provider"):
            if user.get(plugin):
                return (f"user {item.get('name')!r} uses an {plugin} credential plugin; a "
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


def read_file(path: Path) -> tuple[dict[str, Any], str]:
    """A static member's kubeconfig file and its modification time (as the version)."""
    try:
        text = path.read_text()
        version = str(path.stat().st_mtime_ns)
    except OSError as exc:
        raise KubeconfigProblem(f"cannot read kubeconfig {path}: {exc.strerror}",
                                reason="KubeconfigInvalid") from None
    return _parse(text, f"kubeconfig {path}", not_mapping="is not a mapping"), version
