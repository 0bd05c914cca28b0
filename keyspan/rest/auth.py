"""Bearer-token guard of the driver's API: every call that changes a job (savepoint, stop, rescale)
needs ``Authorization: Bearer <token>``; read-only calls are open when the API listens on loopback.

The token is the configured ``rest_token``, else one generated per workdir into ``<workdir>/api-token``
(owner-only permissions), which the CLI on the same machine reads.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets

from fastapi import HTTPException, Request

TOKEN_FILE = "api-token"


def token_path(workdir: str) -> str:
    return os.path.join(os.path.abspath(workdir), TOKEN_FILE)


def read_token(workdir: str, configured: str | None = None) -> str | None:
    """The token a client sends: the configured one, else the workdir's file (None if neither exists)."""
    if configured:
        return configured
    try:
        with open(token_path(workdir)) as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return None


def ensure_token(workdir: str, configured: str | None = None) -> str:
    """The driver's token: configured, or read from / generated into the workdir's token file."""
    existing = read_token(workdir, configured)
    if existing:
        return existing
    path = token_path(workdir)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    return token


def auth_headers(workdir: str, configured: str | None = None) -> dict:
    token = read_token(workdir, configured)
    return {"Authorization": f"Bearer {token}"} if token else {}


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class TokenGuard:
    """FastAPI dependencies: ``require`` for mutating calls, ``read`` for the others."""

    def __init__(self, token: str, open_reads: bool):
        self.token = token
        self.open_reads = open_reads

    def _check(self, request: Request) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
            raise HTTPException(401, "this call needs the job's API token: send 'Authorization: Bearer <token>' "
                                     "(the token is in <workdir>/api-token, or set rest_token / KEYSPAN_REST_TOKEN)",
                                headers={"WWW-Authenticate": "Bearer"})

    def require(self, request: Request) -> None:
        self._check(request)

    def read(self, request: Request) -> None:
        if not self.open_reads:
            self._check(request)
