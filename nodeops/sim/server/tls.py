"""A self-signed serving certificate for the simulated API server.

kubectl (client-go) refuses to send a bearer token over plain HTTP, so a simulator that checks
tokens must speak TLS for kubectl to authenticate at all. The certificate is made at start-up
for the loopback names and handed to clients through the kubeconfig's
`certificate-authority-data`, exactly as a real cluster's CA is.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def self_signed(host: str) -> tuple[bytes, bytes]:
    """(certificate PEM, private key PEM) valid for `host`, 127.0.0.1 and localhost."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nodeops-sim-apiserver")])
    alt: list[x509.GeneralName] = [x509.DNSName("localhost")]
    for value in {host, "127.0.0.1"}:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(value)))
        except ValueError:
            alt.append(x509.DNSName(value))
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert_pem, key_pem


def server_context(cert_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as tmp:
        cert_file = Path(tmp) / "tls.crt"
        key_file = Path(tmp) / "tls.key"
        cert_file.write_bytes(cert_pem)
        key_file.write_bytes(key_pem)
        key_file.chmod(0o600)
        ctx.load_cert_chain(cert_file, key_file)
    return ctx
