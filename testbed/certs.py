"""One throwaway CA per testbed run and the certificates signed by it.

The same serving certificate serves the API server and the webhooks the testbed runs as local
processes (SANs localhost and 127.0.0.1). With real nodes the API server is also reached from
the Pod network, so its certificate adds the node bridge's address and the `kubernetes` Service
names; the nodes' own certificates (kubelet client and serving, kube-proxy) are issued by
`issue()` from the same CA.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhookcerts.authority import CA_KEY_USAGE

VALIDITY = dt.timedelta(days=7)


@dataclass(frozen=True)
class CertPaths:
    ca_crt: Path
    ca_key: Path
    serving_crt: Path
    serving_key: Path
    admin_crt: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path.write_bytes(pem)
    path.chmod(0o600)


def _write_cert(cert: x509.Certificate, path: Path) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))  # tolerate small clock skew
        .not_valid_after(now + VALIDITY)
    )


def _leaf(
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName] | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    builder = _builder(subject, ca.subject, key).add_extension(
        x509.ExtendedKeyUsage([usage]), critical=False
    )
    builder = builder.add_extension(
        x509.BasicConstraints(ca=False, path_length=None), critical=True
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def issue(
    directory: Path,
    name: str,
    common_name: str,
    organizations: tuple[str, ...] = (),
    server_sans: list[str] | None = None,
) -> tuple[Path, Path]:
    """A leaf signed by the run's CA in `directory`: a client certificate, or a serving one when
    `server_sans` (DNS names or IP addresses) is given. Returns (certificate, key) paths."""
    ca = x509.load_pem_x509_certificate((directory / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    usage = (
        ExtendedKeyUsageOID.CLIENT_AUTH if server_sans is None else ExtendedKeyUsageOID.SERVER_AUTH
    )
    cert, key = _leaf(ca, ca_key, x509.Name(attrs), usage, _sans(server_sans or []))
    crt_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    _write_cert(cert, crt_path)
    _write_key(key, key_path)
    return crt_path, key_path


def _sans(names: list[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for name in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return out


def generate(directory: Path, extra_sans: tuple[str, ...] = ()) -> CertPaths:
    directory.mkdir(parents=True, exist_ok=True)
    paths = CertPaths(
        ca_crt=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_crt=directory / "serving.crt",
        serving_key=directory / "serving.key",
        admin_crt=directory / "admin.crt",
        admin_key=directory / "admin.key",
        sa_key=directory / "sa.key",
        sa_pub=directory / "sa.pub",
    )
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpustack-testbed-ca")])
    ca = (
        _builder(ca_name, ca_name, ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(CA_KEY_USAGE, critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    _write_cert(ca, paths.ca_crt)
    _write_key(ca_key, paths.ca_key)

    # Go ignores the CN: the IP SAN is what lets clients dial https://127.0.0.1.
    serving, serving_key = _leaf(
        ca,
        ca_key,
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]),
        ExtendedKeyUsageOID.SERVER_AUTH,
        _sans(["localhost", "127.0.0.1", *extra_sans]),
    )
    _write_cert(serving, paths.serving_crt)
    _write_key(serving_key, paths.serving_key)

    admin, admin_key = _leaf(
        ca,
        ca_key,
        x509.Name(
            [
                x509.NameAttribute(NameOID.COMMON_NAME, "admin"),
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
            ]
        ),
        ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    _write_cert(admin, paths.admin_crt)
    _write_key(admin_key, paths.admin_key)

    # Service-account tokens are signed with a bare key (no certificate); the API server
    # verifies them with its public half.
    sa_key = _key()
    _write_key(sa_key, paths.sa_key)
    paths.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return paths
