"""Tenants and API keys: roles, scopes, rotation and revocation."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from .client import Client, default_client, quote

__all__ = ["Tenant", "APIKey", "ROLES"]

#: The roles of an API key, most powerful first: ``admin`` (everything,
#: every tenant), ``tenant-admin`` (everything in its tenant, its keys
#: included), ``tenant-user`` (sandboxes and volumes, no keys) and
#: ``read-only`` (GET only, no terminal).
ROLES = ("admin", "tenant-admin", "tenant-user", "read-only")


class Tenant:
    """A tenant: the owner of sandboxes, volumes, templates and keys, which
    sees nothing of another tenant's. Every call needs an admin key.

    Attributes mirror the API: ``id``, ``name``, ``state`` (active or
    suspended), ``created_at``, ``suspended_at``; ``raw`` is the JSON.
    Give a new tenant its first key with
    ``APIKey.create("ops", role="tenant-admin", client=admin.with_tenant(id))``.
    """

    def __init__(self, client: Client, data: Dict[str, Any]) -> None:
        self._client = client
        self.raw = data

    id = property(lambda self: self.raw.get("id", ""), doc="The tenant id.")
    name = property(lambda self: self.raw.get("name", ""), doc="The display name.")
    state = property(lambda self: self.raw.get("state", ""), doc="active or suspended.")
    created_at = property(lambda self: self.raw.get("created_at", ""))
    suspended_at = property(lambda self: self.raw.get("suspended_at"))

    def __repr__(self) -> str:
        return "Tenant(id=%r, state=%r)" % (self.id, self.state)

    def _path(self, suffix: str = "") -> str:
        return "/v1/tenants/" + quote(self.id) + suffix

    @classmethod
    def create(cls, id: str, name: Optional[str] = None, client: Optional[Client] = None) -> "Tenant":
        """Create a tenant (id: lowercase letters, digits, inner dashes)."""
        c = default_client(client)
        body: Dict[str, Any] = {"id": id}
        if name:
            body["name"] = name
        return cls(c, c.call("POST", "/v1/tenants", body=body))

    @classmethod
    def get(cls, id: str, client: Optional[Client] = None) -> "Tenant":
        """Describe one tenant."""
        c = default_client(client)
        return cls(c, c.call("GET", "/v1/tenants/" + quote(id)))

    @classmethod
    def list(cls, client: Optional[Client] = None) -> List["Tenant"]:
        """Every tenant."""
        c = default_client(client)
        return [cls(c, d) for d in c.list_all("/v1/tenants")]

    def suspend(self) -> "Tenant":
        """Refuse the tenant's keys (403) and stop its running sandboxes."""
        self.raw = self._client.call("POST", self._path("/suspend"))
        return self

    def unsuspend(self) -> "Tenant":
        """Let the tenant's keys work again (its sandboxes stay stopped)."""
        self.raw = self._client.call("POST", self._path("/unsuspend"))
        return self

    def delete(self) -> Dict[str, Any]:
        """Delete the tenant with everything it owns and destroy its
        repository data keys (its pushed data can no longer be decrypted).
        Returns the deletion report (counts and erased_scopes). The default
        tenant cannot be deleted."""
        return self._client.call("DELETE", self._path())


class APIKey:
    """An API key of the client's tenant (or, for an admin client made
    with :meth:`Client.with_tenant`, of that tenant).

    Attributes mirror the API: ``id``, ``name``, ``role``, ``sandboxes``
    and ``labels`` (its scope), ``expires_at``, ``created_at``, and
    ``secret``, set only on a key just created or rotated: store it, it is
    never shown again.
    """

    def __init__(self, client: Client, data: Dict[str, Any]) -> None:
        self._client = client
        self.raw = data

    id = property(lambda self: self.raw.get("id", ""), doc="The key id (key-...).")
    name = property(lambda self: self.raw.get("name", ""))
    tenant = property(lambda self: self.raw.get("tenant", ""))
    role = property(lambda self: self.raw.get("role", ""), doc="One of ROLES.")
    sandboxes = property(lambda self: list(self.raw.get("sandboxes") or []), doc="Sandboxes the key is limited to.")
    labels = property(lambda self: dict(self.raw.get("labels") or {}), doc="Label selector the key is limited to.")
    expires_at = property(lambda self: self.raw.get("expires_at"))
    created_at = property(lambda self: self.raw.get("created_at", ""))
    secret = property(lambda self: self.raw.get("secret", ""), doc="The secret, after create or rotate only.")

    def __repr__(self) -> str:
        return "APIKey(id=%r, name=%r, role=%r)" % (self.id, self.name, self.role)

    @classmethod
    def create(
        cls,
        name: str,
        role: Optional[str] = None,
        sandboxes: Optional[Sequence[str]] = None,
        labels: Optional[Dict[str, str]] = None,
        expires_in: Optional[str] = None,
        client: Optional[Client] = None,
    ) -> "APIKey":
        """Create a key (role default tenant-user; at most the caller's own
        role). ``sandboxes`` (ids or names) or ``labels`` scope it;
        ``expires_in`` is a Go duration such as ``"720h"``."""
        c = default_client(client)
        body: Dict[str, Any] = {"name": name}
        if role:
            body["role"] = role
        if sandboxes:
            body["sandboxes"] = list(sandboxes)
        if labels:
            body["labels"] = dict(labels)
        if expires_in:
            body["expires_in"] = expires_in
        return cls(c, c.call("POST", "/v1/keys", body=body))

    @classmethod
    def list(cls, client: Optional[Client] = None) -> List["APIKey"]:
        """The tenant's keys, without secrets."""
        c = default_client(client)
        return [cls(c, d) for d in c.list_all("/v1/keys")]

    def rotate(self, overlap: Optional[str] = None) -> "APIKey":
        """Make the successor of this key (a new id and secret, same name,
        role and scope) and return it; this key's secret keeps working for
        ``overlap`` (default ``"24h"``; ``"0"`` ends it now)."""
        body: Dict[str, Any] = {}
        if overlap is not None:
            body["overlap"] = overlap
        return APIKey(self._client, self._client.call("POST", "/v1/keys/" + quote(self.id) + "/rotate", body=body))

    def revoke(self) -> None:
        """Delete the key: it stops working at once."""
        self._client.call("DELETE", "/v1/keys/" + quote(self.id))
