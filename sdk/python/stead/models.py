"""Plain result types of the stead SDK (built from the API's JSON)."""

from __future__ import annotations


import datetime
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional

__all__ = [
    "CommandResult",
    "SandboxInfo",
    "FileInfo",
    "Checkpoint",
    "CheckpointInfo",
    "Thread",
    "Run",
    "Event",
    "EventPage",
    "ModelSession",
    "RunResume",
    "OrientFile",
    "Orient",
    "Task",
    "Observation",
    "KVEntry",
    "NetworkPolicy",
    "NetworkInfo",
    "Port",
    "ExposedPort",
]


@dataclass
class CommandResult:
    """The outcome of ``sb.commands.run``.

    ``stdout`` and ``stderr`` are the output decoded as UTF-8 (invalid bytes
    replaced); ``stdout_bytes`` and ``stderr_bytes`` are the raw bytes. A
    background command has only ``pid`` and ``log_path`` (where its output
    goes inside the sandbox).
    """

    exit_code: int = 0
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""
    signal: str = ""
    pid: int = 0
    timed_out: bool = False
    truncated: bool = False
    log_path: str = ""

    @property
    def stdout(self) -> str:
        """stdout as text."""
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        """stderr as text."""
        return self.stderr_bytes.decode("utf-8", "replace")

    @property
    def ok(self) -> bool:
        """True when the command exited 0, not by a signal nor a timeout."""
        return self.exit_code == 0 and not self.signal and not self.timed_out

    @property
    def error(self) -> str:
        """What went wrong, as E2B's ``CommandResult.error``: ``""`` for a
        command that exited 0, else e.g. ``"exit status 3"``, ``"killed by
        SIGKILL"`` or ``"timed out"``."""
        if self.timed_out:
            return "timed out"
        if self.signal:
            return "killed by " + self.signal
        if self.exit_code != 0:
            return "exit status %d" % self.exit_code
        return ""


def _time(v: Any) -> Optional[datetime.datetime]:
    """An RFC 3339 time of the API as an aware datetime (None when absent)."""
    if not v or not isinstance(v, str):
        return None
    t = v
    if t.endswith("Z"):
        t = t[:-1] + "+00:00"
    frac = ""
    head, dot, rest = t.partition(".")
    if dot:  # fromisoformat of Python < 3.11 takes at most 6 fraction digits
        n = 0
        while n < len(rest) and rest[n].isdigit():
            n += 1
        digits = rest[:n]
        frac = "." + digits[:6]
        t = head + frac + rest[len(digits):]
    try:
        return datetime.datetime.fromisoformat(t)
    except ValueError:
        return None


def _seconds(v: Any) -> Optional[float]:
    """A Go duration string of the API ("15m0s", "90s", "1h30m", "0s") as
    seconds (None when absent or unreadable)."""
    if not isinstance(v, str) or not v:
        return None
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    total, num, i = 0.0, "", 0
    while i < len(v):
        ch = v[i]
        if ch.isdigit() or ch == ".":
            num += ch
            i += 1
            continue
        unit = ch
        if v[i:i + 2] in ("ms", "us", "µs", "ns"):
            unit = v[i:i + 2]
        if not num or unit not in units:
            return None
        total += float(num) * units[unit]
        num, i = "", i + len(unit)
    if num:
        return float(num) if num == "0" else None
    return total


@dataclass
class SandboxInfo:
    """What :meth:`Sandbox.get_info` returns, shaped like E2B's
    ``SandboxInfo``.

    ``metadata`` is the sandbox's labels (given at create as ``metadata=``
    or ``labels=``). ``end_at`` is when ``max_runtime`` stops the running
    sandbox (None without one): stead's auto-stop is otherwise by
    inactivity, ``idle_timeout`` seconds (0: never) after the last use, so
    it has no fixed end. ``raw`` is the API's JSON.
    """

    sandbox_id: str
    name: str = ""
    template_id: str = ""
    state: str = ""
    metadata: Dict[str, str] = field(default_factory=dict)
    started_at: Optional[datetime.datetime] = None
    end_at: Optional[datetime.datetime] = None
    created_at: Optional[datetime.datetime] = None
    idle_timeout: Optional[float] = None
    on_idle: str = ""
    max_runtime: Optional[float] = None
    stop_reason: str = ""
    instance_type: str = ""
    cpu_count: float = 0
    memory_mb: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "SandboxInfo":
        limits = d.get("limits") or {}
        started = _time(d.get("started_at"))
        max_rt = _seconds(d.get("max_runtime"))
        end = None
        if started is not None and max_rt and d.get("state") in ("running", "paused"):
            end = started + datetime.timedelta(seconds=max_rt)
        return cls(
            sandbox_id=d.get("id", ""),
            name=d.get("name", ""),
            template_id=d.get("template", ""),
            state=d.get("state", ""),
            metadata=dict(d.get("labels") or {}),
            started_at=started,
            end_at=end,
            created_at=_time(d.get("created_at")),
            idle_timeout=_seconds(d.get("idle_timeout")),
            on_idle=d.get("on_idle", ""),
            max_runtime=max_rt,
            stop_reason=d.get("stop_reason", ""),
            instance_type=d.get("instance_type", ""),
            cpu_count=limits.get("cpus", 0),
            memory_mb=int(limits.get("memory_bytes", 0)) >> 20,
            raw=d,
        )


