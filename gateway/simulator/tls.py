"""Certificates for wss://: a throwaway CA and a server certificate, written to files.

The files are what a client needs (ca.pem) and what the server loads (server.pem with the
chain, server.key). Existing files in the directory are reused, so a client that pinned
ca.pem keeps working across simulator restarts; delete them to mint new ones.
"""

from __future__ import annotations

import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self.key)
        return context

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))


def ensure_certs(directory: Path, hosts: list[str]) -> TlsFiles:
    """The CA and server certificate for hosts in directory (made when missing)."""
    files = TlsFiles(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    if files.ca.exists() and files.cert.exists() and files.key.exists():
        return files
    import trustme

    directory.mkdir(parents=True, exist_ok=True)
    names = list(dict.fromkeys([*hosts, "localhost", "127.0.0.1"]))
    for name in names:
        if name in ("0.0.0.0", "::"):  # noqa: S104 - a wildcard bind is not a certificate name
            continue
        try:
            ipaddress.ip_address(name)
        except ValueError:
            if not name.replace("-", "").replace(".", "").isalnum():
                raise ValueError(f"{name!r} is neither an IP address nor a host name") from None
    ca = trustme.CA(organization_name="wsgw simulator")
    cert = ca.issue_cert(*[n for n in names if n not in ("0.0.0.0", "::")])  # noqa: S104
    ca.cert_pem.write_to_path(str(files.ca))
    cert.private_key_pem.write_to_path(str(files.key))
    files.key.chmod(0o600)
    with files.cert.open("wb") as out:
        for pem in cert.cert_chain_pems:
            out.write(pem.bytes())
    return files
