"""Structured state of a sandbox kept by the daemon: tasks
(``sb.tasks``), the observation log (``sb.observations``) and key-value
entries (``sb.kv``)."""

from __future__ import annotations

import datetime as _dt
import json
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Union

from .client import quote
from .models import KVEntry, Observation, Task

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox

__all__ = ["Tasks", "Observations", "KV", "TASK_STATES"]

#: Task states. A task is created open and moves open → in_progress →
#: done | failed | cancelled; a finished task may be reopened (→ open).
TASK_STATES = ("open", "in_progress", "done", "failed", "cancelled")

#: Page size used when a list call pages through everything.
_PAGE = 1000


def _rfc3339(v: Union[str, _dt.datetime]) -> str:
    """An RFC 3339 time from a string (as is) or a datetime (naive: UTC)."""
    if isinstance(v, str):
        return v
    if isinstance(v, _dt.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=_dt.timezone.utc)
        s = v.isoformat()
        return s[:-6] + "Z" if s.endswith("+00:00") else s
    raise TypeError("created_after is an RFC 3339 string or a datetime, got %r" % (v,))


def _if_match(if_version: Optional[int]) -> Dict[str, str]:
    return {"If-Match": '"%d"' % if_version} if if_version is not None else {}


class Tasks:
    """``sb.tasks``: units of an agent's work, kept outside the sandbox.

    A task has an id, a state (see :data:`TASK_STATES`) and a JSON payload.
    An illegal state move, or an ``if_state`` the task is not in, raises
    :class:`~stead.ConflictError` and changes nothing."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def _path(self, id: str = "", suffix: str = "") -> str:
        p = self._sb._path("/tasks")
        if id:
            p += "/" + quote(id)
        return p + suffix

    def add(self, id: Optional[str] = None, payload: Any = None) -> Task:
        """Create an open task (``id`` empty: a generated ``task-...``); a
        taken id raises :class:`~stead.ConflictError`."""
        body: Dict[str, Any] = {}
        if id:
            body["id"] = id
        if payload is not None:
            body["payload"] = payload
        return Task.from_json(self._sb.client.call("POST", self._path(), body=body))

    def get(self, id: str) -> Task:
        """Read a task."""
        return Task.from_json(self._sb.client.call("GET", self._path(id)))

    def list(
        self,
        state: Union[None, str, Sequence[str]] = None,
        open: Optional[bool] = None,
        created_after: Union[None, str, _dt.datetime] = None,
    ) -> List[Task]:
        """The sandbox's tasks by creation time, then id (every page).

        Args:
            state: only tasks in this state, or in any of these states.
            open: only open tasks (open or in_progress); combines with
                ``state`` as an intersection.
            created_after: only tasks created strictly after this time (an
                RFC 3339 string or a datetime; a naive one is UTC).
        """
        states = [state] if isinstance(state, str) else list(state or [])
        q: Dict[str, Any] = {
            "state": ",".join(states) or None,
            "open": True if open else None,
            "created_after": _rfc3339(created_after) if created_after is not None else None,
            "limit": _PAGE,
        }
        out: List[Task] = []
        while True:
            page = self._sb.client.call("GET", self._path(), q) or {}
            out.extend(Task.from_json(t) for t in page.get("items") or [])
            nxt = page.get("next") or ""
            if not page.get("more") or not nxt:
                return out
            q["after"] = nxt

    def set_state(self, id: str, state: str, if_state: Optional[str] = None, payload: Any = None) -> Task:
        """Move a task to ``state``. With ``if_state``, only if it is in
        that state now; ``payload``, when given, replaces the task's payload
        in the same transaction. Raises :class:`~stead.ConflictError` on an
        illegal move or a mismatched ``if_state``."""
        body: Dict[str, Any] = {"state": state}
        if if_state:
            body["if_state"] = if_state
        if payload is not None:
            body["payload"] = payload
        return Task.from_json(self._sb.client.call("POST", self._path(id, "/state"), body=body))


class Observations:
    """``sb.observations``: the sandbox's append-only observation log."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def _path(self) -> str:
        return self._sb._path("/observations")

    def add(self, kind: str, payload: Any = None) -> Observation:
        """Append an observation of ``kind`` (e.g. ``"test_result"``);
        returns it with its ``seq``, time and principal."""
        body: Dict[str, Any] = {"kind": kind}
        if payload is not None:
            body["payload"] = payload
        return Observation.from_json(self._sb.client.call("POST", self._path(), body=body))

    def list(self, after: int = 0, kind: Optional[str] = None) -> List[Observation]:
        """Every observation with seq > ``after`` (of ``kind`` only, when
        given), by seq."""
        out: List[Observation] = []
        while True:
            q = {"after": after or None, "kind": kind or None, "limit": _PAGE}
            page = self._sb.client.call("GET", self._path(), q) or {}
            out.extend(Observation.from_json(o) for o in page.get("items") or [])
            nxt = page.get("next", after)
            if not page.get("more") or nxt <= after:
                return out
            after = nxt


class KV:
    """``sb.kv``: JSON values under keys, versioned, with optimistic
    concurrency. Keys are letters, digits and ``. _ : @ + = , / -``."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def _path(self, key: str = "") -> str:
        p = self._sb._path("/kv")
        if key:
            p += "/" + quote(key)
        return p

    def put(self, key: str, value: Any, if_version: Optional[int] = None) -> KVEntry:
        """Store ``value`` (anything JSON-serialisable) under ``key``. With
        ``if_version``, only if the entry is at that version (0: the key
        must not exist), else :class:`~stead.ConflictError` and nothing
        changes. Returns the entry with its new version."""
        resp = self._sb.client.request("PUT", self._path(key), body=json.dumps(value).encode("utf-8"),
                                       content_type="application/json", headers=_if_match(if_version))
        return KVEntry.from_json(resp.json() or {})

    def get(self, key: str) -> KVEntry:
        """Read the entry under ``key`` (:class:`~stead.NotFoundError` if none)."""
        return KVEntry.from_json(self._sb.client.call("GET", self._path(key)))

    def list(self, prefix: Optional[str] = None) -> List[KVEntry]:
        """Every entry (under ``prefix``, literally, when given), by key."""
        q: Dict[str, Any] = {"prefix": prefix or None, "limit": _PAGE}
        out: List[KVEntry] = []
        while True:
            page = self._sb.client.call("GET", self._path(), q) or {}
            out.extend(KVEntry.from_json(e) for e in page.get("items") or [])
            nxt = page.get("next") or ""
            if not page.get("more") or not nxt:
                return out
            q["after"] = nxt

    def delete(self, key: str, if_version: Optional[int] = None) -> None:
        """Delete the entry under ``key``; ``if_version`` works as for :meth:`put`."""
        self._sb.client.request("DELETE", self._path(key), headers=_if_match(if_version)).read()
