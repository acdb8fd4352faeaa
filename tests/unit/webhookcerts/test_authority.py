"""The webhooks' serving certificate: what is issued, and when it is issued again."""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import tempfile
import threading
from pathlib import Path

import pytest
from cryptography import x509

from webhookcerts.authority import (
    RENEW_BEFORE,
    VALIDITY,
    Bundle,
    issue,
    renewal_reason,
    service_names,
)
from webhookcerts.keeper import (
    Target,
    secret_object,
    stored_bundle,
    trusting,
)

NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
NAMES = service_names(["gpustack-webhook-admission", "gpustack-webhook-instancetype"], "ns")


def _handshake(bundle: Bundle, trusted: bytes, hostname: str) -> None:
    """A real TLS handshake: a server on `bundle`'s pair, a client trusting only `trusted` and
    asking for `hostname` (what the API server does when it calls a webhook Service)."""
    with tempfile.TemporaryDirectory() as folder:
        crt, key = Path(folder, "tls.crt"), Path(folder, "tls.key")
        crt.write_bytes(bundle.tls_crt)
        key.write_bytes(bundle.tls_key)
        server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_ctx.load_cert_chain(crt, key)
    client_ctx = ssl.create_default_context(cadata=trusted.decode())
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)

        def serve() -> None:
            conn, _ = listener.accept()
            try:
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(b"ok")
            except (ssl.SSLError, OSError):
                pass

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        with (
            socket.create_connection(listener.getsockname()) as raw,
            client_ctx.wrap_socket(raw, server_hostname=hostname) as tls,
        ):
            assert tls.recv(2) == b"ok"
        thread.join(5)


def test_service_names_are_the_ones_the_api_server_dials() -> None:
    assert service_names(["a"], "ns") == ["a.ns.svc", "a.ns.svc.cluster.local"]


def test_an_issued_bundle_serves_every_service_name() -> None:
    bundle = issue(NAMES, dt.datetime.now(dt.UTC))
    assert renewal_reason(bundle, NAMES, dt.datetime.now(dt.UTC)) is None
    for name in NAMES:
        _handshake(bundle, bundle.ca_crt, name)
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(bundle, bundle.ca_crt, "someone-else.ns.svc")


def test_the_ca_key_is_not_kept_and_the_leaf_is_a_server_certificate() -> None:
    bundle = issue(NAMES, NOW)
    assert b"PRIVATE KEY" not in bundle.ca_crt + bundle.tls_crt
    [ca] = x509.load_pem_x509_certificates(bundle.ca_crt)
    leaf = x509.load_pem_x509_certificate(bundle.tls_crt)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert leaf.not_valid_after_utc - NOW == VALIDITY


@pytest.mark.parametrize(
    ("age", "renews"),
    [
        (dt.timedelta(0), False),
        (VALIDITY - RENEW_BEFORE - dt.timedelta(days=1), False),
        (VALIDITY - RENEW_BEFORE + dt.timedelta(days=1), True),
        (VALIDITY + dt.timedelta(days=1), True),
    ],
)
def test_renewal_comes_ahead_of_expiry(age: dt.timedelta, renews: bool) -> None:
    bundle = issue(NAMES, NOW)
    reason = renewal_reason(bundle, NAMES, NOW + age)
    assert (reason is not None) == renews, reason


def test_every_unusable_bundle_is_issued_again() -> None:
    good = issue(NAMES, NOW)
    other = issue(NAMES, NOW)
    cases = {
        "nothing": None,
        "empty": Bundle(b"", b"", b""),
        "garbage": Bundle(b"x", b"y", b"z"),
        "no CA": Bundle(good.tls_crt, good.tls_key, b""),
        "foreign CA": Bundle(good.tls_crt, good.tls_key, other.ca_crt),
        "wrong key": Bundle(good.tls_crt, other.tls_key, good.ca_crt),
    }
    for case, bundle in cases.items():
        assert renewal_reason(bundle, NAMES, NOW) is not None, case
    # A Service added to the install: the stored certificate does not name it.
    wider = [*NAMES, *service_names(["gpustack-webhook-new"], "ns")]
    assert "gpustack-webhook-new.ns.svc" in str(renewal_reason(good, wider, NOW))


def test_a_renewal_keeps_trusting_the_certificate_still_being_served() -> None:
    """Until the kubelet swaps the files in every webhook Pod, the old pair is still served: the
    new bundle trusts both, and drops the old CA at the renewal after."""
    first = issue(NAMES, dt.datetime.now(dt.UTC))
    second = issue(NAMES, dt.datetime.now(dt.UTC), previous=first)
    assert len(x509.load_pem_x509_certificates(second.ca_crt)) == 2
    for served in (first, second):
        _handshake(served, second.ca_crt, NAMES[0])
    third = issue(NAMES, dt.datetime.now(dt.UTC), previous=second)
    assert len(x509.load_pem_x509_certificates(third.ca_crt)) == 2
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(first, third.ca_crt, NAMES[0])
    # An expired CA is not carried over.
    late = issue(NAMES, NOW + VALIDITY + dt.timedelta(days=1), previous=issue(NAMES, NOW))
    assert len(x509.load_pem_x509_certificates(late.ca_crt)) == 1


def test_the_secret_round_trips_and_keeps_its_type_and_version() -> None:
    target = Target("ns", "tls", ["gpustack-webhook-admission"])
    bundle = issue(target.dns_names, NOW)
    created = secret_object(target, bundle, None)
    assert created["type"] == "kubernetes.io/tls"
    assert stored_bundle(created) == bundle
    found = {**created, "type": "Opaque", "metadata": {"name": "tls", "resourceVersion": "7"}}
    replaced = secret_object(target, issue(target.dns_names, NOW), found)
    assert replaced["type"] == "Opaque"
    assert replaced["metadata"]["resourceVersion"] == "7"
    assert stored_bundle({"data": {"tls.crt": "!!not base64"}}) == Bundle(b"", b"", b"")


def test_every_webhook_of_a_configuration_is_made_to_trust_the_bundle() -> None:
    config = {
        "metadata": {"name": "c", "resourceVersion": "3"},
        "webhooks": [
            {"name": "a", "clientConfig": {"service": {"name": "s"}}},
            {"name": "b", "clientConfig": {"service": {"name": "s"}, "caBundle": "old"}},
        ],
    }
    wanted = trusting(config, "new")
    assert wanted is not None
    assert [w["clientConfig"]["caBundle"] for w in wanted["webhooks"]] == ["new", "new"]
    assert wanted["webhooks"][0]["clientConfig"]["service"] == {"name": "s"}
    assert wanted["metadata"]["resourceVersion"] == "3"
    assert trusting(wanted, "new") is None