@dataclass
class FileInfo:
    """One entry of a sandbox's file system."""

    name: str
    path: str
    type: str  # file, dir, symlink or other
    size: int = 0
    mode: int = 0
    uid: int = 0
    gid: int = 0
    mod_time: str = ""
    target: str = ""  # symlink target

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        return self.type == "file"

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "FileInfo":
        return cls(
            name=d.get("name", ""),
            path=d.get("path", ""),
            type=d.get("type", ""),
            size=d.get("size", 0),
            mode=d.get("mode", 0),
            uid=d.get("uid", 0),
            gid=d.get("gid", 0),
            mod_time=d.get("mod_time", ""),
            target=d.get("target", ""),
        )


@dataclass
class Checkpoint:
    """One version of a checkpoint document.

    ``body`` is the parsed JSON document: set by ``state.get``; None after a
    put or in a history listing (those carry no body). ``doc`` is its older
    name.
    """

    name: str
    version: int
    agent: str = ""
    created_at: str = ""
    principal: str = ""
    run: str = ""
    note: str = ""
    doc: Any = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def body(self) -> Any:
        """The parsed JSON document (the API's ``body``; same as ``doc``)."""
        return self.doc

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Checkpoint":
        return cls(
            name=d.get("name", ""),
            version=d.get("version", 0),
            agent=d.get("agent", ""),
            created_at=d.get("created_at", ""),
            principal=d.get("principal", ""),
            run=d.get("run", ""),
            note=d.get("note", ""),
            doc=d.get("body"),
            raw=d,
        )


@dataclass
class CheckpointInfo:
    """A checkpoint document: its latest version, history and schema."""

    name: str
    version: int
    agent: str = ""
    oldest: int = 0
    versions: int = 0
    keep: int = 0
    schema: Optional[Any] = None
    created_at: str = ""
    updated_at: str = ""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "CheckpointInfo":
        return cls(
            name=d.get("name", ""),
            version=d.get("version", 0),
            agent=d.get("agent", ""),
            oldest=d.get("oldest", 0),
            versions=d.get("versions", 0),
            keep=d.get("keep", 0),
            schema=d.get("schema"),
            created_at=d.get("created_at", ""),
            updated_at=d.get("updated_at", ""),
        )




# ---------------------------------------------------------------------------
# Session log
# ---------------------------------------------------------------------------


@dataclass
class Thread:
    """A session-log thread: a named conversation of an agent, a sequence
    of runs. ``retention`` is ``{"keep_last": N, "keep_within_seconds": S}``
    (unset rules left out)."""

    id: str
    name: str = ""
    sandbox: str = ""
    retention: Dict[str, Any] = field(default_factory=dict)
    created_at: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Thread":
        return cls(
            id=d.get("id", ""),
            name=d.get("name", ""),
            sandbox=d.get("sandbox", ""),
            retention=d.get("retention") or {},
            created_at=d.get("created_at", ""),
            raw=d,
        )


@dataclass
class Run:
    """One execution of a thread; events are appended to runs. ``status``
    is running, completed, failed, canceled or interrupted; ``last_seq``
    the seq of the newest event (0: none)."""

    id: str
    thread: str = ""
    status: str = ""
    last_seq: int = 0
    started_at: str = ""
    ended_at: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Run":
        return cls(
            id=d.get("id", ""),
            thread=d.get("thread", ""),
            status=d.get("status", ""),
            last_seq=d.get("last_seq", 0),
            started_at=d.get("started_at", ""),
            ended_at=d.get("ended_at") or "",
            raw=d,
        )


@dataclass
class Event:
    """A stored session-log event. ``payload`` is the parsed JSON value;
    ``intent`` is, for a tool_result, the seq of its tool_intent."""

    run: str
    seq: int
    type: str = ""
    time: str = ""
    payload: Any = None
    model_session: str = ""
    idempotency_key: str = ""
    intent: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Event":
        return cls(
            run=d.get("run", ""),
            seq=d.get("seq", 0),
            type=d.get("type", ""),
            time=d.get("time", ""),
            payload=d.get("payload"),
            model_session=d.get("model_session", ""),
            idempotency_key=d.get("idempotency_key", ""),
            intent=d.get("intent", 0),
            raw=d,
        )


