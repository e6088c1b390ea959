"""A real HTTP(S) server on loopback that nodes' health endpoints are pointed at in tests.

It answers per node (the endpoint template puts the node's name in the path), records every
request, and can require a client certificate signed by its CA (mTLS).
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Pki:
    """A CA and a server and a client certificate it signed (PEM)."""

    ca: bytes
    server_cert: bytes
    server_key: bytes
    client_cert: bytes
    client_key: bytes


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_pki() -> Pki:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "checks-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(cn: str, usage: x509.ObjectIdentifier, san: bool) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if san:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
                ),
                critical=False,
            )
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)

    server_cert, server_key = leaf("localhost", ExtendedKeyUsageOID.SERVER_AUTH, True)
    client_cert, client_key = leaf("nodeops", ExtendedKeyUsageOID.CLIENT_AUTH, False)
    return Pki(
        ca.public_bytes(serialization.Encoding.PEM),
        server_cert,
        server_key,
        client_cert,
        client_key,
    )


@dataclass
class CheckServer:
    """What the endpoints answer, per node, and what they were asked."""

    url: str = ""
    healthy: dict[str, bool] = field(default_factory=dict)
    default_healthy: bool = True
    triggers: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    clients: list[str | None] = field(default_factory=list)

    def app(self) -> web.Application:
        async def health(request: web.Request) -> web.Response:
            node = request.match_info["node"]
            self.checks.append(node)
            self.clients.append(_client_cn(request))
            if self.healthy.get(node, self.default_healthy):
                return web.Response(text="status: ok")
            return web.Response(status=503, text="status: starting")

        async def trigger(request: web.Request) -> web.Response:
            node = request.match_info["node"]
            self.triggers.append(node)
            return web.Response(status=202, text="draining")

        app = web.Application()
        app.router.add_get("/health/{node}", health)
        app.router.add_post("/drain/{node}", trigger)
        return app


def _client_cn(request: web.Request) -> str | None:
    transport = request.transport
    peer = transport.get_extra_info("peercert") if transport is not None else None
    if not peer:
        return None
    for rdn in peer.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


@asynccontextmanager
async def serve(pki: Pki | None = None, *, mtls: bool = False) -> AsyncIterator[CheckServer]:
    state = CheckServer()
    ctx: ssl.SSLContext | None = None
    if pki is not None:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            cert.write_bytes(pki.server_cert)
            key.write_bytes(pki.server_key)
            ctx.load_cert_chain(cert, key)
        if mtls:
            ctx.load_verify_locations(cadata=pki.ca.decode())
            ctx.verify_mode = ssl.CERT_REQUIRED
    runner = web.AppRunner(state.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    state.url = f"{'https' if pki else 'http'}://127.0.0.1:{port}"
    try:
        yield state
    finally:
        await runner.cleanup()
