"""Certificates and keys: local control planes, and the controller's own webhook.

One CA per dev fleet signs each apiserver's serving certificate (for 127.0.0.1 and localhost),
so kubeconfigs verify TLS exactly like a real cluster's; an RSA key signs service-account
tokens. Certificates carry SKI/AKI and key usages, which strict X.509 checks require.
The controller's self-managed webhook certificate (``shell/webhook.py``) is made the same
way, kept in a Secret and renewed before ``not_after``.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertificateAuthority", "ca_from_pem", "load_ca", "new_ca", "not_after",
           "rsa_key_pem", "subject_names"]

_VALIDITY = datetime.timedelta(days=30)


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def _name(text: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(text))
    except ValueError:
        return x509.DNSName(text)


@dataclass(frozen=True)
class CertificateAuthority:
    """A CA able to issue serving certificates."""

    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
    cert: x509.Certificate

    @property
    def cert_pem(self) -> bytes:
        """The CA certificate, PEM (what kubeconfigs embed as certificate-authority-data)."""
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        """The CA's private key, PEM (for an operator that insists on holding its CA)."""
        return _pem_key(self.key)

    def issue_serving(self, common_name: str, *, dns_names: tuple[str, ...] = (),
                      days: int | None = None) -> tuple[bytes, bytes]:
        """A serving certificate for 127.0.0.1/localhost (and ``dns_names``): (cert PEM,
        key PEM), valid 30 days unless ``days`` says otherwise."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        validity = datetime.timedelta(days=days) if days else _VALIDITY
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + validity)
            .add_extension(x509.SubjectAlternativeName([
                *(_name(n) for n in dns_names if n not in ("localhost", "127.0.0.1")),
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_encipherment=True, content_commitment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False,
                crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def new_ca(name: str = "dispatcher-devfleet", *, dns_name: str | None = None,
           days: int | None = None, rsa_key: bool = False) -> CertificateAuthority:
    """A fresh self-signed CA (valid 30 days unless ``days``; with ``dns_name`` as a SAN for
    tools that verify their CA by name; an RSA key for tools that only parse PKCS#1)."""
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048) if rsa_key
        else ec.generate_private_key(ec.SECP256R1()))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + (datetime.timedelta(days=days) if days else _VALIDITY)))
    if dns_name:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(dns_name)]),
                                        critical=False)
    cert = (
        builder
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_encipherment=False, content_commitment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertificateAuthority(key=key, cert=cert)


def ca_from_pem(cert_pem: bytes, key_pem: bytes) -> CertificateAuthority:
    """A CA from its PEM certificate and key (a Secret's ``ca.crt`` and ``ca.key``)."""
    key = serialization.load_pem_private_key(key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise ValueError("not an EC or RSA key")
    return CertificateAuthority(key=key, cert=x509.load_pem_x509_certificate(cert_pem))


def not_after(cert_pem: bytes) -> datetime.datetime:
    """When a PEM certificate expires (UTC)."""
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc


def subject_names(cert_pem: bytes) -> set[str]:
    """The DNS names and IP addresses a PEM certificate is valid for."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {*san.get_values_for_type(x509.DNSName),
            *(str(ip) for ip in san.get_values_for_type(x509.IPAddress))}


def load_ca(root: Path) -> CertificateAuthority:
    """The CA a dev fleet saved in its state directory (``ca.crt``, ``ca.key``), so a
    profile started later (Kueue) gets certificates from the same fleet CA."""
    key = serialization.load_pem_private_key((root / "ca.key").read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise ValueError(f"{root / 'ca.key'}: not an EC or RSA key")
    return CertificateAuthority(key=key,
                                cert=x509.load_pem_x509_certificate((root / "ca.crt").read_bytes()))


def rsa_key_pem() -> bytes:
    """An RSA private key, PEM: signs and verifies service-account tokens."""
    return _pem_key(rsa.generate_private_key(public_exponent=65537, key_size=2048))
