"""The verdict driver's certificate keeper on the real API server: the Secret it issues, the
caBundles it keeps, renewal, and replicas racing each other."""

from __future__ import annotations

import base64
import datetime as dt
import threading
import uuid
from collections.abc import Iterator

import pytest
from cryptography import x509

from kubeapi import Kube, Obj
from testbed.harness import Testbed
from webhookcerts.authority import VALIDITY
from webhookcerts.keeper import ADMISSION_API, MUTATING, VALIDATING, Keeper, Target


def _configuration(kind: str, name: str, namespace: str) -> Obj:
    """A configuration whose webhooks match nothing (an API group nobody serves)."""
    hooks = [
        {
            "name": f"{hook}.{name}.example.com",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Ignore",
            "clientConfig": {"service": {"name": "svc", "namespace": namespace, "path": "/x"}},
            "rules": [
                {
                    "apiGroups": ["nothing.example.com"],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["things"],
                }
            ],
        }
        for hook in ("one", "two")
    ]
    return {
        "apiVersion": ADMISSION_API,
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": hooks,
    }


@pytest.fixture
def target(testbed: Testbed) -> Iterator[Target]:
    kube = testbed.kube
    suffix = uuid.uuid4().hex[:8]
    namespace = f"certs-{suffix}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    name = f"gpustack-certs-{suffix}"
    for kind in (MUTATING, VALIDATING):
        kube.create(_configuration(kind, name, namespace))
    yield Target(namespace, "tls", ["svc", "other"], mutating=[name], validating=[name])
    for kind in (MUTATING, VALIDATING):
        kube.delete(ADMISSION_API, kind, name)
    kube.delete("v1", "Namespace", namespace)


def _stored(kube: Kube, target: Target) -> tuple[Obj, bytes]:
    secret = kube.get("v1", "Secret", target.secret, target.namespace)
    assert secret is not None
    return secret, base64.b64decode(secret["data"]["ca.crt"])


def _bundles(kube: Kube, target: Target) -> list[bytes]:
    out = []
    for kind, name in target.configurations():
        config = kube.get(ADMISSION_API, kind, name)
        assert config is not None
        out += [base64.b64decode(w["clientConfig"]["caBundle"]) for w in config["webhooks"]]
    return out


def test_the_keeper_issues_once_and_every_webhook_trusts_it(testbed: Testbed, target: Target):
    kube = testbed.kube
    keeper = Keeper(kube, target)
    assert keeper.ensure()
    secret, ca = _stored(kube, target)
    assert secret["type"] == "kubernetes.io/tls"
    assert _bundles(kube, target) == [ca] * 4
    leaf = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == set(target.dns_names)
    # A second pass (or a restarted driver) changes nothing.
    version = secret["metadata"]["resourceVersion"]
    assert keeper.ensure()
    assert _stored(kube, target)[0]["metadata"]["resourceVersion"] == version
    # Someone edits a caBundle away: the next pass puts it back.
    config = kube.get(ADMISSION_API, MUTATING, target.mutating[0])
    assert config is not None
    config["webhooks"][1]["clientConfig"].pop("caBundle")
    kube.replace(config)
    assert keeper.ensure()
    assert _bundles(kube, target) == [ca] * 4


def test_renewal_trusts_old_and_new_until_the_next(testbed: Testbed, target: Target) -> None:
    kube = testbed.kube
    assert Keeper(kube, target).ensure()
    _, first_ca = _stored(kube, target)
    later = dt.datetime.now(dt.UTC) + VALIDITY - dt.timedelta(days=30)
    assert Keeper(kube, target, clock=lambda: later).ensure()
    _, second_ca = _stored(kube, target)
    cas = x509.load_pem_x509_certificates(second_ca)
    assert len(cas) == 2
    assert cas[1] == x509.load_pem_x509_certificate(first_ca)
    assert _bundles(kube, target) == [second_ca] * 4


def test_racing_replicas_converge_on_one_certificate(testbed: Testbed, target: Target) -> None:
    """Four driver replicas start at once: one Secret wins, the losers' writes are 409s (never a
    silent overwrite), and every configuration ends up trusting the winner."""
    results: list[bool] = []
    start = threading.Barrier(4)

    def replica() -> None:
        keeper = Keeper(Kube.from_kubeconfig(testbed.kubeconfig), target)
        start.wait()
        results.append(keeper.ensure())

    threads = [threading.Thread(target=replica) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    kube = testbed.kube
    # Whoever lost reads the winner on its next pass.
    for _ in range(3):
        if Keeper(kube, target).ensure():
            break
    _, ca = _stored(kube, target)
    assert _bundles(kube, target) == [ca] * 4
    # Every replica finished its pass. None need have finished everything in it: a replica that
    # wrote the winning Secret can still lose a caBundle write to another writing the same CA
    # (seen in CI), and it settles on its next pass, as above.
    assert len(results) == 4
