"""Offline stand-ins for the real providers, for the TLS tests.

- `TestCA`: a certificate authority made by the test (Python `cryptography`),
  issuing server certificates for any name: valid, expired, or for another
  name; a second `TestCA` is one Envoy does not trust.
- `DnsResponder`: a tiny DNS server on 127.0.0.1 (UDP) that answers A queries
  for the names it is given with 127.0.0.1, nothing for AAAA, and NXDOMAIN
  for every other name. Envoy's provider clusters use it through their
  c-ares `typed_dns_resolver_config` (`dns_patch`), so api.openai.com & co.
  resolve to the stand-ins for that Envoy only: /etc/hosts and the machine's
  resolver are never touched, and a name it was not given fails to resolve.
- `TlsStandIns`: one TLS listener on 127.0.0.1 that serves every provider
  name by SNI, each with its own certificate and ALPN list, and forwards
  the decrypted bytes of a completed handshake to a backend (mock-llm, which
  speaks HTTP/1.1 and h2c on one port). It records per name each handshake
  (completed with its ALPN, or failed with the reason) and how many bytes of
  requests it received, so a test can show that a server whose certificate
  failed validation never got a request, nor the key in it.
"""
from __future__ import annotations

import datetime
import socket
import ssl
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class TestCA:
    """A CA written to `dir/<label>-ca.pem`; `issue` writes a server
    certificate and key for a name and returns their paths."""
    __test__ = False  # not a pytest class

    def __init__(self, directory: Path, label: str = "tollgate-test"):
        self.dir, self.label = Path(directory), label
        self.dir.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{label} CA")])
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256()))
        self.path = self.dir / f"{label}-ca.pem"
        self.path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, *, expired: bool = False, file_label: str | None = None) -> tuple[Path, Path]:
        """A server certificate for DNS name `name` (SAN and CN), valid now
        or expired since yesterday: (certificate chain path, key path)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        start, end = ((now - datetime.timedelta(days=10), now - datetime.timedelta(days=1)) if expired
                      else (now - datetime.timedelta(hours=1), now + datetime.timedelta(days=7)))
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256()))
        stem = self.dir / f"{self.label}-{file_label or name}{'-expired' if expired else ''}"
        chain, key_path = stem.with_suffix(".crt"), stem.with_suffix(".key")
        chain.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(_pem_key(key))
        key_path.chmod(0o600)
        return chain, key_path


class DnsResponder:
    """UDP DNS on 127.0.0.1:<port>: A → 127.0.0.1 for `names`, an empty
    answer for their other types, NXDOMAIN for anything else. `queries`
    lists (name, type) as asked."""

    def __init__(self, names):
        self.names = {n.lower().rstrip(".") for n in names}
        self.queries: list[tuple[str, int]] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="dns-responder", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self.sock.recvfrom(512)
            except (socket.timeout, OSError):
                continue
            try:
                reply = self.answer(data)
            except (IndexError, struct.error, UnicodeDecodeError):
                continue
            self.sock.sendto(reply, peer)

    def answer(self, query: bytes) -> bytes:
        (qid, flags, qdcount) = struct.unpack("!HHH", query[:6])
        labels, i = [], 12
        while query[i]:
            labels.append(query[i + 1:i + 1 + query[i]].decode("ascii"))
            i += 1 + query[i]
        qtype, _qclass = struct.unpack("!HH", query[i + 1:i + 5])
        question = query[12:i + 5]
        name = ".".join(labels).lower()
        self.queries.append((name, qtype))
        known = name in self.names
        answers = b""
        if known and qtype == 1:  # A
            answers = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 5, 4) + socket.inet_aton("127.0.0.1")
        rcode = 0 if known else 3
        header = struct.pack("!HHHHHH", qid, 0x8180 | (flags & 0x0100) | rcode, 1, 1 if answers else 0, 0, 0)
        return header + question + answers

    def asked(self, name: str) -> bool:
        return any(n == name for n, t in self.queries)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


def dns_patch(cluster: dict, port: int) -> None:
    """Make a cluster resolve its host through the DnsResponder on `port`
    (c-ares, that server only, no search domains)."""
    cluster["typed_dns_resolver_config"] = {
        "name": "envoy.network.dns_resolver.cares",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.network.dns_resolver.cares.v3.CaresDnsResolverConfig",
            "resolvers": [{"socket_address": {"address": "127.0.0.1", "port_value": port}}],
            "use_resolvers_as_fallback": False,
            "dns_resolver_options": {"use_tcp_for_dns_lookups": False, "no_default_search_domain": True},
        },
    }


@dataclass
class Site:
    """What one name serves and what happened to it."""
    context: ssl.SSLContext
    backend: tuple[str, int] | None
    handshakes: list[str] = field(default_factory=list)       # selected ALPN of each completed handshake
    failures: list[str] = field(default_factory=list)         # the reason of each failed handshake
    request_bytes: int = 0                                     # bytes received after a completed handshake


class TlsStandIns:
    """One TLS port on 127.0.0.1 serving each name given to `serve` (by SNI)."""

    def __init__(self):
        self.sites: dict[str, Site] = {}
        self.lock = threading.Lock()
        self.unknown_sni: list[str | None] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.default = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.default.sni_callback = self._pick
        self._names: dict[int, str] = {}
        self._open: set[socket.socket] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="tls-stand-ins", daemon=True)
        self._thread.start()

    def serve(self, name: str, chain: Path, key: Path, backend: tuple[str, int] | None,
              alpn: tuple[str, ...] = ("h2", "http/1.1")) -> Site:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(chain, key)
        ctx.set_alpn_protocols(list(alpn))
        self.sites[name] = Site(ctx, backend)
        return self.sites[name]

    def _pick(self, sslsock, server_name, _ctx):
        site = self.sites.get(server_name or "")
        if site is None:
            self.unknown_sni.append(server_name)
            return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
        self._names[id(sslsock)] = server_name
        sslsock.context = site.context
        return None

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        tls = self.default.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        try:
            tls.do_handshake()
        except (ssl.SSLError, OSError) as err:
            name = self._names.pop(id(tls), None)
            if name in self.sites:
                with self.lock:
                    self.sites[name].failures.append(str(err))
            tls.close()
            return
        name = self._names.pop(id(tls))
        site = self.sites[name]
        with self.lock:
            site.handshakes.append(tls.selected_alpn_protocol() or "")
        if site.backend is None:
            tls.close()
            return
        backend = socket.create_connection(site.backend, timeout=10)
        tls.settimeout(None)
        backend.settimeout(None)
        with self.lock:
            self._open.update((tls, backend))
        threading.Thread(target=self._pump, args=(backend, tls, None), daemon=True).start()
        self._pump(tls, backend, site)

    def _pump(self, src: socket.socket, dst: socket.socket, site: Site | None) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if site is not None:
                    with self.lock:
                        site.request_bytes += len(data)
                dst.sendall(data)
        except (OSError, ssl.SSLError):
            pass
        finally:
            for s in (src, dst):
                _close(s)
                with self.lock:
                    self._open.discard(s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.listener.close()
        with self.lock:
            open_ = list(self._open)
        for s in open_:
            _close(s)


def _close(s: socket.socket) -> None:
    """Close a socket another thread may be reading (shutdown wakes it)."""
    try:
        s.shutdown(socket.SHUT_RDWR)
    except (OSError, ValueError):
        pass
    try:
        s.close()
    except OSError:
        pass