@dataclass
class EventPage:
    """One page of a run's events. Pass ``next`` as ``after`` to read on;
    ``more`` is true when the page was cut at the limit; ``run_status`` is
    the run's status when the page was read (a page without ``more`` of a
    run that is not running is its end). Iterating a page iterates its
    events."""

    events: List[Event] = field(default_factory=list)
    next: int = 0
    more: bool = False
    run_status: str = ""

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "EventPage":
        return cls(
            events=[Event.from_json(e) for e in d.get("items") or []],
            next=d.get("next", 0),
            more=d.get("more", False),
            run_status=d.get("run_status", ""),
        )


@dataclass
class ModelSession:
    """A model session of a run: its id and the seq of its first event."""

    id: str
    first_seq: int = 0
    created_at: str = ""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "ModelSession":
        return cls(id=d.get("id", ""), first_seq=d.get("first_seq", 0), created_at=d.get("created_at", ""))


@dataclass
class RunResume:
    """What a harness resuming a run must know: the run, its last safe
    point (its last checkpoint event, else its last event; None when it has
    none) and the tool intents no tool_result answers (``in_doubt``: their
    side effects may or may not have happened)."""

    run: Run
    safe_point: Optional[Event] = None
    in_doubt: List[Event] = field(default_factory=list)
    model_sessions: List[ModelSession] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "RunResume":
        sp = d.get("safe_point")
        return cls(
            run=Run.from_json(d.get("run") or {}),
            safe_point=Event.from_json(sp) if sp else None,
            in_doubt=[Event.from_json(e) for e in d.get("in_doubt") or []],
            model_sessions=[ModelSession.from_json(m) for m in d.get("model_sessions") or []],
        )


# ---------------------------------------------------------------------------
# Tasks, observations, key-value entries
# ---------------------------------------------------------------------------


@dataclass
class Task:
    """A unit of an agent's work kept by the daemon. ``state`` is open,
    in_progress, done, failed or cancelled; ``payload`` the parsed JSON."""

    id: str
    state: str = ""
    payload: Any = None
    sandbox: str = ""
    created_at: str = ""
    updated_at: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Task":
        return cls(
            id=d.get("id", ""),
            state=d.get("state", ""),
            payload=d.get("payload"),
            sandbox=d.get("sandbox", ""),
            created_at=d.get("created_at", ""),
            updated_at=d.get("updated_at", ""),
            raw=d,
        )


@dataclass
class Observation:
    """One entry of a sandbox's append-only observation log; ``principal``
    is the id of the API key that appended it."""

    seq: int
    kind: str = ""
    payload: Any = None
    time: str = ""
    principal: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Observation":
        return cls(
            seq=d.get("seq", 0),
            kind=d.get("kind", ""),
            payload=d.get("payload"),
            time=d.get("time", ""),
            principal=d.get("principal", ""),
            raw=d,
        )


@dataclass
class KVEntry:
    """A key-value entry; ``value`` is the parsed JSON, ``version`` is 1 on
    creation and grows by one per put (usable as ``if_version``)."""

    key: str
    value: Any = None
    version: int = 0
    created_at: str = ""
    updated_at: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "KVEntry":
        return cls(
            key=d.get("key", ""),
            value=d.get("value"),
            version=d.get("version", 0),
            created_at=d.get("created_at", ""),
            updated_at=d.get("updated_at", ""),
            raw=d,
        )


# ---------------------------------------------------------------------------
# Orient
# ---------------------------------------------------------------------------


@dataclass
class OrientFile:
    """The tail of one workspace file (``truncated``: only its last lines)."""

    path: str
    tail: str = ""
    truncated: bool = False

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "OrientFile":
        return cls(path=d.get("path", ""), tail=d.get("tail", ""), truncated=d.get("truncated", False))


@dataclass
class Orient:
    """What a resuming agent must read first, as data and as prompt-ready
    ``text`` (``str(orient)`` is the text too).

    ``sandbox`` is the :class:`~stead.Sandbox`; ``stop_reason`` and
    ``last_stopped_at`` say why and when it last stopped; ``checkpoints``
    are its latest checkpoint documents, ``open_tasks`` its open or
    in-progress tasks, ``files`` the tails of its workspace notes; ``run``
    is the latest session run's :class:`RunResume` (None without one) and
    ``recent_events`` that run's last events.
    """

    text: str = ""
    sandbox: Any = None
    stop_reason: str = ""
    last_stopped_at: str = ""
    checkpoints: List[CheckpointInfo] = field(default_factory=list)
    open_tasks: List[Task] = field(default_factory=list)
    files: List[OrientFile] = field(default_factory=list)
    run: Optional[RunResume] = None
    recent_events: List[Event] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    def __str__(self) -> str:
        return self.text

    @property
    def in_doubt(self) -> List[Event]:
        """The latest run's in-doubt tool intents (empty without a run)."""
        return self.run.in_doubt if self.run is not None else []

    @classmethod
    def from_json(cls, d: Dict[str, Any], sandbox: Any = None) -> "Orient":
        run = d.get("run")
        return cls(
            text=d.get("text", ""),
            sandbox=sandbox if sandbox is not None else d.get("sandbox"),
            stop_reason=d.get("stop_reason", ""),
            last_stopped_at=d.get("last_stopped_at") or "",
            checkpoints=[CheckpointInfo.from_json(c) for c in d.get("checkpoints") or []],
            open_tasks=[Task.from_json(t) for t in d.get("open_tasks") or []],
            files=[OrientFile.from_json(f) for f in d.get("files") or []],
            run=RunResume.from_json(run) if run else None,
            recent_events=[Event.from_json(e) for e in d.get("recent_events") or []],
            raw=d,
        )


