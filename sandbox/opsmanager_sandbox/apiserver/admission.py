"""Dynamic admission: calling the webhooks of Mutating/ValidatingWebhookConfigurations as a real
kube-apiserver does.

For a write, every webhook whose ``rules`` (apiGroups/apiVersions/resources/operations/scope),
``namespaceSelector`` and ``objectSelector`` match is called with an ``admission.k8s.io/v1`` AdmissionReview
over HTTPS, verified against its ``caBundle``: mutating webhooks first, in configuration-name order, each
JSONPatch applied before the next call; then validating webhooks. A ``service`` clientConfig resolves to the
local address registered with :meth:`Admission.register_service`, else to a Ready pod behind the Service
(selector, ``targetPort`` by number or name: its endpoints, taken in turn), and the certificate is verified for
the service DNS name ``<name>.<namespace>.svc``, as the real server does; a ``url`` clientConfig is used as is.

Failures keep the real server's shapes: a denial answers with the webhook's status code and
``admission webhook "<name>" denied the request: <message>``; an unreachable webhook with
``failurePolicy: Fail`` (the v1 default) is a 500 ``failed calling webhook "<name>": ...``; with ``Ignore``
the webhook is skipped. ``timeoutSeconds`` (default 10) bounds each call.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import json
import logging
import ssl
import uuid
from typing import Any

import aiohttp
import jsonpatch

from opsmanager.kube import selectors
from opsmanager_sandbox.apiserver import errors, rbac, resources, store

logger = logging.getLogger(__name__)
Obj = dict[str, Any]

MUTATING = ("admissionregistration.k8s.io", "mutatingwebhookconfigurations")
VALIDATING = ("admissionregistration.k8s.io", "validatingwebhookconfigurations")
_EXEMPT = {MUTATING, VALIDATING}
_OPTIONS_KIND = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}
REQUEST_USER: contextvars.ContextVar[rbac.UserInfo | None] = contextvars.ContextVar("REQUEST_USER", default=None)
"""Who made the request being admitted (set per request by the server; None, in-process writes: the admin)."""


def _user_info(user: rbac.UserInfo | None) -> Obj:
    user = user or rbac.ADMIN
    info: Obj = {"username": user.name, "groups": list(user.groups)}
    if user.uid:
        info["uid"] = user.uid
    if user.extra:
        info["extra"] = {k: [v] for k, v in user.extra}
    return info


class CallFailed(Exception):
    """The webhook could not be called or answered nonsense (subject to failurePolicy)."""


def _listed(value: str, allowed: list[str] | None) -> bool:
    return bool(allowed) and ("*" in allowed or value in allowed)  # type: ignore[operator]


def _resource_listed(resource: str, subresource: str | None, patterns: list[str] | None) -> bool:
    full = f"{resource}/{subresource}" if subresource else resource
    for pattern in patterns or []:
        if pattern == full or pattern == "*/*":
            return True
        if pattern == "*" and not subresource:
            return True
        head, _, tail = pattern.partition("/")
        if subresource and tail and (head in ("*", resource)) and (tail in ("*", subresource)):
            return True
    return False


def _target_port(pod: Obj, target: int | str) -> int | None:
    """A Service's ``targetPort`` on ``pod``: a number, or the name of one of its containers' ports."""
    if isinstance(target, int) or str(target).isdigit():
        return int(target)
    for container in (pod.get("spec") or {}).get("containers") or []:
        for p in container.get("ports") or []:
            if p.get("name") == target:
                return int(p["containerPort"])
    return None


class Admission:
    def __init__(self, objects: store.Store) -> None:
        self.store = objects
        self.services: dict[tuple[str, str, int], tuple[str, int]] = {}
        self._next_endpoint = 0
        self._session: aiohttp.ClientSession | None = None

    def register_service(self, namespace: str, name: str, port: int, host: str, target_port: int) -> None:
        self.services[(namespace, name, int(port))] = (host, int(target_port))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- selection -----------------------------------------------------------------------------------------

    def _matching(self, key: store.Key, rt: resources.ResourceType, operation: str, obj: Obj | None,
                  old: Obj | None, namespace: str, subresource: str | None) -> list[Obj]:
        if rt.storage_key in _EXEMPT:
            return []
        found = []
        for config in self.store.list(key):
            for hook in config.get("webhooks") or []:
                if self._rules_match(hook, rt, operation, subresource) and \
                        self._selectors_match(hook, rt, obj, old, namespace):
                    found.append(hook)
        return found

    @staticmethod
    def _rules_match(hook: Obj, rt: resources.ResourceType, operation: str, subresource: str | None) -> bool:
        for rule in hook.get("rules") or []:
            scope = rule.get("scope", "*")
            if scope == "Namespaced" and not rt.namespaced or scope == "Cluster" and rt.namespaced:
                continue
            if (_listed(rt.group, rule.get("apiGroups")) and _listed(rt.version, rule.get("apiVersions"))
                    and _listed(operation, rule.get("operations"))
                    and _resource_listed(rt.plural, subresource, rule.get("resources"))):
                return True
        return False

    def _selectors_match(self, hook: Obj, rt: resources.ResourceType, obj: Obj | None, old: Obj | None,
                         namespace: str) -> bool:
        labels_new = ((obj or {}).get("metadata") or {}).get("labels") or {}
        labels_old = ((old or {}).get("metadata") or {}).get("labels") or {}
        ns_selector = hook.get("namespaceSelector")
        if ns_selector:
            if rt.group == "" and rt.plural == "namespaces":
                ns_labels = labels_new or labels_old
            elif rt.namespaced:
                ns_obj = self.store.get(("", "namespaces"), "", namespace)
                ns_labels = ((ns_obj or {}).get("metadata") or {}).get("labels") or {}
            else:
                ns_labels = None
            if ns_labels is not None and not selectors.from_object(ns_selector, none_matches=True).matches(ns_labels):
                return False
        obj_selector = hook.get("objectSelector")
        if obj_selector:
            match = selectors.from_object(obj_selector, none_matches=True)
            if not (match.matches(labels_new) and obj or match.matches(labels_old) and old):
                return False
        return True

    # -- calling -------------------------------------------------------------------------------------------

    def _review(self, rt: resources.ResourceType, operation: str, obj: Obj | None, old: Obj | None,
                namespace: str, subresource: str | None, dry_run: bool, options: Obj | None) -> Obj:
        name = ((obj or old or {}).get("metadata") or {}).get("name", "")
        kind = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        resource = {"group": rt.group, "version": rt.version, "resource": rt.plural}
        request: Obj = {
            "uid": str(uuid.uuid4()),
            "kind": kind, "resource": resource, "requestKind": kind, "requestResource": resource,
            "name": name, "operation": operation,
            "userInfo": _user_info(REQUEST_USER.get()),
            "object": obj, "oldObject": old, "dryRun": dry_run,
            "options": dict(options or {}, apiVersion="meta.k8s.io/v1", kind=_OPTIONS_KIND[operation]),
        }
        if subresource:
            request["subResource"] = request["requestSubResource"] = subresource
        if rt.namespaced:
            request["namespace"] = namespace
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}

    def _endpoint(self, hook: Obj, timeout: int) -> tuple[str, str, str | None]:
        """(url to connect to, url as the real server would show it, TLS server name)."""
        config = hook.get("clientConfig") or {}
        if config.get("url"):
            url = f"{config['url']}?timeout={timeout}s"
            return url, url, None
        svc = config.get("service") or {}
        ns, name, port = svc.get("namespace", ""), svc.get("name", ""), int(svc.get("port", 443))
        path = svc.get("path") or "/"
        shown = f"https://{name}.{ns}.svc:{port}{path}?timeout={timeout}s"
        target = self.services.get((ns, name, port)) or self._service_endpoint(ns, name, port, shown)
        return f"https://{target[0]}:{target[1]}{path}?timeout={timeout}s", shown, f"{name}.{ns}.svc"

    def _service_endpoint(self, namespace: str, name: str, port: int, shown: str) -> tuple[str, int]:
        """A Ready pod behind the Service (its selector, the ``port``'s ``targetPort``), as the real server reaches
        a webhook through the Service's endpoints; rotates between them."""
        svc = self.store.get(("", "services"), namespace, name)
        if svc is None:
            raise CallFailed(f'Post "{shown}": service "{name}" not found')
        spec = svc.get("spec") or {}
        entry = next((p for p in spec.get("ports") or [] if int(p.get("port", 0)) == port), None)
        selector = spec.get("selector") or {}
        if entry is None or not selector:
            raise CallFailed(f'Post "{shown}": service "{name}" has no port {port} with a selector')
        target = entry.get("targetPort", port)
        endpoints: list[tuple[str, int]] = []
        for pod in self.store.list(("", "pods"), namespace):
            meta, status = pod.get("metadata") or {}, pod.get("status") or {}
            labels = meta.get("labels") or {}
            if meta.get("deletionTimestamp") or not status.get("podIP") or \
                    not selectors.matches_set(selector, labels):
                continue
            if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []):
                continue
            number = _target_port(pod, target)
            if number is not None:
                endpoints.append((status["podIP"], number))
        if not endpoints:
            raise CallFailed(f'Post "{shown}": no endpoints available for service "{name}"')
        self._next_endpoint += 1
        return sorted(endpoints)[self._next_endpoint % len(endpoints)]

    async def _call(self, hook: Obj, review: Obj) -> Obj:
        timeout = int(hook.get("timeoutSeconds") or 10)
        url, shown, server_name = self._endpoint(hook, timeout)
        bundle = (hook.get("clientConfig") or {}).get("caBundle")
        try:
            context = ssl.create_default_context(
                cadata=base64.b64decode(bundle).decode() if bundle else None)
        except (ValueError, ssl.SSLError) as e:
            raise CallFailed(f'Post "{shown}": invalid caBundle: {e}') from e
        if self._session is None:
            self._session = aiohttp.ClientSession()
        try:
            async with self._session.post(url, json=review, ssl=context,
                                          server_hostname=server_name,
                                          timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                text = await resp.text()
                if resp.status != 200:
                    raise CallFailed(f'an error on the server ("{text[:200]}") has prevented the request from '
                                     f"succeeding")
        except TimeoutError as e:  # before ClientError: aiohttp's timeouts are both
            raise CallFailed(f'Post "{shown}": context deadline exceeded') from e
        except (aiohttp.ClientError, ssl.SSLError, OSError) as e:
            raise CallFailed(f'Post "{shown}": {e}') from e
        try:
            response = json.loads(text)["response"]
        except (ValueError, KeyError, TypeError) as e:
            raise CallFailed(f"received invalid webhook response: {e}") from e
        if response.get("uid") != review["request"]["uid"]:
            raise CallFailed(f"expected response.uid={review['request']['uid']!r}, got {response.get('uid')!r}")
        return dict(response)

    async def _run(self, hook: Obj, review: Obj) -> Obj | None:
        """The webhook's response, or None when it failed and failurePolicy is Ignore."""
        name = hook.get("name", "")
        try:
            return await self._call(hook, review)
        except CallFailed as e:
            if hook.get("failurePolicy", "Fail") == "Ignore":
                logger.warning("failed calling webhook %r (ignored): %s", name, e)
                return None
            raise errors.internal(f'failed calling webhook "{name}": failed to call webhook: {e}') from e

    @staticmethod
    def _deny(name: str, response: Obj) -> errors.StatusError:
        result = dict(response.get("status") or {})
        code = int(result.get("code") or 0)
        if code < 400:
            code = 400
        denied = f'admission webhook "{name}" denied the request'
        if result.get("message"):
            message = f"{denied}: {result['message']}"
        elif result.get("reason"):
            message = f"{denied}: {result['reason']}"
        else:
            message = f"{denied} without explanation"
        return errors.StatusError(code, result.get("reason", ""), message, result.get("details"))

    async def mutate(self, rt: resources.ResourceType, operation: str, obj: Obj | None, old: Obj | None,
                     namespace: str, subresource: str | None, dry_run: bool) -> tuple[Obj | None, list[str]]:
        hooks = self._matching(MUTATING, rt, operation, obj, old, namespace, subresource)
        if not hooks or obj is None:
            return None, []
        warnings: list[str] = []
        for hook in hooks:
            review = self._review(rt, operation, obj, old, namespace, subresource, dry_run, None)
            response = await self._run(hook, review)
            if response is None:
                continue
            warnings += response.get("warnings") or []
            if not response.get("allowed"):
                raise self._deny(hook.get("name", ""), response)
            if response.get("patch"):
                try:
                    ops = json.loads(base64.b64decode(response["patch"]))
                    obj = jsonpatch.JsonPatch(ops).apply(obj)
                except (ValueError, jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
                    raise errors.internal(f'failed calling webhook "{hook.get("name")}": the patch could not '
                                          f"be applied: {e}") from e
        return obj, warnings

    async def validate(self, rt: resources.ResourceType, operation: str, obj: Obj | None, old: Obj | None,
                       namespace: str, subresource: str | None, dry_run: bool,
                       options: Obj | None = None) -> list[str]:
        hooks = self._matching(VALIDATING, rt, operation, obj, old, namespace, subresource)
        if not hooks:
            return []
        reviews = [self._review(rt, operation, obj, old, namespace, subresource, dry_run, options)
                   for _ in hooks]
        responses = await asyncio.gather(*(self._run(h, r) for h, r in zip(hooks, reviews, strict=True)),
                                         return_exceptions=True)
        warnings: list[str] = []
        for hook, response in zip(hooks, responses, strict=True):
            if isinstance(response, BaseException):
                raise response
            if response is None:
                continue
            warnings += response.get("warnings") or []
            if not response.get("allowed"):
                raise self._deny(hook.get("name", ""), response)
        return warnings
