"""An HTTPS front for the simulated API server that authenticates like kube-apiserver does.

The sim speaks plain HTTP; credential rotation (issue 14.1) needs a server that checks client certificates
and bearer tokens *per request*: kube-apiserver asks for a client certificate at the TLS handshake but only
decides in its authenticator, answering 401 for one it no longer accepts (expired, rotated away). Requests it
accepts are forwarded to the sim, streams included, so a watch through this front behaves like any other.
Certificates are minted here with `cryptography`, never read from the machine.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.forwarding import HOP_HEADERS, forward, listen

_UNAUTHORIZED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                 "message": "Unauthorized", "reason": "Unauthorized", "code": 401}


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class CertificateAuthority:
    """A throw-away CA issuing the server certificate and client certificates (serials are returned)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "edgeagent-test-ca")])
        now = datetime.datetime.now(datetime.UTC)
        self._name = name
        self.cert = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.ca_file = directory / "ca.crt"
        self.ca_file.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def _issue(self, common_name: str, *, organization: str | None, server: bool) -> tuple[int, bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        if organization:
            attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
        now = datetime.datetime.now(datetime.UTC)
        serial = x509.random_serial_number()
        builder = (
            x509.CertificateBuilder().subject_name(x509.Name(attrs)).issuer_name(self._name)
            .public_key(key.public_key()).serial_number(serial)
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(hours=2))
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return serial, cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)

    def client_pem(self, name: str, file: Path) -> int:
        """Certificate and key in one PEM file, as the kubelet's `kubelet-client-<time>.pem`; returns the serial."""
        serial, cert, key = self._issue(name, organization="system:nodes", server=False)
        file.write_bytes(cert + key)
        file.chmod(0o600)
        return serial

    def server_context(self) -> ssl.SSLContext:
        _, cert, key = self._issue("127.0.0.1", organization=None, server=True)
        (self.dir / "server.pem").write_bytes(cert + key)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.dir / "server.pem")
        ctx.load_verify_locations(self.ca_file)
        ctx.verify_mode = ssl.CERT_OPTIONAL  # as kube-apiserver: asked for, judged by the authenticator
        return ctx


@dataclass
class TlsApiServer:
    """`accepted_serials` / `accepted_tokens` are what the authenticator currently accepts; tests change them."""

    ca: CertificateAuthority
    upstream: str
    accepted_serials: set[int] = field(default_factory=set)
    accepted_tokens: set[str] = field(default_factory=set)
    rejected: int = 0
    watches: int = 0
    seen_serials: set[int] = field(default_factory=set)
    # Every request answered 401, as (monotonic time, method, path): what a rejected client keeps sending.
    rejections: list[tuple[float, str, str]] = field(default_factory=list)
    url: str = ""
    _runner: web.AppRunner | None = None
    _session: aiohttp.ClientSession | None = None

    def _authenticated(self, request: web.Request) -> bool:
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer ") and auth[7:] in self.accepted_tokens:
            return True
        transport = request.transport
        ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if der:
            serial = x509.load_der_x509_certificate(der).serial_number
            self.seen_serials.add(serial)
            return serial in self.accepted_serials
        return False

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if not self._authenticated(request):
            self.rejected += 1
            self.rejections.append((time.monotonic(), request.method, request.path))
            return web.json_response(_UNAUTHORIZED, status=401)
        if request.query.get("watch") in ("true", "1"):
            self.watches += 1
        assert self._session is not None
        # The sim is not asked to authenticate again: the credential stays here.
        return await forward(self._session, self.upstream, request, drop=HOP_HEADERS | {"authorization"},
                             answer_headers=False)

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        self._runner, self.url = await listen(self._handle, ssl_context=self.ca.server_context())

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def kubeconfig(self, path: Path, *, cert_file: Path | None = None, token_file: Path | None = None) -> Path:
        user: dict[str, str] = {}
        if cert_file is not None:
            user = {"client-certificate": str(cert_file), "client-key": str(cert_file)}
        if token_file is not None:
            user["tokenFile"] = str(token_file)
        doc = {
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": self.url, "certificate-authority": str(self.ca.ca_file)}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        }
        path.write_text(json.dumps(doc))
        return path


def swap_symlink(link: Path, target: Path) -> None:
    """Point `link` at `target` atomically, as the kubelet's certificate manager rotates `*-current.pem`."""
    tmp = link.with_name(link.name + ".tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    tmp.replace(link)
