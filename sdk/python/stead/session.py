"""The session log of a sandbox (``sb.session``): threads, runs and their
append-only events, with idempotent appends, live following and resume."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Mapping, Optional, Union

from .client import quote
from .errors import SteadError
from .models import Event, EventPage, Run, RunResume, Thread

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox

__all__ = ["Session", "EVENT_TYPES"]

#: The event types a run accepts.
EVENT_TYPES = (
    "model_call",
    "tool_intent",
    "tool_result",
    "error",
    "approval_requested",
    "approval_granted",
    "approval_denied",
    "checkpoint",
    "compaction",
    "note",
)

ThreadRef = Union[str, Thread]
RunRef = Union[str, Run]


def _ref(v: Any) -> str:
    """The id of a Thread / Run object, or the string itself."""
    if isinstance(v, (Thread, Run)):
        return v.id
    if not isinstance(v, str) or not v:
        raise TypeError("want an id string or a Thread/Run, got %r" % (v,))
    return v


def _event_body(
    type: Optional[str] = None,
    payload: Any = None,
    idempotency_key: Optional[str] = None,
    intent: Optional[int] = None,
    model_session: Optional[str] = None,
) -> Dict[str, Any]:
    """An AppendEvent as the API takes it (unset fields left out, as the Go
    client's omitempty does)."""
    e: Dict[str, Any] = {}
    if type:
        e["type"] = type
    if payload is not None:
        e["payload"] = payload
    if idempotency_key:
        e["idempotency_key"] = idempotency_key
    if intent:
        e["intent"] = int(intent)
    if model_session:
        e["model_session"] = model_session
    return e


def _batch_item(ev: Any) -> Dict[str, Any]:
    if isinstance(ev, Mapping):
        unknown = set(ev) - {"type", "payload", "idempotency_key", "intent", "model_session"}
        if unknown:
            raise TypeError("event has unknown fields %s" % sorted(unknown))
        return _event_body(**ev)
    if isinstance(ev, (tuple, list)) and 1 <= len(ev) <= 2:
        return _event_body(*ev)
    raise TypeError("an event is a dict (type, payload, idempotency_key, intent, model_session) "
                    "or a (type, payload) tuple, got %r" % (ev,))


class Session:
    """``sb.session``: the sandbox's session log.

    A *thread* is a named conversation of an agent; each *run* of it is an
    append-only log of events (model_call, tool_intent, tool_result, error,
    approval_*, checkpoint, compaction, note) numbered 1, 2, 3 ... (``seq``).
    Threads and runs may be given as ids (or a thread by name) or as the
    :class:`~stead.Thread` / :class:`~stead.Run` objects these methods
    return::

        th = sb.session.create_thread("main")
        run = sb.session.start_run(th)
        i = sb.session.append(run, "tool_intent", {"tool": "send_email"}, idempotency_key="k1")
        sb.session.append(run, "tool_result", {"ok": True}, intent=i.seq)
        r = sb.session.resume(run)       # r.safe_point, r.in_doubt
        sb.session.end(run)
    """

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def _path(self, suffix: str = "") -> str:
        return self._sb._path("/threads" + suffix)

    def _run_path(self, run: RunRef, what: str) -> str:
        return self._path("/runs/" + quote(_ref(run)) + "/" + what)

    # -- threads ------------------------------------------------------------

    def create_thread(self, name: str, retention: Optional[Mapping[str, int]] = None) -> Thread:
        """Create a thread. ``retention`` is ``{"keep_last": N,
        "keep_within_seconds": S}`` (either or both): an event is deleted
        only when no rule keeps it; a run's newest event, newest checkpoint
        and in-doubt intents are always kept. A taken name raises
        :class:`~stead.ConflictError`."""
        body: Dict[str, Any] = {"name": name}
        if retention:
            body["retention"] = dict(retention)
        return Thread.from_json(self._sb.client.call("POST", self._path(), body=body))

    def threads(self) -> List[Thread]:
        """The sandbox's threads, oldest first."""
        return [Thread.from_json(d) for d in self._sb.client.list_all(self._path())]

    def set_retention(self, thread: ThreadRef, keep_last: Optional[int] = None,
                      keep_within_seconds: Optional[int] = None) -> Thread:
        """Replace a thread's retention (applied from the next append or prune)."""
        body: Dict[str, Any] = {}
        if keep_last:
            body["keep_last"] = keep_last
        if keep_within_seconds:
            body["keep_within_seconds"] = keep_within_seconds
        return Thread.from_json(
            self._sb.client.call("PUT", self._path("/" + quote(_ref(thread)) + "/retention"), body=body))

    def prune(self, thread: ThreadRef) -> int:
        """Apply a thread's retention to all its runs now; returns how many
        events were deleted."""
        res = self._sb.client.call("POST", self._path("/" + quote(_ref(thread)) + "/prune"))
        return (res or {}).get("deleted", 0)

    # -- runs -------------------------------------------------------------------

    def start_run(self, thread: ThreadRef) -> Run:
        """Start a new run of a thread (id, name or :class:`~stead.Thread`)."""
        return Run.from_json(self._sb.client.call("POST", self._path("/" + quote(_ref(thread)) + "/runs")))

    def runs(self, thread: ThreadRef) -> List[Run]:
        """A thread's runs, oldest first."""
        return [Run.from_json(d) for d in
                self._sb.client.list_all(self._path("/" + quote(_ref(thread)) + "/runs"))]

    def end(self, run: RunRef, status: Optional[str] = None) -> Run:
        """End a run with ``status`` (completed by default; or failed,
        canceled, interrupted). It takes no more events; ending an ended run
        raises :class:`~stead.ConflictError`."""
        body: Dict[str, Any] = {}
        if status:
            body["status"] = status
        return Run.from_json(self._sb.client.call("POST", self._run_path(run, "end"), body=body))

    def resume(self, run: RunRef) -> RunResume:
        """Where a resuming harness stands: ``.safe_point`` (the run's last
        checkpoint event, else its last event; None when it has none),
        ``.in_doubt`` (tool intents without a tool_result: their side
        effects may or may not have happened), ``.run`` and
        ``.model_sessions``."""
        return RunResume.from_json(self._sb.client.call("GET", self._run_path(run, "resume")) or {})

    # -- events -------------------------------------------------------------

    def append(
        self,
        run: RunRef,
        type: str,
        payload: Any = None,
        idempotency_key: Optional[str] = None,
        intent: Optional[int] = None,
        model_session: Optional[str] = None,
    ) -> Event:
        """Append one event to a run and return it as stored, with its
        ``seq``.

        Args:
            type: the event type (see :data:`EVENT_TYPES`).
            payload: any JSON-serialisable value (at most 256 KiB).
            idempotency_key: makes the append safe to retry: if the run
                already holds an event with this key, nothing is stored and
                that event is returned (a different event under the same
                key raises :class:`~stead.ConflictError`).
            intent: for a tool_result, the seq of the tool_intent it answers.
            model_session: tags the event with a model session id.

        Appending to an ended run raises :class:`~stead.ConflictError`.
        """
        body = _event_body(type, payload, idempotency_key, intent, model_session)
        res = self._sb.client.call("POST", self._run_path(run, "events"), body=body) or {}
        evs = res.get("events") or []
        if len(evs) != 1:
            raise SteadError("append event: the daemon returned %d events for one" % len(evs))
        return Event.from_json(evs[0])

    def append_many(self, run: RunRef, events: Iterable[Any]) -> List[Event]:
        """Append a batch (at most 1000 events) in one transaction, all or
        nothing; returns the stored events in order. Each event is a dict
        with the keyword arguments of :meth:`append` (``type``,
        ``payload``, ``idempotency_key``, ``intent``, ``model_session``) or
        a ``(type, payload)`` tuple."""
        batch = [_batch_item(e) for e in events]
        if not batch:
            return []
        res = self._sb.client.call("POST", self._run_path(run, "events"), body={"events": batch}) or {}
        return [Event.from_json(e) for e in res.get("events") or []]

    def events(self, run: RunRef, after: int = 0, limit: Optional[int] = None) -> EventPage:
        """One page of a run's events with seq > ``after`` (at most
        ``limit``; default 100, at most 1000). Pass the page's ``next`` as
        ``after`` to read on; iterating the page iterates its events."""
        q = {"after": after or None, "limit": limit or None}
        return EventPage.from_json(self._sb.client.call("GET", self._run_path(run, "events"), q) or {})

    def all_events(self, run: RunRef, after: int = 0) -> List[Event]:
        """Every event of a run with seq > ``after``, paging through."""
        out: List[Event] = []
        while True:
            page = self.events(run, after=after, limit=1000)
            out.extend(page.events)
            if not page.more or page.next <= after:
                return out
            after = page.next

    # ``read`` is the name the stub had.
    read = events

    def follow(self, run: RunRef, after: int = 0, timeout: float = 60.0) -> Iterator[Event]:
        """Yield a run's events with seq > ``after`` as they are appended
        (Server-Sent Events), starting with those already stored. The
        generator ends when the run has ended and every event was yielded
        (the stream's ``end`` message); break out of the loop (or close the
        generator) to stop earlier.

        ``timeout`` is the socket timeout in seconds; the daemon sends a
        keep-alive every 15 s. Raises :class:`~stead.SteadError` if the
        daemon reports an error or the stream is cut before the run ended.
        """
        rid = _ref(run)
        c = self._sb.client
        resp = c.request("GET", self._run_path(rid, "events"), {"follow": True, "after": after or None},
                         accept="text/event-stream", timeout=timeout)
        with resp:
            for name, data in c.events(resp):
                if name == "message":
                    yield Event.from_json(json.loads(data))
                elif name == "end":
                    return
                elif name == "error":
                    try:
                        msg = json.loads(data).get("error") or data
                    except ValueError:
                        msg = data
                    raise SteadError("follow events of run %s: %s" % (rid, msg))
        raise SteadError("follow events of run %s: the stream ended before the run did" % rid)
