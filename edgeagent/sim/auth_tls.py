"""TLS for the sim in rbac mode: kubectl sends credentials only over https.

client-go's clientcmd applies a kubeconfig's token, client certificate or `--token` only when the server URL
is https (plain http requests go out anonymous), so a sim that authenticates must speak TLS. A private CA
and a server certificate for the loopback address are made once with the `openssl` command and kept in
`--dir`, so a restarted sim keeps serving the certificate its kubeconfigs trust. Only the public CA goes
into kubeconfigs; keys stay 0600 in the directory.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import ssl
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from edgeagent.sim.addresses import client_host

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
SERVER_CERT = "apiserver.crt"
SERVER_KEY = "apiserver.key"
_DAYS = "3650"


@dataclass(frozen=True)
class ServerTLS:
    ca_file: Path
    cert_file: Path
    key_file: Path

    def ca_pem(self) -> str:
        return self.ca_file.read_text(encoding="ascii")

    def context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx


def _san(bind: str) -> str:
    names = {"DNS:localhost", "IP:127.0.0.1"}
    try:
        ipaddress.ip_address(bind)
        names.add(f"IP:{client_host(bind)}")  # a wildcard bind is dialled on loopback (sim/addresses.py)
    except ValueError:
        names.add(f"DNS:{bind}")
    return ",".join(sorted(names))


def _openssl(*args: str, cwd: Path) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        raise RuntimeError("edgeagent sim --authorization rbac needs the openssl command to make its TLS certificate")
    result = subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def ensure_server_tls(directory: Path, bind: str) -> ServerTLS:
    """The CA and server certificate in `directory`, made on first use (or when the bind address changed)."""
    tls = ServerTLS(directory / CA_CERT, directory / SERVER_CERT, directory / SERVER_KEY)
    san_file = directory / "apiserver.san"
    san = _san(bind)
    if (tls.ca_file.is_file() and tls.cert_file.is_file() and tls.key_file.is_file()
            and san_file.is_file() and san_file.read_text() == san):
        return tls
    with tempfile.TemporaryDirectory(prefix=".tls-", dir=directory) as tmp:
        work = Path(tmp)
        old_umask = os.umask(0o077)
        try:
            _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                     "-days", _DAYS, "-subj", "/CN=edgeagent-sim-ca", "-keyout", CA_KEY, "-out", CA_CERT,
                     "-addext", "basicConstraints=critical,CA:TRUE",
                     "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=work)
            _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                     "-subj", "/CN=edgeagent-sim-apiserver", "-keyout", SERVER_KEY, "-out", "server.csr", cwd=work)
            (work / "ext.cnf").write_text(
                f"subjectAltName={san}\nbasicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
                "authorityKeyIdentifier=keyid\nsubjectKeyIdentifier=hash\n")
            _openssl("x509", "-req", "-in", "server.csr", "-CA", CA_CERT, "-CAkey", CA_KEY, "-CAcreateserial",
                     "-days", _DAYS, "-extfile", "ext.cnf", "-out", SERVER_CERT, cwd=work)
        finally:
            os.umask(old_umask)
        for name in (CA_KEY, SERVER_KEY, SERVER_CERT, CA_CERT):
            os.replace(work / name, directory / name)
    san_file.write_text(san)
    return tls
