"""Tenant secrets: named values (API keys, tokens) for sandboxes."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from .client import Client, default_client, quote

__all__ = ["Secret"]


class Secret:
    """A tenant's secret, as the API describes it: never its value.

    Set one with ``Secret.set(name, value)``; a sandbox created with
    ``Sandbox.create(secrets=["NAME"])`` gets it in its service's and every
    command's environment (``secret_files=["NAME=/run/secrets/f"]``: as a
    file on a tmpfs). Setting it again rotates it: commands see the new value
    at once, the service and files at the sandbox's next start.

    Attributes: ``name``, ``created_at``, ``updated_at``, ``used_by`` (names
    of the sandboxes that reference it); ``raw`` is the JSON.
    """

    def __init__(self, client: Client, data: Dict[str, Any]) -> None:
        self._client = client
        self.raw = data

    name = property(lambda self: self.raw.get("name", ""), doc="The secret's name (an environment variable name).")
    created_at = property(lambda self: self.raw.get("created_at", ""))
    updated_at = property(lambda self: self.raw.get("updated_at", ""), doc="When it was last set.")
    used_by = property(lambda self: list(self.raw.get("used_by") or []), doc="Names of the sandboxes that reference it.")

    def __repr__(self) -> str:
        return "Secret(name=%r, used_by=%r)" % (self.name, self.used_by)

    @classmethod
    def set(cls, name: str, value: str, client: Optional[Client] = None) -> "Secret":
        """Create the secret ``name`` or replace its value (UTF-8 text
        without NUL bytes, up to 64 KiB). The value is stored encrypted and
        never returned."""
        c = default_client(client)
        return cls(c, c.call("PUT", "/v1/secrets/" + quote(name), body={"value": value}))

    @classmethod
    def list(cls, client: Optional[Client] = None) -> List["Secret"]:
        """The tenant's secrets by name (names, times and users; no values)."""
        c = default_client(client)
        return [cls(c, d) for d in c.list_all("/v1/secrets")]

    @classmethod
    def delete(cls, name: str, client: Optional[Client] = None) -> None:
        """Delete the secret ``name``. Raises :class:`~stead.ConflictError`,
        naming them, while a sandbox (a soft-deleted one included)
        references it."""
        c = default_client(client)
        c.call("DELETE", "/v1/secrets/" + quote(name))
