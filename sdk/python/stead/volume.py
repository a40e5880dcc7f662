"""Persistent volumes: data independent of every sandbox."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from .client import Client, default_client, quote

__all__ = ["Volume"]


class _hybrid:
    """A method callable on the class with an id (``Volume.delete("data")``)
    or on an instance (``vol.delete()``)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.__doc__ = fn.__doc__

    def __get__(self, obj: Any, cls: Any) -> Any:
        fn = self.fn
        if obj is None:
            def call(id_or_name: str, *args: Any, client: Optional[Client] = None, **kwargs: Any) -> Any:
                c = default_client(client)
                return fn(cls(c, {"id": id_or_name}), *args, **kwargs)
        else:
            def call(*args: Any, **kwargs: Any) -> Any:
                return fn(obj, *args, **kwargs)
        call.__doc__ = fn.__doc__
        call.__name__ = fn.__name__
        return call


class Volume:
    """A persistent volume, attachable to many sandboxes at once (mount it
    with ``Sandbox.create(volumes=["NAME:/data"])``).

    Attributes mirror the API: ``id`` (vol-...), ``name``, ``size_bytes``
    (quota; 0 = none), ``used_bytes``, ``state`` (available or deleted),
    ``attached_to`` (sandbox ids), ``created_at``; ``raw`` is the JSON.
    """

    def __init__(self, client: Client, data: Dict[str, Any]) -> None:
        self._client = client
        self.raw = data

    id = property(lambda self: self.raw.get("id", ""), doc="The volume id (vol-...).")
    name = property(lambda self: self.raw.get("name", ""), doc="The volume's name, unique in its tenant.")
    state = property(lambda self: self.raw.get("state", ""), doc="available or deleted.")
    size_bytes = property(lambda self: self.raw.get("size_bytes", 0), doc="Quota in bytes (0: no limit).")
    used_bytes = property(lambda self: self.raw.get("used_bytes", 0), doc="Bytes in use.")
    attached_to = property(lambda self: list(self.raw.get("attached_to") or []), doc="Ids of the sandboxes that mount it.")
    created_at = property(lambda self: self.raw.get("created_at", ""))

    def __repr__(self) -> str:
        return "Volume(id=%r, name=%r, state=%r)" % (self.id, self.name, self.state)

    def _path(self, suffix: str = "") -> str:
        return "/v1/volumes/" + quote(self.id or self.name) + suffix

    @classmethod
    def create(cls, name: str, size_bytes: Optional[int] = None, client: Optional[Client] = None) -> "Volume":
        """Create an empty volume; ``size_bytes`` is its quota (default 10 GiB)."""
        c = default_client(client)
        body: Dict[str, Any] = {"name": name}
        if size_bytes:
            body["size_bytes"] = size_bytes
        return cls(c, c.call("POST", "/v1/volumes", body=body))

    @classmethod
    def get(cls, id_or_name: str, client: Optional[Client] = None) -> "Volume":
        """Describe a volume by id or name."""
        c = default_client(client)
        return cls(c, c.call("GET", "/v1/volumes/" + quote(id_or_name)))

    @classmethod
    def list(cls, client: Optional[Client] = None, all: bool = False) -> List["Volume"]:
        """The tenant's volumes; ``all`` includes soft-deleted ones."""
        c = default_client(client)
        return [cls(c, d) for d in c.list_all("/v1/volumes", {"all": True if all else None})]

    def refresh(self) -> "Volume":
        """Re-read the volume."""
        self.raw = self._client.call("GET", self._path())
        return self

    @_hybrid
    def delete(self, purge: bool = False) -> "Volume":
        """Soft-delete (recoverable with ``undelete`` until ``purge_at``), or
        with ``purge`` destroy the data for good. Refused
        (:class:`~stead.ConflictError`) while a sandbox uses it. Call it as
        ``vol.delete()`` or ``Volume.delete("name", client=c)``."""
        self.raw = self._client.call("DELETE", self._path(), {"purge": True if purge else None})
        return self

    @_hybrid
    def undelete(self) -> "Volume":
        """Bring back a soft-deleted volume with its data."""
        self.raw = self._client.call("POST", self._path("/undelete"))
        return self
