"""Keep the webhooks' Secret issued and every webhook configuration trusting it.

One pass (`Keeper.ensure`) reads the Secret, issues or renews it when `authority.renewal_reason`
says so, then sets every webhook's `clientConfig.caBundle` of the named configurations to the
Secret's CA bundle. Every write carries the resourceVersion it read, so driver replicas running
the same pass at once cannot undo each other: a lost race is a 409, and the next pass reads the
winner's Secret and converges on it.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import requests

from kubeapi import Kube, KubeError, Obj
from webhookcerts.authority import Bundle, issue, renewal_reason, service_names

log = logging.getLogger("webhook-certs")

ADMISSION_API = "admissionregistration.k8s.io/v1"
MUTATING = "MutatingWebhookConfiguration"
VALIDATING = "ValidatingWebhookConfiguration"
TLS_SECRET_TYPE = "kubernetes.io/tls"


@dataclass(frozen=True)
class Target:
    """What to keep: the Secret the webhook Pods mount, the Services it must name, and the
    webhook configurations whose caBundle must trust it."""

    namespace: str
    secret: str
    services: list[str]
    mutating: list[str] = field(default_factory=list)
    validating: list[str] = field(default_factory=list)

    @property
    def dns_names(self) -> list[str]:
        return service_names(self.services, self.namespace)

    def configurations(self) -> list[tuple[str, str]]:
        return [(MUTATING, n) for n in self.mutating] + [(VALIDATING, n) for n in self.validating]


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def stored_bundle(secret: Obj | None) -> Bundle | None:
    if secret is None:
        return None
    data = secret.get("data") or {}
    try:
        return Bundle(
            *(base64.b64decode(data.get(k) or "") for k in ("tls.crt", "tls.key", "ca.crt"))
        )
    except (ValueError, TypeError):
        return Bundle(b"", b"", b"")


def secret_object(target: Target, bundle: Bundle, found: Obj | None) -> Obj:
    """The Secret to write: a new one, or `found` with its data replaced (its type, labels and
    resourceVersion kept: a Secret's type cannot change)."""
    data = {k: base64.b64encode(v).decode() for k, v in bundle.data().items()}
    if found is not None:
        return {**found, "data": data}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": TLS_SECRET_TYPE,
        "metadata": {
            "name": target.secret,
            "namespace": target.namespace,
            "labels": {"app.kubernetes.io/part-of": "gpustack-chain"},
        },
        "data": data,
    }


def trusting(configuration: Obj, ca_bundle: str) -> Obj | None:
    """`configuration` with every webhook trusting `ca_bundle` (base64), or None when it already
    does."""
    webhooks = configuration.get("webhooks") or []
    if all((w.get("clientConfig") or {}).get("caBundle") == ca_bundle for w in webhooks):
        return None
    return {
        **configuration,
        "webhooks": [
            {**w, "clientConfig": {**(w.get("clientConfig") or {}), "caBundle": ca_bundle}}
            for w in webhooks
        ],
    }


class Keeper:
    def __init__(self, kube: Kube, target: Target, clock: Callable[[], dt.datetime] = _now):
        self.kube = kube
        self.target = target
        self.clock = clock

    def ensure(self) -> bool:
        """One pass; True once the Secret serves and every configuration trusts it."""
        bundle = self._ensure_secret()
        if bundle is None:
            return False
        ca_bundle = base64.b64encode(bundle.ca_crt).decode()
        converged = True
        for kind, name in self.target.configurations():
            found = self.kube.get(ADMISSION_API, kind, name)
            if found is None:  # not applied yet (or deleted): nothing to trust it for
                converged = False
                continue
            wanted = trusting(found, ca_bundle)
            if wanted is None:
                continue
            try:
                self.kube.replace(wanted)
                log.info("%s %s now trusts the webhook CA", kind, name)
            except KubeError as err:
                if err.status != 409:
                    raise
                converged = False
        return converged

    def _ensure_secret(self) -> Bundle | None:
        """The bundle the Secret holds after this pass; None when a concurrent write won and
        the next pass must read again."""
        target = self.target
        found = self.kube.get("v1", "Secret", target.secret, target.namespace)
        stored = stored_bundle(found)
        now = self.clock()
        reason = renewal_reason(stored, target.dns_names, now)
        if reason is None:
            assert stored is not None
            return stored
        fresh = issue(target.dns_names, now, stored)
        wanted = secret_object(target, fresh, found)
        try:
            if found is None:
                self.kube.create(wanted)
            else:
                self.kube.replace(wanted)
        except KubeError as err:
            if err.status == 409:  # another replica wrote first
                return None
            raise
        log.info(
            "issued the webhook certificate %s/%s: %s", target.namespace, target.secret, reason
        )
        return fresh


def keep_in_background(
    keeper: Keeper, period: float = 60.0, retry: float = 2.0, max_retry: float = 30.0
) -> threading.Thread:
    """`ensure` every `period` seconds; sooner, backing off from `retry`, until converged (the
    webhook configurations may not be applied yet, the API may be unreachable)."""

    def loop() -> None:
        delay = retry
        while True:
            try:
                converged = keeper.ensure()
            except (KubeError, OSError, requests.RequestException) as err:
                log.warning("webhook certificate pass failed: %s", err)
                converged = False
            if converged:
                delay = retry
                time.sleep(period)
            else:
                time.sleep(delay)
                delay = min(max_retry, delay * 2)

    thread = threading.Thread(target=loop, name="webhook-certs", daemon=True)
    thread.start()
    return thread
