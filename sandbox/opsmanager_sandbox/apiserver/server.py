"""HTTP transport of the sandbox API server (aiohttp): URL parsing, content negotiation, watch streams.

The semantics live in ``operations.py``; this module maps REST paths and verbs onto them and shapes the
responses like kube-apiserver: ``kind: Status`` errors, 201 on create, Table output on
``Accept: ...;as=Table``, watch streams of ``{"type": ..., "object": ...}`` lines with BOOKMARKs,
``timeoutSeconds`` and 410 Gone as an ERROR event, admission warnings as ``Warning: 299`` headers.

Every request is first authenticated (``authn.py``: the admin token, ServiceAccount tokens, else anonymous),
then authorized (``authorization="RBAC"``: ``rbac.py`` against the stored Roles and bindings; the default
``"AlwaysAllow"`` allows everyone), then dispatched; each answer is recorded in ``audit`` (``audit.py``).
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import json
import logging
import shutil
import ssl
import tempfile
import time
from collections.abc import Callable
from importlib import resources as package_files
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from opsmanager import pki
from opsmanager.kube import mergepatch
from opsmanager_sandbox.apiserver import (
    admission,
    audit,
    authn,
    controllers,
    discovery,
    errors,
    kubeconfig,
    operations,
    patching,
    protobuf,
    rbac,
    resources,
    selectors,
    store,
    tables,
)

logger = logging.getLogger(__name__)
Obj = dict[str, Any]

VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-opsmanager-sandbox", "gitCommit": "sandbox",
           "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23",
           "compiler": "gc", "platform": "linux/amd64"}
LogSource = Callable[[str, str, str], "str | Path | None"]
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
AUTHORIZATION_MODES = ("AlwaysAllow", "RBAC")
_ATTRS = web.RequestKey("attributes", rbac.Attributes)
_AUDITED = web.RequestKey("audited", bool)


class _StorePolicy:
    """The stored RBAC objects, as :class:`rbac.PolicySource`."""

    def __init__(self, objects: store.Store) -> None:
        self.store = objects

    def cluster_role(self, name: str) -> Obj | None:
        return self.store.get((rbac.GROUP, "clusterroles"), "", name)

    def role(self, namespace: str, name: str) -> Obj | None:
        return self.store.get((rbac.GROUP, "roles"), namespace, name)

    def cluster_role_bindings(self) -> list[Obj]:
        return self.store.list((rbac.GROUP, "clusterrolebindings"))

    def role_bindings(self, namespace: str) -> list[Obj]:
        return self.store.list((rbac.GROUP, "rolebindings"), namespace)


class _ClientGone(Exception):
    """The watching client closed its connection."""


def _json(body: Any, status: int = 200, warnings: list[str] | None = None,
          content_type: str = "application/json") -> web.Response:
    headers = [("Cache-Control", "no-cache, private")]
    for warning in warnings or []:
        headers.append(("Warning", f'299 - "{warning}"'))
    return web.Response(status=status, body=json.dumps(body).encode(), content_type=None,
                        headers=[("Content-Type", content_type), *headers])


def _table_requested(accept: str) -> bool:
    return any("as=Table" in part and "g=meta.k8s.io" in part for part in accept.split(","))


def _flag(value: str | None) -> bool:
    return value in ("true", "1", "True")


class APIServer:
    """An in-memory Kubernetes API server over real HTTP.

    ``history_size`` bounds the watch history (an older resourceVersion gets 410 Gone);
    ``bookmark_interval`` is how often a watch with ``allowWatchBookmarks`` gets a BOOKMARK;
    ``cert_manager`` installs the cert-manager.io CRDs (Issuer, ClusterIssuer, Certificate) at start;
    ``authorization`` is ``"AlwaysAllow"`` (every request allowed, whoever asks: the default, for tests and
    tools that talk to the bare URL) or ``"RBAC"`` (Roles and bindings enforced, as a real cluster; the admin
    kubeconfig's token is in ``system:masters`` and keeps full rights); ``tls`` serves HTTPS with a serving
    certificate of a CA made at start (``ca_pem``, ``ca_file``) — by default exactly when RBAC is enforced,
    because kubectl (client-go) sends no credentials to an ``http://`` server and in-cluster clients always
    speak ``https``.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, history_size: int = 10000,
                 bookmark_interval: float = 30.0, cert_manager: bool = True,
                 authorization: str = "AlwaysAllow", tls: bool | None = None) -> None:
        if authorization not in AUTHORIZATION_MODES:
            raise ValueError(f"APIServer(authorization={authorization!r}): choose one of "
                             f"{', '.join(AUTHORIZATION_MODES)}")
        self.authorization = authorization
        self.tls = authorization == "RBAC" if tls is None else tls
        self._tls_dir: Path | None = None
        self._ca_pem: bytes | None = None
        self.host = host
        self.port = port
        self.bookmark_interval = bookmark_interval
        self.registry = resources.Registry()
        self.store = store.Store(history_size=history_size)
        self.admission = admission.Admission(self.store)
        self.cluster = operations.Cluster(self.registry, self.store, self.admission)
        self.controllers = controllers.Controllers(self.cluster)
        self.requests: collections.deque[tuple[str, str, int]] = collections.deque(maxlen=20000)
        self.authn = authn.Authenticator(self.store)
        self.audit = audit.AuditLog()
        self._policy = _StorePolicy(self.store)
        self._cert_manager = cert_manager
        self._runner: web.AppRunner | None = None
        self._log_source: LogSource | None = None
        self._watch_tasks: set[asyncio.Task[Any]] = set()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def ca_pem(self) -> bytes | None:
        """The PEM of the CA that signed the serving certificate (None without TLS or before start)."""
        return self._ca_pem

    @property
    def ca_file(self) -> Path | None:
        """A file holding :attr:`ca_pem` while the server runs (None without TLS)."""
        return self._tls_dir / "ca.crt" if self._tls_dir is not None else None

    def _ssl_context(self) -> ssl.SSLContext:
        """A CA and a serving certificate for the loopback address and the in-cluster names of the API server."""
        ips, names = {"127.0.0.1"}, {"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                                      "kubernetes.default.svc.cluster.local"}
        try:
            ips.add(str(ipaddress.ip_address(self.host)))
        except ValueError:
            names.add(self.host)
        ca = pki.make_ca("opsmanager-sandbox-apiserver-ca")
        serving = pki.make_leaf(ca, "kube-apiserver", usages=("server",), ip_addresses=sorted(ips),
                                dns_names=sorted(names))
        self._tls_dir = Path(tempfile.mkdtemp(prefix="sandbox-apiserver-tls-"))
        (self._tls_dir / "ca.crt").write_bytes(ca.cert_pem)
        (self._tls_dir / "tls.crt").write_bytes(serving.cert_pem)
        key = self._tls_dir / "tls.key"
        key.touch(mode=0o600)
        key.write_bytes(serving.key_pem)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self._tls_dir / "tls.crt", key)
        self._ca_pem = ca.cert_pem
        return context

    @property
    def admin_token(self) -> str:
        """The bearer token of ``system:admin`` (``system:masters``), random per server; it is in the kubeconfig."""
        return self.authn.admin_token

    def issue_token(self, namespace: str, service_account: str, *, audiences: list[str] | None = None,
                    expiration_seconds: int = authn.DEFAULT_EXPIRATION,
                    bound: Obj | None = None) -> authn.Token:
        """A token of an existing ServiceAccount, as the TokenRequest API issues it (``bound``: a
        ``boundObjectRef`` such as ``{"kind": "Pod", "name": ..., "uid": ...}``); call it on the server's loop."""
        return self.authn.issue(namespace, service_account, audiences=audiences,
                                expiration_seconds=expiration_seconds, bound=bound)

    # -- lifecycle -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        ns_rt = self.registry.get("", "v1", "namespaces")
        assert ns_rt is not None
        for name in INITIAL_NAMESPACES:
            if self.store.get(("", "namespaces"), "", name) is None:
                await self.cluster.create(ns_rt, "", {"metadata": {"name": name}})
        self.controllers.default_service_accounts()
        await self.apply_objects([obj for obj in rbac.bootstrap_policy() if self.store.get(
            (rbac.GROUP, obj["kind"].lower() + "s"), "", obj["metadata"]["name"]) is None])
        if self._cert_manager:
            text = package_files.files("opsmanager_sandbox.apiserver").joinpath("certmanager-crds.yaml").read_text()
            await self.apply_objects(list(yaml.safe_load_all(text)))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port,
                           ssl_context=self._ssl_context() if self.tls else None)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]
        self.controllers.start()
        logger.info("sandbox API server listening on %s", self.url)

    async def stop(self) -> None:
        await self.controllers.stop()
        self.store.close_all()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.admission.close()
        if self._tls_dir is not None:
            shutil.rmtree(self._tls_dir, ignore_errors=True)
            self._tls_dir = None

    def register_service_address(self, namespace: str, service_name: str, service_port: int,
                                 target_host: str, target_port: int) -> None:
        """Where a webhook ``service`` clientConfig ``<service_name>.<namespace>:<service_port>`` listens."""
        self.admission.register_service(namespace, service_name, service_port, target_host, target_port)

    def set_log_source(self, source: LogSource | None) -> None:
        """Serve ``pods/<name>/log`` (``kubectl logs``) from files: ``source(namespace, pod, container)`` returns
        the path of that container's log (the kubelet's), or None when there is none."""
        self._log_source = source

    def write_kubeconfig(self, path: str | Path, namespace: str = "default") -> Path:
        return kubeconfig.write(path, self.url, namespace=namespace, token=self.admin_token, ca_pem=self.ca_pem)

    async def apply_objects(self, objects: list[Obj]) -> list[Obj]:
        """Create or replace objects (e.g. CRDs) in-process, like ``kubectl apply`` without the HTTP."""
        done = []
        for obj in objects:
            if not obj:
                continue
            rt = self.registry.by_kind(obj.get("apiVersion", ""), obj.get("kind", ""))
            if rt is None:
                raise errors.bad_request(f"no kind {obj.get('kind')!r} is registered for version "
                                         f"{obj.get('apiVersion')!r}")
            ns = (obj.get("metadata") or {}).get("namespace") or "default" if rt.namespaced else ""
            name = obj["metadata"]["name"]
            if self.store.get(rt.storage_key, ns, name) is None:
                created, _ = await self.cluster.create(rt, ns, obj)
                done.append(created)
            else:
                def replace(current: Obj, body: Obj = obj) -> Obj:
                    new = dict(body)
                    new["metadata"] = dict(body["metadata"], resourceVersion=current["metadata"]["resourceVersion"])
                    return new
                updated, _ = await self.cluster.update(rt, ns, name, replace)
                done.append(updated)
        return done

    # -- routing -------------------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            try:
                user = self.authn.authenticate(request.headers.get("Authorization"))
            except errors.StatusError:
                request[_ATTRS] = rbac.request_attributes(rbac.UserInfo(""), request.method, request.path,
                                                          request.query)
                raise
            attrs = request[_ATTRS] = rbac.request_attributes(user, request.method, request.path, request.query)
            self._authorize(attrs)
            token = admission.REQUEST_USER.set(user)
            try:
                response = await self._dispatch(request)
            finally:
                admission.REQUEST_USER.reset(token)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except errors.StatusError as e:
            response = _json(e.body(), e.code)
            for key, value in e.headers.items():
                response.headers[key] = value
        except Exception as e:  # a bug in the sandbox must still answer like a server
            logger.exception("sandbox API server failed on %s %s", request.method, request.path_qs)
            err = errors.internal(f"{type(e).__name__}: {e}")
            response = _json(err.body(), err.code)
        self.requests.append((request.method, request.path_qs, response.status))
        self._record(request, response.status)
        return response

    def _record(self, request: web.Request, code: int) -> None:
        """One audit record per request (a watch: when its stream opens)."""
        if request.get(_AUDITED) or _ATTRS not in request:
            return
        request[_AUDITED] = True
        self.audit.append(audit.AuditRecord.of(time.monotonic(), request[_ATTRS], code))

    def _decide(self, attrs: rbac.Attributes) -> rbac.Decision:
        if self.authorization == "AlwaysAllow":
            return rbac.Decision(True, "AlwaysAllow")
        return rbac.authorize(attrs, self._policy)

    def _authorize(self, attrs: rbac.Attributes) -> None:
        decision = self._decide(attrs)
        if decision.allowed:
            return
        details: Obj = {}
        if attrs.resource_request:
            details = {k: v for k, v in (("name", attrs.name), ("group", attrs.api_group),
                                         ("kind", attrs.resource)) if v}
        raise errors.StatusError(403, "Forbidden", rbac.forbidden_message(attrs, decision.reason), details)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        accept = request.headers.get("Accept", "")
        if path == "/version":
            return _json(VERSION)
        if path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok")
        if path == "/api":
            if discovery.AGGREGATED in accept:
                return _json(discovery.aggregated(self.registry, core=True), content_type=discovery.AGGREGATED)
            return _json(discovery.api_versions(f"{self.host}:{self.port}"))
        if path == "/apis":
            if discovery.AGGREGATED in accept:
                return _json(discovery.aggregated(self.registry, core=False), content_type=discovery.AGGREGATED)
            return _json(discovery.api_group_list(self.registry))
        if path == "/openapi/v3":
            return _json(discovery.openapi_v3_root(self.registry))
        if path.startswith("/openapi/v3/"):
            doc = discovery.openapi_v3_document(self.registry, path[len("/openapi/v3/"):])
            if doc is None:
                raise errors.no_resource(path)
            return _json(doc)
        parts = [p for p in path.split("/") if p]
        if not parts or parts[0] not in ("api", "apis"):
            raise errors.no_resource(path)
        if parts[0] == "api":
            group, rest = "", parts[1:]
        else:
            if len(parts) == 2:
                doc = discovery.api_group(self.registry, parts[1])
                if doc is None:
                    raise errors.no_resource(path)
                return _json(doc)
            group, rest = parts[1], parts[2:]
        version, rest = rest[0], rest[1:]
        if not rest:
            doc = discovery.resource_list(self.registry, group, version)
            if doc is None:
                raise errors.no_resource(path)
            return _json(doc)
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3 and not (
                group == "" and len(rest) == 3 and rest[2] in ("status", "finalize")):
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise errors.no_resource(path)
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        rt = self.registry.get(group, version, plural)
        if rt is None or (not rt.namespaced and namespace is not None) or \
                (rt.namespaced and namespace is None and name is not None) or \
                (sub is not None and sub not in rt.subresources):
            raise errors.no_resource(path)
        return await self._resource(request, rt, namespace, name, sub)

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            return None
        ctype = request.content_type
        if "protobuf" in ctype:  # kubectl create namespace/secret/configmap send protobuf
            try:
                return protobuf.decode(raw)
            except protobuf.Unsupported:
                raise errors.unsupported_media_type(ctype) from None
        try:
            if "yaml" in ctype:
                return yaml.safe_load(raw)
            return json.loads(raw)
        except (ValueError, yaml.YAMLError) as e:
            raise errors.bad_request(f"the body of the request could not be decoded: {e}") from e

    async def _resource(self, request: web.Request, rt: resources.ResourceType, namespace: str | None,
                        name: str | None, sub: str | None) -> web.StreamResponse:
        q = request.query
        method = request.method
        ns = namespace or ""
        dry_run = bool(q.getall("dryRun", []))
        validation = q.get("fieldValidation", "")
        table = _table_requested(request.headers.get("Accept", ""))
        include = q.get("includeObject", "Metadata")
        allowed = {None: ("GET", "PUT", "PATCH", "DELETE", "POST"), "status": ("GET", "PUT", "PATCH"),
                   "scale": ("GET", "PUT", "PATCH"), "finalize": ("PUT",), "log": ("GET",),
                   "eviction": ("POST",), "binding": ("POST",), "token": ("POST",), "resize": ("GET", "PUT", "PATCH")}
        if method not in allowed.get(sub, ()):
            raise errors.method_not_allowed()
        if rt.is_review:
            if method != "POST" or name is not None:
                raise errors.method_not_allowed()
            return _json(self._review(request[_ATTRS].user, rt, ns, await self._body(request)), 201)
        if method == "GET" and name is None:
            if _flag(q.get("watch")):
                return await self._watch(request, rt, namespace, table, include)
            return self._list(rt, namespace, q, table, include)
        if method == "GET":
            obj = self.cluster.get(rt, ns, name)  # type: ignore[arg-type]
            if sub == "log":
                return await self._log(request, obj)
            if sub == "scale":
                return _json(self.cluster.scale_of(rt, obj))
            if table and sub is None:
                return _json(tables.table(rt, [obj], include=include, resource_version=obj["metadata"].get(
                    "resourceVersion", "")))
            return _json(obj)
        if method == "POST" and name is None:
            obj, warnings = await self.cluster.create(rt, ns, await self._body(request), dry_run=dry_run,
                                                      validation=validation)
            return _json(obj, 201, warnings)
        if method == "POST" and sub == "eviction":
            return _json(await self.cluster.evict(ns, name, await self._body(request),  # type: ignore[arg-type]
                                                  dry_run=dry_run), 201)
        if method == "POST" and sub == "token":
            return _json(self.authn.token_request(ns, name, await self._body(request)), 201)  # type: ignore[arg-type]
        if method == "POST" and sub == "binding":
            return _json(self.cluster.bind(ns, name, await self._body(request)), 201)  # type: ignore[arg-type]
        if method == "PUT" and name is not None:
            return await self._put(request, rt, ns, name, sub, dry_run, validation)
        if method == "PATCH" and name is not None:
            return await self._patch(request, rt, ns, name, sub, dry_run, validation)
        if method == "DELETE" and name is not None and sub is None:
            body = await self._body(request)
            options = dict(body) if isinstance(body, dict) else {}
            for param in ("propagationPolicy", "gracePeriodSeconds", "orphanDependents"):
                if param in q:
                    value: Any = q[param]
                    if param == "gracePeriodSeconds":
                        value = int(value)
                    elif param == "orphanDependents":
                        value = _flag(value)
                    options[param] = value
            if dry_run:
                options["dryRun"] = ["All"]
            code, result = await self.cluster.delete(rt, ns, name, options)
            return _json(result, code)
        if method == "DELETE" and name is None:
            items, _, _, _ = self.cluster.list(rt, namespace, label_selector=q.get("labelSelector"),
                                               field_selector=q.get("fieldSelector"))
            for item in items:
                await self.cluster.delete(rt, item["metadata"].get("namespace") or "", item["metadata"]["name"], {})
            return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})
        raise errors.method_not_allowed()

    def _review(self, user: rbac.UserInfo, rt: resources.ResourceType, namespace: str, body: Any) -> Obj:
        """SelfSubjectAccessReview, SubjectAccessReview, LocalSubjectAccessReview, SelfSubjectReview: answered,
        never stored (``kubectl auth can-i``, ``kubectl auth whoami``)."""
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        answer: Obj = {"kind": rt.kind, "apiVersion": rt.api_version,
                       "metadata": dict(body.get("metadata") or {}, creationTimestamp=None)}
        if rt.kind == "SelfSubjectReview":
            info: Obj = {"username": user.name, "groups": list(user.groups)}
            if user.uid:
                info["uid"] = user.uid
            return dict(answer, status={"userInfo": info})
        spec = dict(body.get("spec") or {})
        if rt.kind == "SelfSubjectRulesReview":
            return dict(answer, spec=spec, status=self._rules_review(user, spec.get("namespace") or ""))
        if rt.kind != "SelfSubjectAccessReview":
            if not spec.get("user") and not spec.get("groups"):
                raise errors.invalid(rt.group, rt.kind, "", [{
                    "reason": "FieldValueRequired", "field": "spec.user",
                    "message": "Invalid value: \"\": at least one of user or group must be specified"}])
            user = rbac.UserInfo(spec.get("user") or "", tuple(spec.get("groups") or ()), spec.get("uid") or "")
        resource: Obj = spec.get("resourceAttributes") or {}
        path: Obj = spec.get("nonResourceAttributes") or {}
        if bool(resource) == bool(path):
            raise errors.invalid(rt.group, rt.kind, "", [{
                "reason": "FieldValueRequired", "field": "spec.resourceAttributes",
                "message": "Required value: exactly one of nonResourceAttributes or resourceAttributes must be "
                           "specified"}])
        if resource:
            if rt.namespaced and resource.get("namespace", namespace) != namespace:
                raise errors.invalid(rt.group, rt.kind, "", [{
                    "reason": "FieldValueInvalid", "field": "spec.resourceAttributes.namespace",
                    "message": f"Invalid value: {resource.get('namespace')!r}: must match metadata.namespace"}])
            attrs = rbac.Attributes(user, resource.get("verb") or "", True,
                                    namespace=namespace if rt.namespaced else resource.get("namespace") or "",
                                    api_group=resource.get("group") or "", api_version=resource.get("version") or "",
                                    resource=resource.get("resource") or "",
                                    subresource=resource.get("subresource") or "", name=resource.get("name") or "")
        else:
            attrs = rbac.Attributes(user, path.get("verb") or "", False, path=path.get("path") or "")
        decision = self._decide(attrs)
        status: Obj = {"allowed": decision.allowed}
        if decision.reason:
            status["reason"] = decision.reason
        return dict(answer, spec=spec, status=status)

    def _rules_review(self, user: rbac.UserInfo, namespace: str) -> Obj:
        if self.authorization == "AlwaysAllow" or rbac.MASTERS in user.groups:
            rules = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, {"nonResourceURLs": ["*"],
                                                                                "verbs": ["*"]}]
        else:
            rules = rbac.rules_for(user, namespace, self._policy)
        resource_rules = [{k: r[k] for k in ("verbs", "apiGroups", "resources", "resourceNames") if r.get(k)}
                          for r in rules if not r.get("nonResourceURLs")]
        path_rules = [{"verbs": r.get("verbs") or [], "nonResourceURLs": r["nonResourceURLs"]}
                      for r in rules if r.get("nonResourceURLs")]
        return {"resourceRules": resource_rules, "nonResourceRules": path_rules, "incomplete": False}

    def _list(self, rt: resources.ResourceType, namespace: str | None, q: Any, table: bool,
              include: str) -> web.Response:
        limit = int(q["limit"]) if q.get("limit") else None
        items, rv, token, remaining = self.cluster.list(
            rt, namespace, label_selector=q.get("labelSelector"), field_selector=q.get("fieldSelector"),
            limit=limit, continue_token=q.get("continue"))
        if table:
            return _json(tables.table(rt, items, include=include, resource_version=rv, continue_token=token))
        meta: Obj = {"resourceVersion": rv}
        if token:
            meta["continue"] = token
            meta["remainingItemCount"] = remaining
        return _json({"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta, "items": items})

    async def _put(self, request: web.Request, rt: resources.ResourceType, ns: str, name: str, sub: str | None,
                   dry_run: bool, validation: str) -> web.Response:
        body = await self._body(request)
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        if sub == "scale":
            obj, warnings = await self.cluster.update(
                rt, ns, name, self.cluster.scale_mutator(rt, lambda scale: body), subresource="scale",
                dry_run=dry_run)
            return _json(self.cluster.scale_of(rt, obj), 200, warnings)
        if sub == "finalize":
            def finalize(current: Obj) -> Obj:
                current["spec"] = body.get("spec") or {}
                current["metadata"]["resourceVersion"] = (body.get("metadata") or {}).get(
                    "resourceVersion") or current["metadata"]["resourceVersion"]
                return current
            obj, warnings = await self.cluster.update(rt, ns, name, finalize, dry_run=dry_run)
            return _json(obj, 200, warnings)
        obj, warnings = await self.cluster.update(rt, ns, name, lambda current: body, subresource=sub,
                                                  dry_run=dry_run, validation=validation, require_rv=sub is None)
        return _json(obj, 200, warnings)

    async def _patch(self, request: web.Request, rt: resources.ResourceType, ns: str, name: str,
                     sub: str | None, dry_run: bool, validation: str) -> web.Response:
        ctype = request.content_type
        raw = await request.read()
        try:
            patch = yaml.safe_load(raw) if "yaml" in ctype else json.loads(raw or b"null")
        except (ValueError, yaml.YAMLError) as e:
            raise errors.bad_request(f"the body of the request could not be decoded: {e}") from e
        if ctype == "application/json-patch+json":
            def apply(current: Obj) -> Obj:
                return patching.json_patch(current, patch)
        elif ctype == "application/merge-patch+json":
            def apply(current: Obj) -> Obj:
                return mergepatch.apply(current, patch)  # type: ignore[no-any-return]
        elif ctype == "application/strategic-merge-patch+json":
            if rt.custom:
                raise errors.unsupported_media_type(ctype)

            def apply(current: Obj) -> Obj:
                return patching.strategic_merge_patch(current, patch, rt.kind)
        elif ctype == "application/apply-patch+yaml":
            if self.store.get(rt.storage_key, ns if rt.namespaced else "", name) is None:
                if not isinstance(patch, dict):
                    raise errors.bad_request("the applied configuration must be an object")
                patch.setdefault("metadata", {})["name"] = name
                obj, warnings = await self.cluster.create(rt, ns, patch, dry_run=dry_run, validation=validation)
                return _json(obj, 201, warnings)

            def apply(current: Obj) -> Obj:
                if rt.custom:
                    return mergepatch.apply(current, patch)  # type: ignore[no-any-return]
                return patching.strategic_merge_patch(current, patch, rt.kind)
        else:
            raise errors.unsupported_media_type(ctype)
        # The precondition is what the client wrote in the patch, not the resourceVersion a merge carries through
        # (a JSON patch states its own with a "test" op, checked again when the patch is re-applied).
        precondition: Any = None
        if ctype == "application/json-patch+json":
            if isinstance(patch, list) and any(isinstance(op, dict) and op.get("op") in ("add", "replace")
                                               and op.get("path") == "/metadata/resourceVersion" for op in patch):
                precondition = operations.FROM_OBJECT  # it sets the resourceVersion: that is its precondition
        elif isinstance(patch, dict):
            meta = patch.get("metadata")
            precondition = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if sub == "scale":
            obj, warnings = await self.cluster.update(
                rt, ns, name, self.cluster.scale_mutator(rt, apply), subresource="scale", dry_run=dry_run,
                precondition=precondition)
            return _json(self.cluster.scale_of(rt, obj), 200, warnings)
        obj, warnings = await self.cluster.update(rt, ns, name, apply, subresource=sub, dry_run=dry_run,
                                                  validation=validation, precondition=precondition)
        return _json(obj, 200, warnings)

    async def _log(self, request: web.Request, pod: Obj) -> web.StreamResponse:
        q = request.query
        meta, spec = pod["metadata"], pod.get("spec") or {}
        names = [c["name"] for c in spec.get("containers") or []]
        container = q.get("container") or (names[0] if len(names) == 1 else None)
        if container is None:
            raise errors.bad_request(f"a container name must be specified for pod {meta['name']}, choose one of: "
                                     f"[{' '.join(names)}]")
        if container not in names + [c["name"] for c in spec.get("initContainers") or []]:
            raise errors.bad_request(f"container {container} is not valid for pod {meta['name']}")
        path = self._log_source(meta.get("namespace", ""), meta["name"], container) if self._log_source else None
        if path is None or not Path(path).exists():
            raise errors.bad_request(f'container "{container}" in pod "{meta["name"]}" is waiting to start: '
                                     f"no logs yet")
        data = Path(path).read_bytes()
        if q.get("tailLines"):
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-int(q["tailLines"]):]) if int(q["tailLines"]) > 0 else b""
        if not _flag(q.get("follow")):
            return web.Response(body=data, content_type="text/plain")
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        offset = Path(path).stat().st_size
        try:
            await response.write(data)
            while self._runner is not None:
                await asyncio.sleep(0.2)
                size = Path(path).stat().st_size if Path(path).exists() else 0
                if size > offset:
                    with open(path, "rb") as f:
                        f.seek(offset)
                        await response.write(f.read(size - offset))
                    offset = size
                elif self.store.get(("", "pods"), meta.get("namespace", ""), meta["name"]) is None:
                    break
        except ConnectionResetError:
            pass
        return response

    # -- watching ------------------------------------------------------------------------------------------

    async def _watch(self, request: web.Request, rt: resources.ResourceType, namespace: str | None,
                     table: bool, include: str) -> web.StreamResponse:
        q = request.query
        match_labels = selectors.parse_label_selector(q.get("labelSelector"))
        match_fields = selectors.parse_field_selector(q.get("fieldSelector"))
        timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else 1800.0
        bookmarks = _flag(q.get("allowWatchBookmarks"))
        send_initial = _flag(q.get("sendInitialEvents"))
        rv = q.get("resourceVersion", "")
        scope = namespace if rt.namespaced else None
        key = rt.storage_key

        has_fields = bool((q.get("fieldSelector") or "").strip())

        def selected(obj: Obj) -> tuple[bool, Obj | None]:
            """Does the watch select ``obj``? Labels are read on the stored object; the served copy is made only
            when a field selector needs it (it reads the served form), and returned for reuse."""
            if not match_labels(obj["metadata"].get("labels") or {}):
                return False, None
            if not has_fields:
                return True, None
            view = operations.external(rt, obj)
            return match_fields(view), view

        def served(obj: Obj, view: Obj | None) -> Obj:
            return view if view is not None else operations.external(rt, obj)

        def translate(change: store.Change) -> tuple[str, Obj] | None:
            new_ok, view = selected(change.obj)
            kind: str | None
            if change.type == "ADDED":
                kind = "ADDED" if new_ok else None
            else:
                old_ok = selected(change.old)[0] if change.old is not None else False
                if change.type == "DELETED":
                    kind = "DELETED" if (old_ok or new_ok) else None
                elif new_ok:
                    kind = "MODIFIED" if old_ok else "ADDED"
                else:
                    kind = "DELETED" if old_ok else None
            return (kind, served(change.obj, view)) if kind is not None else None

        sub = self.store.subscribe(key, scope)
        try:
            first: list[tuple[str, Obj]] = []
            expired: str | None = None
            if send_initial or rv in ("", "0"):
                for obj in self.store.list(key, scope):
                    ok, view = selected(obj)
                    if ok:
                        first.append(("ADDED", served(obj, view)))
            else:
                try:
                    since = int(rv)
                except ValueError:
                    raise errors.bad_request(f"invalid resource version {rv!r}") from None
                try:
                    for change in self.store.since(key, scope, since):
                        event = translate(change)
                        if event:
                            first.append(event)
                except store.TooOld as e:
                    expired = str(e)
            response = web.StreamResponse(status=200, headers={"Content-Type": "application/json",
                                                               "Cache-Control": "no-cache, private"})
            response.enable_chunked_encoding()
            await response.prepare(request)
            self._record(request, 200)
            headers_sent = False

            async def send(kind: str, obj: Obj) -> None:
                nonlocal headers_sent
                if table and kind not in ("ERROR", "BOOKMARK"):
                    obj = tables.table(rt, [obj], include=include, resource_version=obj["metadata"].get(
                        "resourceVersion", ""), headers=not headers_sent)
                    headers_sent = True
                try:
                    await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
                except ConnectionResetError as e:  # the client went away: end this watch quietly
                    raise _ClientGone from e

            def bookmark(initial_end: bool = False) -> Obj:
                meta: Obj = {"resourceVersion": str(self.store.rv)}
                if initial_end:
                    meta["annotations"] = {"k8s.io/initial-events-end": "true"}
                return {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}

            if expired is not None:
                gone = errors.gone(expired).body()
                await send("ERROR", gone)
                return response
            for kind, obj in first:
                await send(kind, obj)
            if send_initial and bookmarks:
                await send("BOOKMARK", bookmark(initial_end=True))
            deadline = time.monotonic() + timeout
            next_bookmark = time.monotonic() + self.bookmark_interval
            while True:
                now = time.monotonic()
                if now >= deadline:
                    break
                # Queued changes first: with a bookmark due and changes queued, waiting on the queue with a zero
                # timeout never runs the getter (asyncio cancels it before it starts) and the watch would stall.
                try:
                    item: store.Change | None = sub.queue.get_nowait()
                except asyncio.QueueEmpty:
                    if bookmarks and now >= next_bookmark:
                        await send("BOOKMARK", bookmark())
                        next_bookmark = time.monotonic() + self.bookmark_interval
                        continue
                    wait = deadline - now
                    if bookmarks:
                        wait = min(wait, next_bookmark - now)
                    try:
                        item = await asyncio.wait_for(sub.queue.get(), timeout=wait)
                    except TimeoutError:
                        continue
                if item is None:
                    break
                event = translate(item)
                if event:
                    await send(*event)
            return response
        except _ClientGone:
            return response
        finally:
            sub.close()
