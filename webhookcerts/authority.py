"""Issue and inspect the webhooks' serving certificate. Pure: bytes in, bytes out.

Every issue makes a fresh CA, signs one serving certificate with it and throws the CA's key
away: nothing that can sign lies around in the cluster, and renewal is simply issuing again. To
keep the API server's trust while the kubelet swaps the mounted files in every webhook Pod (up
to a minute or two), the bundle keeps the previous CA beside the new one until it expires.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=365)
# Issue again once less than this is left: weeks of slack for a driver that is down for a while.
RENEW_BEFORE = dt.timedelta(days=90)
# Certificates start a little in the past: nodes' clocks drift.
BACKDATE = dt.timedelta(minutes=5)

TLS_CRT = "tls.crt"
TLS_KEY = "tls.key"
CA_CRT = "ca.crt"


# What a CA's key may do: sign certificates (and revocation lists), nothing else.
CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=False,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=True,
    crl_sign=True,
    encipher_only=False,
    decipher_only=False,
)


@dataclass(frozen=True)
class Bundle:
    """What the Secret holds, PEM text: the serving pair and the CAs the API server trusts."""

    tls_crt: bytes
    tls_key: bytes
    ca_crt: bytes

    def data(self) -> dict[str, bytes]:
        return {TLS_CRT: self.tls_crt, TLS_KEY: self.tls_key, CA_CRT: self.ca_crt}


def service_names(services: list[str], namespace: str) -> list[str]:
    """The DNS names the API server dials a webhook Service by (and the long form)."""
    out: list[str] = []
    for service in services:
        out += [f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]
    return out


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def issue(dns_names: list[str], now: dt.datetime, previous: Bundle | None = None) -> Bundle:
    """A fresh CA and a serving certificate for `dns_names` signed by it. The CAs of `previous`
    that are still valid stay in the bundle, after the new one."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    # A name of its own per issue (as the kubelet's self-signed CAs do), and key identifiers:
    # while two CAs are trusted at once, verifiers must find the one that signed.
    ca_name = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, f"gpustack-webhook-ca@{int(now.timestamp())}")]
    )
    ca_id = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(CA_KEY_USAGE, critical=True)
        .add_extension(ca_id, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_id), critical=False
        )
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    kept = [c for c in _certs(previous.ca_crt) if _valid_at(c, now)] if previous else []
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    # Only the CA that signed the certificate being replaced needs to stay trusted.
    return Bundle(_pem(leaf), key_pem, _pem(ca) + b"".join(_pem(c) for c in kept[:1]))


def _certs(pem: bytes) -> list[x509.Certificate]:
    """The certificates of a PEM bundle; none when it is empty or unreadable."""
    try:
        return x509.load_pem_x509_certificates(pem) if pem.strip() else []
    except ValueError:
        return []


def _valid_at(cert: x509.Certificate, now: dt.datetime) -> bool:
    return cert.not_valid_before_utc <= now < cert.not_valid_after_utc


def _signed_by(leaf: x509.Certificate, ca: x509.Certificate) -> bool:
    public = ca.public_key()
    if not isinstance(public, ec.EllipticCurvePublicKey) or leaf.issuer != ca.subject:
        return False
    assert leaf.signature_hash_algorithm is not None
    try:
        public.verify(
            leaf.signature, leaf.tbs_certificate_bytes, ec.ECDSA(leaf.signature_hash_algorithm)
        )
    except InvalidSignature:
        return False
    return True


def renewal_reason(bundle: Bundle | None, dns_names: list[str], now: dt.datetime) -> str | None:
    """Why the stored bundle cannot keep serving (None: it can). Anything unreadable, a name
    missing, a key that does not match, a CA that did not sign it, or expiry within
    RENEW_BEFORE."""
    if bundle is None:
        return "no certificate yet"
    try:
        leaf = x509.load_pem_x509_certificate(bundle.tls_crt)
        key = serialization.load_pem_private_key(bundle.tls_key, None)
    except ValueError as err:
        return f"stored certificate unreadable ({err})"
    cas = _certs(bundle.ca_crt)
    if not cas:
        return "no readable CA in the bundle"
    if key.public_key() != leaf.public_key():
        return "key does not match the certificate"
    if not any(_signed_by(leaf, ca) and _valid_at(ca, now) for ca in cas):
        return "certificate not signed by a CA of the bundle"
    try:
        sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "certificate names no DNS name"
    missing = sorted(set(dns_names) - set(sans.get_values_for_type(x509.DNSName)))
    if missing:
        return f"certificate does not name {', '.join(missing)}"
    if not _valid_at(leaf, now):
        return "certificate not valid now"
    if leaf.not_valid_after_utc - now < RENEW_BEFORE:
        return f"certificate expires {leaf.not_valid_after_utc:%Y-%m-%d}"
    return None
