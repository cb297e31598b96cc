"""The shared hub's admission webhook as a running server: TLS, certificates, registration.

``review`` (``control/core/hubhold.py``) decides; this module is its I/O shell:

- **Certificates.** With ``webhook.certDir`` the serving pair is read from ``tls.crt`` and
  ``tls.key`` there (cert-manager, a mounted Secret) and re-read when the files change, and
  ``ca.crt`` beside them, if present, becomes the configuration's ``caBundle``. Without it
  the controller manages its own, like Kueue's internal cert management: a CA and a serving
  certificate for the Service's names (and ``webhook.hosts``) kept in the Secret
  ``webhook.secretName``, made on first start, renewed when less than 30 days are left.
- **Registration.** The MutatingWebhookConfiguration ``webhook.configurationName`` is made
  to match the live catalog (one rule per kind the hub serves), the client config (the
  Service, or ``webhook.url``) and the CA, at start and after every catalog change. The
  shipped RBAC allows get and patch on that one object only; create is for a hub where the
  controller has the right (the dev fleet).
- **Serving.** ``POST /mutate`` takes an AdmissionReview v1 and answers it.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import ssl
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from dispatcher.aiotasks import cancel_all, guarded
from dispatcher.control.core.hubhold import WEBHOOK_PATH, HoldScope, configuration, review
from dispatcher.control.settings import WebhookSettings
from dispatcher.kube import pki, wirejson
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.errors import Conflict, KubeError, NotFound
from dispatcher.kube.resources import SECRETS, ResourceRef
from dispatcher.workloads.catalog import Catalog

__all__ = ["HubWebhook"]

log = structlog.get_logger("dispatcher")

WEBHOOK_CONFIGURATIONS = ResourceRef(group="admissionregistration.k8s.io", version="v1",
                                     kind="MutatingWebhookConfiguration",
                                     plural="mutatingwebhookconfigurations", namespaced=False)
_RENEW_BEFORE = datetime.timedelta(days=30)
_MAX_BODY = 3 * 1024 * 1024  # the apiserver's request limit is 3 MiB
_OFF_LOOP_BYTES = 256 * 1024  # a review larger than this is parsed and judged in a thread


class HubWebhook:
    """One replica's webhook server (see the module docstring)."""

    def __init__(self, *, hub: KubeClient, settings: WebhookSettings, namespace: str,
                 catalog: Callable[[], Catalog], scope: HoldScope) -> None:
        self.hub = hub
        self.settings = settings
        self.namespace = namespace
        self.catalog = catalog
        self.scope = scope
        self.ca_pem: bytes | None = None
        self._context: ssl.SSLContext | None = None
        self._files: dict[Path, float] = {}
        self._dirty = asyncio.Event()
        self._draining = False

    # -- certificates ------------------------------------------------------------------

    def _names(self) -> tuple[str, ...]:
        service = f"{self.settings.service_name}.{self.namespace}"
        return (service, f"{service}.svc", f"{service}.svc.cluster.local",
                *self.settings.hosts)

    async def _self_managed(self) -> tuple[bytes, bytes]:
        """(cert, key) from the Secret, made or renewed as needed; sets ``ca_pem``."""
        ref = SECRETS.item(self.settings.secret_name, self.namespace)
        for _ in range(3):
            try:
                secret = await self.hub.request("GET", ref)
            except NotFound:
                secret = None
            data = {k: base64.b64decode(v) for k, v in ((secret or {}).get("data") or {}).items()}
            if self._usable(data):
                self.ca_pem = data["ca.crt"]
                return data["tls.crt"], data["tls.key"]
            ca = (pki.ca_from_pem(data["ca.crt"], data["ca.key"])
                  if "ca.crt" in data and "ca.key" in data
                  and pki.not_after(data["ca.crt"]) - _now() > 2 * _RENEW_BEFORE
                  else pki.new_ca("dispatcher-webhook-ca", days=3650))
            cert, key = ca.issue_serving(self._names()[1], dns_names=self._names(), days=365)
            fresh = {"ca.crt": ca.cert_pem, "ca.key": ca.key_pem, "tls.crt": cert,
                     "tls.key": key}
            body: dict[str, Any] = {
                "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": self.settings.secret_name, "namespace": self.namespace,
                             "labels": {"app.kubernetes.io/name": "dispatcher"}},
                "data": {k: base64.b64encode(v).decode() for k, v in fresh.items()}}
            try:
                if secret is None:
                    await self.hub.request("POST", SECRETS.collection(self.namespace),
                                           body=body)
                else:
                    body["metadata"]["resourceVersion"] = secret["metadata"]["resourceVersion"]
                    await self.hub.request("PUT", ref, body=body)
            except Conflict:
                continue  # another replica wrote it first: read theirs
            log.info("webhook.certificate", secret=self.settings.secret_name,
                     names=list(self._names()), renewed=secret is not None)
            self.ca_pem = ca.cert_pem
            return cert, key
        raise KubeError(f"webhook certificate Secret {self.settings.secret_name}: "
                        f"kept changing under us")

    def _usable(self, data: Mapping[str, bytes]) -> bool:
        if not {"ca.crt", "tls.crt", "tls.key"} <= set(data):
            return False
        try:
            fresh = pki.not_after(data["tls.crt"]) - _now() > _RENEW_BEFORE
            return fresh and set(self._names()) <= pki.subject_names(data["tls.crt"])
        except ValueError:
            return False

    def _load(self, context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "tls.crt").write_bytes(cert)
            (Path(tmp) / "tls.key").write_bytes(key)
            context.load_cert_chain(Path(tmp) / "tls.crt", Path(tmp) / "tls.key")

    async def _tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.settings.cert_dir is None:
            cert, key = await self._self_managed()
            self._load(context, cert, key)
            return context
        self._read_dir(context)
        return context

    def _read_dir(self, context: ssl.SSLContext) -> None:
        folder = Path(self.settings.cert_dir or ".")
        files = [folder / "tls.crt", folder / "tls.key", folder / "ca.crt"]
        self._files = {f: f.stat().st_mtime for f in files if f.exists()}
        context.load_cert_chain(folder / "tls.crt", folder / "tls.key")
        self.ca_pem = (folder / "ca.crt").read_bytes() if (folder / "ca.crt").exists() else None

    async def _follow_files(self) -> None:
        """Re-read ``certDir`` when its files change (cert-manager rotates them)."""
        while True:
            await asyncio.sleep(30)
            current = {f: f.stat().st_mtime for f in self._files if f.exists()}
            if current != self._files and self._context is not None:
                try:
                    self._read_dir(self._context)
                except (OSError, ssl.SSLError) as exc:
                    log.warning("webhook.certificate_unreadable", error=str(exc)[:300])
                    continue
                log.info("webhook.certificate_reloaded", dir=self.settings.cert_dir)
                self._dirty.set()

    # -- registration ------------------------------------------------------------------

    async def _resources(self) -> dict[tuple[str, str], list[str]]:
        out: dict[tuple[str, str], list[str]] = {}
        self.hub.discovery.forget()  # CRDs may have come or gone: each group read once
        for definition in self.catalog().definitions:
            gvk = definition.gvk
            try:
                ref = await self.hub.discovery.resource(gvk.api_version, gvk.kind)
            except KubeError:
                ref = None
            if ref is not None and ref.namespaced:
                out.setdefault((gvk.group, gvk.version), []).append(ref.plural)
        return out

    def _client_config(self) -> dict[str, Any]:
        config: dict[str, Any] = (
            {"url": self.settings.url.rstrip("/") + WEBHOOK_PATH} if self.settings.url
            else {"service": {"name": self.settings.service_name, "namespace": self.namespace,
                              "path": WEBHOOK_PATH, "port": 443}})
        if self.ca_pem:
            config["caBundle"] = base64.b64encode(self.ca_pem).decode()
        return config

    async def register(self) -> None:
        """Make the MutatingWebhookConfiguration match the catalog and certificates."""
        body = configuration(name=self.settings.configuration,
                             resources=await self._resources(),
                             client_config=self._client_config(),
                             skip=(self.namespace, "kube-system", "kube-public",
                                   "kube-node-lease"), scope=self.scope)
        item = WEBHOOK_CONFIGURATIONS.item(self.settings.configuration)
        try:
            await self.hub.request("PATCH", item, body={"webhooks": body["webhooks"]},
                                   content_type=JSON_MERGE_PATCH)
        except NotFound:
            await self.hub.request("POST", WEBHOOK_CONFIGURATIONS.collection(), body=body)
        log.info("webhook.registered", configuration=self.settings.configuration,
                 kinds=sum(len(r["resources"]) for r in body["webhooks"][0]["rules"]))

    def catalog_changed(self) -> None:
        """The live catalog changed: register its kinds (soon, off the caller's step)."""
        self._dirty.set()

    async def _follow_catalog(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                await self.register()
            except KubeError as exc:
                log.warning("webhook.register_failed", error=str(exc)[:500])
                await asyncio.sleep(5)
                self._dirty.set()

    # -- serving -----------------------------------------------------------------------

    def _answer(self, raw: bytes) -> tuple[Mapping[str, Any], dict[str, Any]]:
        """The review's request and ``review``'s response (ValueError, KeyError or
        TypeError: not an AdmissionReview)."""
        admission = wirejson.loads(raw)["request"]
        if not isinstance(admission, Mapping):
            raise TypeError("request is not an object")
        return admission, review(admission, catalog=self.catalog(), scope=self.scope)

    async def _mutate(self, request: web.Request) -> web.Response:
        raw = await request.read()
        # a large review is parsed and judged off the event loop: three clients posting
        # 3 MiB bodies held the loop 0.45 s each and slowed every tenant (issue 35)
        try:
            admission, response = await asyncio.to_thread(self._answer, raw) \
                if len(raw) > _OFF_LOOP_BYTES else self._answer(raw)
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": "not an AdmissionReview"}, status=400)
        if response.get("patch") or not response["allowed"]:
            log.info("webhook.held" if response["allowed"] else "webhook.refused",
                     operation=admission.get("operation"),
                     kind=(admission.get("kind") or {}).get("kind"),
                     namespace=admission.get("namespace"), name=admission.get("name"),
                     message=(response.get("status") or {}).get("message", ""))
        answer = web.json_response({"apiVersion": "admission.k8s.io/v1",
                                    "kind": "AdmissionReview", "response": response})
        if self._draining:
            answer.force_close()  # Connection: close, the next call opens a new one
        return answer

    def drain(self) -> None:
        """This replica is stopping: every answer from now on closes its connection, so
        the apiserver's next calls open new ones, which the Service sends elsewhere."""
        self._draining = True

    async def start(self) -> Callable[[], Awaitable[None]]:
        """Certificates, the HTTPS server, then registration; returns the async cleanup."""
        self._context = await self._tls()
        app = web.Application(client_max_size=_MAX_BODY)
        app.router.add_post(WEBHOOK_PATH, self._mutate)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, self.settings.address, self.settings.port,
                          ssl_context=self._context).start()
        await self.register()
        tasks = [guarded(self._follow_catalog(), name="webhook-register")]
        if self.settings.cert_dir is not None:
            tasks.append(guarded(self._follow_files(), name="webhook-certificates"))
        log.info("webhook.serving", address=self.settings.address, port=self.settings.port,
                 certificates=self.settings.cert_dir or f"secret/{self.settings.secret_name}")

        async def cleanup() -> None:
            await cancel_all(tasks)
            await runner.cleanup()

        return cleanup


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
