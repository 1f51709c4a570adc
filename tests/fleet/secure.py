"""What a fleet over TLS with a login per host needs, made offline in the test (SPEC §12).

* A CA and a server certificate signed by it (``openssl``, an EC P-256 key: quick),
  for the address the test's server listens on.
* A user **nkey** per host: the seed stays with the host (``nkey = …``), the public
  key goes into the server's ``authorization { users = [...] }``.
* **creds** per host (decentralised JWT auth, no account server, no ``nsc``): an
  operator, an account with JetStream and a user JWT per host, each signed with the
  issuer's nkey as NATS does (``alg: ed25519-nkey``); the server trusts the operator
  and finds the account in ``resolver: MEMORY`` + ``resolver_preload``. The creds file
  is the user JWT and the user's seed, in the layout ``nsc`` writes.

:class:`Access` is one server's side of it: the ``nats.conf`` text, the ``[fleet]``
keys of a host (``url`` scheme, ``tls_ca``, ``nkey`` or ``creds``) and the options
for a test's own ``nats.connect``. docs/FLEET.md ("TLS and a key per host") is
written from what this module and tests/fleet/test_tls_auth.py do.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import ssl
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAVOURS = ("plain", "tls-nkey", "tls-creds")
"""The server flavours the fleet suite runs against: no TLS and no login; TLS with a
user nkey per host; TLS with a creds file (JWT) per host."""


def have_openssl() -> bool:
    return shutil.which("openssl") is not None


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=120)


def make_ca(folder: Path, name: str) -> tuple[Path, Path]:
    """A CA: its certificate and key."""
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "1", "-keyout", str(key), "-out", str(cert), "-subj", f"/CN={name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    return cert, key


def make_server_cert(folder: Path, ca: tuple[Path, Path], ip: str) -> tuple[Path, Path]:
    """A server certificate for ``ip`` (and 127.0.0.1, localhost: a relay on this
    machine's loopback) signed by ``ca``."""
    key, csr, cert = folder / "server.key", folder / "server.csr", folder / "server.pem"
    ext = folder / "server.ext"
    names = ",".join(dict.fromkeys([f"IP:{ip}", "IP:127.0.0.1", "DNS:localhost"]))
    ext.write_text(f"subjectAltName={names}\nextendedKeyUsage=serverAuth\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(key), "-out", str(csr), "-subj", "/CN=localhost")  # fmt: skip
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
            "-CAcreateserial", "-days", "1", "-out", str(cert), "-extfile", str(ext))  # fmt: skip
    return cert, key


# --- nkeys and JWTs -----------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    """One nkey: its seed (secret) and public key (``U…``, ``A…``, ``O…``)."""

    seed: bytes
    public: str

    def sign(self, data: bytes) -> bytes:
        import nkeys

        kp = nkeys.from_seed(bytearray(self.seed))
        signed: bytes = kp.sign(data)
        return signed


def new_key(kind: str) -> Key:
    """A fresh nkey of ``kind`` (``user``, ``account``, ``operator``)."""
    import nkeys

    prefix = {
        "user": nkeys.PREFIX_BYTE_USER,
        "account": nkeys.PREFIX_BYTE_ACCOUNT,
        "operator": nkeys.PREFIX_BYTE_OPERATOR,
    }[kind]
    seed = bytes(nkeys.encode_seed(os.urandom(32), prefix))
    public = nkeys.from_seed(bytearray(seed)).public_key.decode()
    return Key(seed, str(public))


def write_seed(path: Path, key: Key) -> Path:
    path.write_bytes(key.seed + b"\n")
    path.chmod(0o600)
    return path


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def jwt(issuer: Key, subject: str, name: str, nats: dict[str, Any]) -> str:
    """A NATS JWT (v2) for ``subject``, signed by ``issuer``'s nkey."""
    claims: dict[str, Any] = {
        "iat": int(time.time()),
        "iss": issuer.public,
        "name": name,
        "sub": subject,
        "nats": {**nats, "version": 2},
    }
    digest = hashlib.new("sha512_256", json.dumps(claims, sort_keys=True).encode()).digest()
    claims["jti"] = base64.b32encode(digest).decode().rstrip("=")
    head = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = _b64(json.dumps(claims).encode())
    return f"{head}.{body}.{_b64(issuer.sign(f'{head}.{body}'.encode()))}"


UNLIMITED = {"subs": -1, "data": -1, "payload": -1}
ACCOUNT_LIMITS = {
    **UNLIMITED,
    "imports": -1, "exports": -1, "wildcards": True, "conn": -1, "leaf": -1,
    "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1,
}  # fmt: skip
"""An account with JetStream (disk and memory) and no other limit."""


def creds_text(user_jwt: str, user: Key) -> str:
    """A creds file as ``nsc`` writes it: the user's JWT, then its seed."""
    return (
        "-----BEGIN NATS USER JWT-----\n"
        f"{user_jwt}\n"
        "------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n"
        "NKEY Seed printed below can be used to sign and prove identity.\n"
        "NKEYs are sensitive and should be treated as secrets.\n\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{user.seed.decode()}\n"
        "------END USER NKEY SEED------\n\n"
        "*************************************************************\n"
    )


@dataclass
class Operator:
    """An operator, the account the hosts use and the system account JetStream needs,
    for ``resolver: MEMORY``."""

    operator: Key = field(default_factory=lambda: new_key("operator"))
    account: Key = field(default_factory=lambda: new_key("account"))
    system: Key = field(default_factory=lambda: new_key("account"))

    def server_config(self) -> str:
        op = jwt(self.operator, self.operator.public, "mesh-op",
                 {"type": "operator", "system_account": self.system.public})  # fmt: skip
        acc = jwt(self.operator, self.account.public, "mesh",
                  {"type": "account", "limits": ACCOUNT_LIMITS})  # fmt: skip
        sys_acc = jwt(self.operator, self.system.public, "SYS",
                      {"type": "account", "limits": {**UNLIMITED, "conn": -1}})  # fmt: skip
        return (
            f"operator: {op}\n"
            f"system_account: {self.system.public}\n"
            "resolver: MEMORY\n"
            "resolver_preload: {\n"
            f"  {self.account.public}: {acc}\n"
            f"  {self.system.public}: {sys_acc}\n"
            "}\n"
        )

    def creds(self, path: Path, name: str) -> Path:
        """A creds file for a new user ``name`` of the account, 0600."""
        user = new_key("user")
        token = jwt(self.account, user.public, name,
                    {"type": "user", "pub": {}, "sub": {}, **UNLIMITED})  # fmt: skip
        path.write_text(creds_text(token, user))
        path.chmod(0o600)
        return path


# --- one server's access ------------------------------------------------------------


@dataclass
class Access:
    """How one test server is reached: its flavour, its TLS files and its logins.

    ``plain`` needs nothing. ``tls-nkey`` and ``tls-creds`` make a CA, a server
    certificate for ``ip`` and, as hosts are added, a login of their own for each
    (:meth:`login`)."""

    flavour: str
    folder: Path
    ip: str = "127.0.0.1"
    ca: Path | None = None
    users: list[str] = field(default_factory=list)
    """Public keys of the nkey users the server admits (made up front: the server's
    config lists them when it starts)."""
    pool: int = 12
    """How many nkey users to make up front."""
    _keys: list[Key] = field(default_factory=list)
    operator: Operator | None = None
    _cert: tuple[Path, Path] | None = None
    _client: tuple[str, Path] | None = None

    def __post_init__(self) -> None:
        if self.flavour not in FLAVOURS:
            raise ValueError(f"fleet flavour {self.flavour!r}: one of {', '.join(FLAVOURS)}")
        if self.flavour == "plain":
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        ca = make_ca(self.folder, "mesh-ca")
        self.ca = ca[0]
        self._cert = make_server_cert(self.folder, ca, self.ip)
        if self.flavour == "tls-creds":
            self.operator = Operator()
        else:
            self._keys = [new_key("user") for _ in range(self.pool)]
            self.users = [k.public for k in self._keys]

    @property
    def scheme(self) -> str:
        return "nats" if self.flavour == "plain" else "tls"

    def server_config(self) -> str:
        """The ``nats.conf`` lines for this flavour (TLS, then who may log in)."""
        if self._cert is None:
            return ""
        cert, key = self._cert
        tls = f'tls {{\n  cert_file: "{cert}"\n  key_file: "{key}"\n}}\n'
        if self.operator is not None:
            return tls + self.operator.server_config()
        users = "".join(f'    {{ nkey: "{u}" }}\n' for u in self.users)
        return tls + "authorization {\n  users = [\n" + users + "  ]\n}\n"

    def login(self, name: str) -> tuple[str, Path] | None:
        """A login of its own for ``name``: (``"nkey"`` or ``"creds"``, its file, 0600)."""
        if self.flavour == "tls-nkey":
            if not self._keys:
                raise RuntimeError(f"all {self.pool} nkey users are taken: raise Access.pool")
            return "nkey", write_seed(self.folder / f"{name}.nk", self._keys.pop(0))
        if self.operator is not None:
            return "creds", self.operator.creds(self.folder / f"{name}.creds", name)
        return None

    def fleet_keys(self, name: str) -> str:
        """The ``[fleet]`` lines (besides ``url``) that give host ``name`` its own login."""
        if self.ca is None:
            return ""
        got = self.login(name)
        assert got is not None
        kind, path = got
        return f'tls_ca = "{self.ca}"\n{kind} = "{path}"\n'

    def client_options(self) -> dict[str, Any]:
        """``nats.connect`` options for the test's own client (one login of its own,
        made at the first call and used by every later one)."""
        if self.ca is None:
            return {}
        if self._client is None:
            self._client = self.login("test-client")
        assert self._client is not None
        kind, path = self._client
        opts: dict[str, Any] = {"tls": ssl.create_default_context(cafile=str(self.ca))}
        opts["nkeys_seed" if kind == "nkey" else "user_credentials"] = str(path)
        return opts
