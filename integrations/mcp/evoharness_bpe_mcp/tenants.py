"""Which tenant an HTTP request speaks for: bearer tokens the operator maps to namespaces.

The namespace of a session is never taken from tool arguments. Over stdio the operator fixes
it with ``--namespace``; over HTTP each request presents a token (``Authorization: Bearer …``
by default) that a tenant file maps to a namespace::

    {"tokens": {"s3cr3t-acme": ["acme", "crm-agent"], "s3cr3t-globex": ["globex"]}}
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from evoharness_bpe.exceptions import UserError
from evoharness_bpe.stores.base import Namespace, validate_namespace

__all__ = ["TenantMap", "TenantError"]


class TenantError(UserError):
    """A request presented no token, or one the operator did not map to a tenant."""


class TenantMap:
    """Tokens to namespaces, compared in constant time."""

    def __init__(self, tokens: Mapping[str, Sequence[str]], *, header: str = "authorization") -> None:
        if not tokens:
            raise UserError("a tenant map needs at least one token")
        self.header = header.lower()
        self._tokens: dict[str, Namespace] = {}
        for token, namespace in tokens.items():
            if not isinstance(token, str) or len(token) < 8:
                raise UserError("tenant tokens must be strings of at least 8 characters")
            self._tokens[token] = validate_namespace(namespace)

    @classmethod
    def load(cls, path: str | Path, *, header: str = "authorization") -> TenantMap:
        """Read a JSON tenant file: ``{"tokens": {"TOKEN": ["tenant", "agent"], ...}}``."""
        try:
            data = json.loads(Path(path).read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise UserError(f"cannot read the tenant file {path}: {exc}") from exc
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, dict):
            raise UserError(f'the tenant file {path} must hold {{"tokens": {{"TOKEN": ["tenant", ...]}}}}')
        return cls(tokens, header=header)

    def resolve(self, headers: Mapping[str, str]) -> Namespace:
        """The namespace of the token in `headers`; `TenantError` when it is missing or unknown."""
        raw = next((v for k, v in headers.items() if k.lower() == self.header), None)
        if not raw:
            raise TenantError(f"no tenant token: send the {self.header!r} header")
        token = raw.strip()
        if self.header == "authorization":
            scheme, _, token = token.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise TenantError("the authorization header must be 'Bearer TOKEN'")
            token = token.strip()
        for known, namespace in self._tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                return namespace
        raise TenantError("unknown tenant token")