@dataclass
class NetworkPolicy:
    """A sandbox's egress policy. A destination is decided in this order:
    the host, other sandboxes, link-local, loopback and metadata ranges are
    always refused; with ``internet`` False everything is refused; an entry
    of ``deny`` that matches refuses it; with ``allow`` empty the rest is
    admitted, otherwise only what an entry of ``allow`` matches (an allow
    list makes the policy default-deny).

    Entries are addresses (``"1.2.3.4"``), CIDRs (``"10.0.0.0/8"``), names
    (``"example.com"``: that name only) or domain patterns
    (``"*.example.com"``: every name below it).
    """

    internet: bool = True
    allow: List[str] = field(default_factory=list)
    deny: List[str] = field(default_factory=list)

    def to_json(self) -> Dict[str, Any]:
        """The API's JSON of the policy."""
        return {"internet": bool(self.internet), "allow": list(self.allow), "deny": list(self.deny)}

    @classmethod
    def from_json(cls, d: Optional[Dict[str, Any]]) -> "NetworkPolicy":
        d = d or {}
        internet = d.get("internet")
        return cls(
            internet=True if internet is None else bool(internet),
            allow=list(d.get("allow") or []),
            deny=list(d.get("deny") or []),
        )


@dataclass
class Port:
    """A port of a sandbox exposed through the daemon's port proxy.

    ``url`` reaches it by host (``<port>-<sandbox>.<domain>``, when the
    proxy has a domain); ``path_url`` by path (``/v1/sandboxes/{id}/ports/{port}/``
    on the daemon's or the proxy's address). A private port (``public``
    False) needs its token.
    """

    port: int
    public: bool = False
    url: str = ""
    path_url: str = ""
    exposed_at: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Port":
        return cls(
            port=d.get("port", 0),
            public=d.get("public", False),
            url=d.get("url", ""),
            path_url=d.get("path_url", ""),
            exposed_at=d.get("exposed_at", ""),
            raw=d,
        )


@dataclass
class ExposedPort(Port):
    """The answer to exposing a port: the :class:`Port` and, for a private
    port, its access ``token``, shown only this once (exposing the port
    again rotates it). Send it as the header ``X-Stead-Port-Token``, or open
    a URL once with ``?stead_token=TOKEN`` in a browser."""

    token: str = field(default="", repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "ExposedPort":
        p = Port.from_json(d)
        return cls(port=p.port, public=p.public, url=p.url, path_url=p.path_url, exposed_at=p.exposed_at,
                   raw=d, token=d.get("token", ""))


@dataclass
class NetworkInfo:
    """A sandbox's network: its address, egress policy, counters and
    exposed ports. ``enabled`` is False when the daemon runs without
    networking (the sandbox has loopback only)."""

    enabled: bool = False
    address: str = ""
    address6: str = ""
    gateway: str = ""  # default route and DNS resolver
    policy: NetworkPolicy = field(default_factory=NetworkPolicy)
    refused: int = 0  # connections and lookups refused since the sandbox started
    rx_bytes: int = 0
    tx_bytes: int = 0
    bandwidth_bits: int = 0  # rate limit in bits/s, 0: none
    max_conns: int = 0  # connection-tracking limit, 0: none
    ports: List[Port] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "NetworkInfo":
        return cls(
            enabled=d.get("enabled", False),
            address=d.get("address", ""),
            address6=d.get("address6", ""),
            gateway=d.get("gateway", ""),
            policy=NetworkPolicy.from_json(d.get("policy")),
            refused=d.get("refused", 0),
            rx_bytes=d.get("rx_bytes", 0),
            tx_bytes=d.get("tx_bytes", 0),
            bandwidth_bits=d.get("bandwidth_bits", 0),
            max_conns=d.get("max_conns", 0),
            ports=[Port.from_json(p) for p in d.get("ports") or []],
            raw=d,
        )
