"""Sandboxes: lifecycle, commands, files, snapshots, checkpoint state, orient and network."""

from __future__ import annotations

import base64
import codecs
import functools
import json
import posixpath
import types
import warnings
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Union

from .client import Client, Response, default_client, quote
from .errors import (
    CommandExitException,
    ConflictError,
    ExecError,
    InvalidError,
    NotFoundError,
    SteadError,
    TimeoutException,
)
from .models import (
    Checkpoint,
    CheckpointInfo,
    CommandResult,
    ExposedPort,
    FileInfo,
    NetworkInfo,
    NetworkPolicy,
    Orient,
    Port,
    SandboxInfo,
    _seconds,
)
from .session import Session
from .tasks import KV, Observations, Tasks

__all__ = ["Sandbox", "Snapshot", "Commands", "Files", "Checkpoints", "SandboxState", "Session"]

OutputCallback = Callable[[str], Any]

#: Marks an argument that was not given (None is a valid JSON body).
_MISSING: Any = object()


def _duration(v: Union[None, int, float, str]) -> Optional[str]:
    """A Go duration from seconds (int/float) or a duration string ("15m")."""
    if v is None:
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        raise TypeError("a duration is seconds (int or float) or a string like '15m'")
    if isinstance(v, int) or float(v).is_integer():
        return "%ds" % int(v)
    return "%rs" % float(v)


def _mount(v: Union[str, Dict[str, Any]]) -> Dict[str, Any]:
    """A volume mount from a dict or the CLI form NAME[/SUB/PATH]:/mount/path[:ro]."""
    if isinstance(v, dict):
        return v
    src, sep, rest = v.partition(":")
    if not sep:
        raise InvalidError("volume %r: no mount path (want NAME[/SUB/PATH]:/mount/path[:ro])" % v)
    m: Dict[str, Any] = {}
    target = rest
    head, sep, opt = rest.rpartition(":")
    if sep:
        if opt == "ro":
            m["read_only"] = True
        elif opt != "rw":
            raise InvalidError("volume %r: unknown option %r (only ro or rw)" % (v, opt))
        target = head
    if len(target) > 1 and target.endswith("/"):
        target = target[:-1]  # one trailing slash is dropped, as by the CLI
    if "/" in src and src.endswith("/"):
        src = src[:-1]
    name, _, sub = src.partition("/")
    m["volume"] = name
    if sub:
        m["sub_path"] = sub
    m["path"] = target
    return m


def _policy(v: Union[None, NetworkPolicy, Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """A network policy's JSON from a :class:`NetworkPolicy` or a dict
    (internet, allow, deny)."""
    if v is None:
        return None
    if isinstance(v, NetworkPolicy):
        return v.to_json()
    if isinstance(v, dict):
        unknown = set(v) - {"internet", "allow", "deny"}
        if unknown:
            raise InvalidError("network: unknown keys %s (want internet, allow, deny)" % sorted(unknown))
        return NetworkPolicy.from_json(v).to_json()
    raise TypeError("network is a stead.NetworkPolicy or a dict with internet, allow and deny")


def _entries(name: str, v: Union[str, Iterable[str]]) -> List[str]:
    """A list of policy entries (a single string is one entry)."""
    if isinstance(v, str):
        return [v]
    out = list(v)
    for e in out:
        if not isinstance(e, str) or not e.strip():
            raise InvalidError("%s: entry %r is not an address, CIDR or domain pattern" % (name, e))
    return out


def _port(port: int) -> int:
    """A port number, checked to be 1-65535."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise InvalidError("port %r: give a port number from 1 to 65535" % (port,))
    return port


def _service(v: Union[None, str, Sequence[str], Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """A service spec from a dict, an argv list, or a shell command string."""
    if v is None or isinstance(v, dict):
        return v
    if isinstance(v, str):
        return {"command": ["/bin/sh", "-c", v]}
    return {"command": list(v)}


def _one_of(name: str, value: Any, alias: str, alias_value: Any) -> Any:
    """The value of a setting that has two names (E2B's and stead's);
    giving both is an error."""
    if value is not None and alias_value is not None:
        raise InvalidError("give %s or %s, not both (they are one setting)" % (name, alias))
    return value if value is not None else alias_value


def _client(client: Optional[Client], api_key: Optional[str] = None, base_url: Optional[str] = None,
            request_timeout: Optional[float] = None) -> Client:
    """``client``, or a :class:`Client` from ``api_key``/``base_url``
    (each defaulting to the environment, as ``Client()`` resolves them)."""
    if client is not None:
        if api_key or base_url:
            raise InvalidError("give client= or api_key=/base_url=, not both")
        return client
    if request_timeout is not None:
        return Client(base_url, api_key, timeout=request_timeout)
    return Client(base_url, api_key)


def _timeout_seconds(v: Union[int, float, str]) -> float:
    """A timeout of seconds (int/float > 0) or a duration string ("15m")."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise InvalidError("timeout %r: give seconds (a number > 0) or a duration like '15m'" % (v,))
    secs = _seconds(v) if isinstance(v, str) else float(v)
    if secs is None or not secs > 0:
        raise InvalidError("timeout %r: give seconds (a number > 0) or a duration like '15m'" % (v,))
    return secs


class _either:
    """A method callable on an instance, or on the class with a sandbox id
    first, as E2B's ``sbx.kill()`` and ``Sandbox.kill(sandbox_id)``."""

    def __init__(self, on_instance: Callable[..., Any], on_class: Callable[..., Any], doc: str) -> None:
        self._inst = on_instance
        self._cls = on_class
        self.__doc__ = doc

    def __get__(self, obj: Any, objtype: Optional[type] = None) -> Callable[..., Any]:
        if obj is None:
            f = functools.partial(self._cls, objtype)
            functools.update_wrapper(f, self._cls)
            f.__doc__ = self.__doc__
            return f
        return types.MethodType(self._inst, obj)


class Snapshot:
    """A read-only, point-in-time copy of a sandbox's root.

    Attributes mirror the API: ``id`` (snap-...), ``sandbox``,
    ``sandbox_name``, ``parent`` (the snapshot the sandbox was forked or
    rolled back from: the tree's edge), ``label``, ``description``, ``kind``
    (user, safety or fork), ``created_at`` and ``frozen_for``.
    """

    def __init__(self, client: Client, data: Dict[str, Any]) -> None:
        self._client = client
        self.raw = data
        self.id: str = data.get("id", "")
        self.sandbox: str = data.get("sandbox", "")
        self.sandbox_name: str = data.get("sandbox_name", "")
        self.parent: str = data.get("parent", "")
        self.label: str = data.get("label", "")
        self.description: str = data.get("description", "")
        self.kind: str = data.get("kind", "")
        self.created_at: str = data.get("created_at", "")
        self.frozen_for: str = data.get("frozen_for", "")

    def __repr__(self) -> str:
        return "Snapshot(id=%r, sandbox=%r, label=%r, kind=%r)" % (self.id, self.sandbox, self.label, self.kind)

    @classmethod
    def get(cls, snapshot_id: str, client: Optional[Client] = None) -> "Snapshot":
        """Describe a snapshot."""
        c = default_client(client)
        return cls(c, c.call("GET", "/v1/snapshots/" + quote(snapshot_id)))

    @classmethod
    def list(cls, sandbox: Optional[str] = None, client: Optional[Client] = None) -> List["Snapshot"]:
        """The tenant's snapshots, oldest first; only those of ``sandbox``
        (id or name) when given."""
        c = default_client(client)
        return [cls(c, d) for d in c.list_all("/v1/snapshots", {"sandbox": sandbox or None})]

    def fork(self, count: int = 1, no_start: bool = False) -> List["Sandbox"]:
        """Create ``count`` new sandboxes with this snapshot's files."""
        res = self._client.call(
            "POST", "/v1/snapshots/" + quote(self.id) + "/fork", body={"count": count, "no_start": no_start}
        )
        return [Sandbox(self._client, d) for d in (res or {}).get("sandboxes") or []]

    def delete(self) -> None:
        """Delete the snapshot; sandboxes made from it keep their files."""
        self._client.call("DELETE", "/v1/snapshots/" + quote(self.id))


class SandboxState(str):
    """The lifecycle state of a sandbox ("running", "paused", "stopped" ...)
    that also carries the sandbox's checkpoint-state API.

    It compares and prints as the plain state string, so ``sb.state ==
    "running"`` works, and ``sb.state.put(...)``, ``.get``, ``.history``,
    ``.rollback``, ``.list``, ``.delete`` and ``.set_schema`` are those of
    :class:`Checkpoints` (also reachable as ``sb.checkpoints``).
    """

    _checkpoints: "Checkpoints"

    def __new__(cls, value: str, checkpoints: "Checkpoints") -> "SandboxState":
        s = super().__new__(cls, value)
        s._checkpoints = checkpoints
        return s

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._checkpoints, name)

    def put(self, name: str, body: Any = _MISSING, if_version: Optional[int] = None, agent: Optional[str] = None,
            run: Optional[str] = None, keep: Optional[int] = None, *, doc: Any = _MISSING) -> Checkpoint:
        """See :meth:`Checkpoints.put`."""
        return self._checkpoints.put(name, body, if_version=if_version, agent=agent, run=run, keep=keep, doc=doc)

    def get(self, name: str, version: Optional[int] = None, agent: Optional[str] = None) -> Checkpoint:
        """See :meth:`Checkpoints.get`."""
        return self._checkpoints.get(name, version=version, agent=agent)

    def history(self, name: str, agent: Optional[str] = None) -> List[Checkpoint]:
        """See :meth:`Checkpoints.history`."""
        return self._checkpoints.history(name, agent=agent)

    def rollback(self, name: str, version: int, agent: Optional[str] = None, run: Optional[str] = None,
                 if_version: Optional[int] = None) -> Checkpoint:
        """See :meth:`Checkpoints.rollback`."""
        return self._checkpoints.rollback(name, version, agent=agent, run=run, if_version=if_version)


class Sandbox:
    """A stead sandbox, shaped like E2B's ``Sandbox``::

        from stead import Sandbox
        with Sandbox.create() as sbx:               # killed at the end of the block
            sbx.commands.run("echo hello").stdout   # "hello\\n"; non-zero exit raises
            sbx.files.write("/home/agent/plan.md", "# plan\\n")
            sbx.files.read("/home/agent/plan.md")   # text
            sbx.sandbox_id, sbx.is_running(), sbx.get_info()

        sb = Sandbox.create(name="agent-1", keep=True)   # an agent's, lives on
        sb.state.put("progress", {"step": 3})           # stead: checkpoints, snapshots,
        sb.pause(); sb = Sandbox.connect("agent-1")     # fork, rollback, orient ...

    The object caches the sandbox as last seen: lifecycle calls update it,
    :meth:`refresh` re-reads it. ``raw`` is the API's JSON.
    """

    def __init__(self, client: Client, data: Dict[str, Any]) -> None:
        self._client = client
        self.raw: Dict[str, Any] = data
        self.commands = Commands(self)
        self.files = Files(self)
        self.checkpoints = Checkpoints(self)
        self.session = Session(self)
        self.tasks = Tasks(self)
        self.observations = Observations(self)
        self.kv = KV(self)
        #: Whether a ``with`` block leaves the sandbox alone at its end
        #: (False for one made by ``create`` without ``keep=True``).
        self.keep: bool = True

    # -- identity and cached fields -----------------------------------------

    @property
    def client(self) -> Client:
        """The client this sandbox is reached through."""
        return self._client

    @property
    def id(self) -> str:
        """The sandbox id (sb-...)."""
        return self.raw.get("id", "")

    @property
    def sandbox_id(self) -> str:
        """The sandbox id (sb-...), E2B's name for :attr:`id`."""
        return self.raw.get("id", "")

    @property
    def name(self) -> str:
        """The sandbox's name, unique in its tenant."""
        return self.raw.get("name", "")

    @property
    def state(self) -> SandboxState:
        """The lifecycle state as last seen (creating, running, paused,
        stopped, deleted, error); also the checkpoint-state API, see
        :class:`SandboxState`."""
        return SandboxState(self.raw.get("state", ""), self.checkpoints)

    @property
    def status(self) -> str:
        """The lifecycle state as a plain string (same as ``str(sb.state)``)."""
        return self.raw.get("state", "")

    @property
    def template(self) -> str:
        return self.raw.get("template", "")

    @property
    def instance_type(self) -> str:
        return self.raw.get("instance_type", "")

    @property
    def limits(self) -> Dict[str, Any]:
        return self.raw.get("limits") or {}

    @property
    def stop_reason(self) -> str:
        """Why the sandbox last stopped (user, idle, max_runtime ...)."""
        return self.raw.get("stop_reason", "")

    @property
    def address(self) -> str:
        """The sandbox's IPv4 address in the daemon's subnet ("" without
        networking); stable across stop/start and daemon restarts."""
        return self.raw.get("address", "")

    @property
    def labels(self) -> Dict[str, str]:
        """The sandbox's labels, given at create."""
        return dict(self.raw.get("labels") or {})

    @property
    def network(self) -> NetworkPolicy:
        """The sandbox's egress policy as last seen (see :meth:`get_network`
        for the live counters and ports)."""
        return NetworkPolicy.from_json(self.raw.get("network"))

    @property
    def auto_resume(self) -> bool:
        """Whether a request to an exposed port starts or resumes the sandbox."""
        return bool(self.raw.get("auto_resume", False))

    def __repr__(self) -> str:
        return "Sandbox(id=%r, name=%r, state=%r)" % (self.id, self.name, self.status)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sandbox) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def _path(self, suffix: str = "") -> str:
        return "/v1/sandboxes/" + quote(self.id) + suffix

    def _update(self, data: Dict[str, Any]) -> "Sandbox":
        self.raw = data
        return self

    # -- constructors ---------------------------------------------------------

    @classmethod
    def create(
        cls,
        template: Optional[str] = None,
        *,
        name: Optional[str] = None,
        timeout: Union[None, int, float, str] = None,
        envs: Optional[Dict[str, str]] = None,
        metadata: Optional[Dict[str, str]] = None,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        request_timeout: Optional[float] = None,
        keep: bool = False,
        allow_internet_access: Optional[bool] = None,
        client: Optional[Client] = None,
        instance_type: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        service: Union[None, str, Sequence[str], Dict[str, Any]] = None,
        volumes: Optional[Iterable[Union[str, Dict[str, Any]]]] = None,
        idle_timeout: Union[None, int, float, str] = None,
        on_idle: Optional[str] = None,
        max_runtime: Union[None, int, float, str] = None,
        no_start: bool = False,
        network: Union[None, NetworkPolicy, Dict[str, Any]] = None,
        auto_resume: bool = False,
        secrets: Optional[Iterable[str]] = None,
        secret_files: Optional[Iterable[str]] = None,
        labels: Optional[Dict[str, str]] = None,
    ) -> "Sandbox":
        """Create a sandbox (started unless ``no_start``), as E2B's
        ``Sandbox.create``::

            sbx = Sandbox.create()                        # the host template
            sbx = Sandbox.create("python", timeout=600, envs={"A": "1"})
            with Sandbox.create() as sbx: ...             # killed at the end

        Every argument but ``template`` is a keyword.

        Args:
            template: template id (default ``host``).
            name: unique name in the tenant (default: the id).
            timeout: E2B's timeout, in seconds (or a duration string such
                as ``"15m"``): stead stops the sandbox after this long
                *without activity* (commands, file calls, its agent's API
                calls, cpu use), and a stopped sandbox keeps its files
                (:meth:`connect` starts it again). It is the daemon's
                ``idle_timeout`` (default 15m; 0 disables auto-stop).
            envs: environment of the service and of every command.
            metadata: the sandbox's labels (``{"team": "research"}``;
                label rules: key 1-63 of ``a-z A-Z 0-9 . _ - /``, value
                0-63 of ``a-z A-Z 0-9 . _ -``); ``get_info().metadata``.
            api_key, base_url: the key and endpoint of the daemon (default
                ``$STEAD_API_KEY`` and ``$STEAD_ENDPOINT``/``$STEAD_URL``,
                see :class:`~stead.Client`); or pass ``client=``.
            request_timeout: socket timeout of the SDK's calls (seconds).
            keep: whether the ``with`` block leaves the sandbox alone at its
                end. By default a sandbox created here is killed (purged)
                when its ``with`` block ends, as in E2B; an agent's
                persistent sandbox is created with ``keep=True`` (or used
                without ``with``).
            allow_internet_access: False creates the sandbox without
                internet egress (``network={"internet": False}``).
            client: the daemon to use (instead of api_key/base_url).
            instance_type: micro, small (default), medium or large.
            env: stead's name of ``envs``.
            service: the supervised agent service: a dict as the API's
                Service (command, env, cwd, user, restart, stop_signal,
                stop_line, stop_grace), an argv list, or a shell string.
            volumes: mounts, as dicts (volume, path, sub_path, read_only)
                or the CLI form ``"NAME[/SUB/PATH]:/mount/path[:ro]"``.
            idle_timeout: stead's name of ``timeout``.
            on_idle: ``"stop"`` (default) or ``"pause"``.
            max_runtime: seconds or a duration string.
            no_start: create it stopped.
            network: the egress policy, a :class:`~stead.NetworkPolicy` or a
                dict (internet, allow, deny); default: internet on, nothing
                refused but what is always refused.
            auto_resume: a request to an exposed port starts or resumes the
                sandbox when it is stopped or paused.
            secrets: tenant secrets (:class:`~stead.Secret`) given to the
                service and every command as environment variables:
                ``"NAME"``, or ``"NAME=VAR"`` to name the variable VAR.
            secret_files: tenant secrets given as files on a tmpfs (mode
                0400, owned by the agent): ``"NAME=/run/secrets/FILE"``.
            labels: stead's name of ``metadata``; keys scoped by a label
                selector reach the sandboxes carrying theirs, and a
                label-scoped key's creates get its labels.

        Giving both names of one setting (``envs`` and ``env``, ``timeout``
        and ``idle_timeout``, ``metadata`` and ``labels``,
        ``allow_internet_access`` and ``network``) raises
        :class:`~stead.InvalidError` before any request.
        """
        if isinstance(template, Client):
            # The SDK's first positional argument used to be the client.
            warnings.warn("Sandbox.create(client): pass the client as client=; the first argument is the template",
                          DeprecationWarning, stacklevel=2)
            if client is not None:
                raise InvalidError("Sandbox.create: two clients given")
            template, client = None, template
        envs = _one_of("envs", envs, "env", env)
        idle = _one_of("timeout", timeout, "idle_timeout", idle_timeout)
        labels = _one_of("metadata", metadata, "labels", labels)
        if allow_internet_access is not None:
            if network is not None:
                raise InvalidError("Sandbox.create: give allow_internet_access or network, not both")
            network = {"internet": bool(allow_internet_access)}
        c = _client(client, api_key, base_url, request_timeout)
        req: Dict[str, Any] = {}
        for k, v in (
            ("name", name),
            ("template", template),
            ("instance_type", instance_type),
            ("env", envs),
            ("service", _service(service)),
            ("idle_timeout", _duration(idle)),
            ("on_idle", on_idle),
            ("max_runtime", _duration(max_runtime)),
            ("network", _policy(network)),
        ):
            if v is not None:
                req[k] = v
        if volumes:
            req["volumes"] = [_mount(v) for v in volumes]
        if no_start:
            req["no_start"] = True
        if auto_resume:
            req["auto_resume"] = True
        if secrets:
            req["secrets"] = list(secrets)
        if secret_files:
            req["secret_files"] = list(secret_files)
        if labels:
            req["labels"] = dict(labels)
        sb = cls(c, c.call("POST", "/v1/sandboxes", body=req))
        sb.keep = keep
        return sb

    @classmethod
    def get(cls, id_or_name: str, client: Optional[Client] = None, *, api_key: Optional[str] = None,
            base_url: Optional[str] = None) -> "Sandbox":
        """The sandbox as it is, without starting it."""
        c = _client(client, api_key, base_url)
        return cls(c, c.call("GET", "/v1/sandboxes/" + quote(id_or_name)))

    @classmethod
    def connect(
        cls,
        sandbox_id: str,
        client: Optional[Client] = None,
        *,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        request_timeout: Optional[float] = None,
        timeout: Union[None, int, float, str] = None,
        keep: bool = True,
    ) -> "Sandbox":
        """Bring a sandbox (id or name) back for use, as E2B's connect
        does: a stopped one is started, a paused one resumed, a running one
        returned as it is. Raises :class:`~stead.NotFoundError` if there is
        no such sandbox.

        ``timeout`` calls :meth:`set_timeout` once it runs. ``keep``
        (default True) makes a ``with`` block leave the sandbox as it is at
        its end: a sandbox you connect to is usually one that lives on;
        pass ``keep=False`` to have the block kill it as E2B does."""
        sb = cls.get(sandbox_id, _client(client, api_key, base_url, request_timeout))
        if sb.status != "running":
            sb.start()
        sb.keep = keep
        if timeout is not None:
            sb.set_timeout(timeout)
        return sb

    @classmethod
    def list(cls, client: Optional[Client] = None, all: bool = False, *, api_key: Optional[str] = None,
             base_url: Optional[str] = None) -> List["Sandbox"]:
        """The tenant's sandboxes; ``all`` includes soft-deleted ones."""
        c = _client(client, api_key, base_url)
        return [cls(c, d) for d in c.list_all("/v1/sandboxes", {"all": True if all else None})]

    # -- lifecycle --------------------------------------------------------------

    def refresh(self) -> "Sandbox":
        """Re-read the sandbox from the daemon."""
        return self._update(self._client.call("GET", self._path()))

    def _action(self, action: str, body: Any = None) -> "Sandbox":
        if body is None:
            return self._update(self._client.call("POST", self._path("/" + action)))
        return self._update(self._client.call("POST", self._path("/" + action), body=body))

    def start(self) -> "Sandbox":
        """Start a stopped sandbox (a paused one is resumed). Raises
        :class:`~stead.ConflictError` if it is already running (``connect``
        takes a sandbox as it is)."""
        return self._action("start")

    def stop(self) -> "Sandbox":
        """Stop: the service's stop hook, then every process ends; files persist, /tmp does not.
        Raises :class:`~stead.ConflictError` if it is already stopped."""
        return self._action("stop")

    def pause(self) -> "Sandbox":
        """Freeze every process (memory stays resident)."""
        return self._action("pause")

    def resume(self) -> "Sandbox":
        """Thaw a paused sandbox. Raises :class:`~stead.ConflictError` for any
        other state, a running one included."""
        return self._action("resume")

    def undelete(self) -> "Sandbox":
        """Bring back a soft-deleted sandbox, stopped."""
        return self._action("undelete")

    def resize(self, instance_type: Optional[str] = None, **limits: Any) -> "Sandbox":
        """Change the limits of a stopped sandbox: an instance type, or
        cpus / memory_bytes / pids / disk_bytes."""
        body = dict(limits)
        if instance_type:
            body["instance_type"] = instance_type
        return self._action("resize", body)

    def delete(self, purge: bool = False) -> "Sandbox":
        """Soft-delete (recoverable with :meth:`undelete` until ``purge_at``),
        or with ``purge`` destroy it for good. Either way the object's
        state is ``"deleted"`` afterwards (the daemon answers a purge with
        the sandbox as it was just before it)."""
        d = self._client.call("DELETE", self._path(), {"purge": True if purge else None}) or {}
        if purge:
            d = dict(d, state="deleted")
        return self._update(d)

    def _kill(self) -> bool:
        try:
            self.delete(purge=True)
        except NotFoundError:
            self.raw = dict(self.raw, state="deleted")
            return False
        return True

    def _kill_by_id(cls: type, sandbox_id: str, client: Optional[Client] = None, *, api_key: Optional[str] = None,
                    base_url: Optional[str] = None) -> bool:
        c = _client(client, api_key, base_url)
        try:
            c.call("DELETE", "/v1/sandboxes/" + quote(sandbox_id), {"purge": True})
        except NotFoundError:
            return False
        return True

    kill = _either(
        _kill, _kill_by_id,
        """Destroy the sandbox for good (E2B's kill; stead's ``delete(purge=True)``):
        its files, snapshots' hold on it and name are gone, nothing can bring it
        back. Returns True, or False when there was no such sandbox.

        Also callable on the class: ``Sandbox.kill(sandbox_id, client=None, *,
        api_key=None, base_url=None)``.""")

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        """Kill the sandbox unless ``keep`` (see :meth:`create`); an error
        of the kill is raised only when the block itself raised none."""
        if self.keep:
            return
        try:
            self.kill()
        except SteadError:
            if exc_type is None:
                raise

    def is_running(self) -> bool:
        """Whether the sandbox runs now (re-read from the daemon; False for
        a paused, stopped or deleted one, or one that no longer exists)."""
        try:
            return self.refresh().status == "running"
        except NotFoundError:
            self.raw = dict(self.raw, state="deleted")
            return False

    def _get_info(self) -> SandboxInfo:
        return SandboxInfo.from_json(self.refresh().raw)

    def _get_info_by_id(cls: type, sandbox_id: str, client: Optional[Client] = None, *,
                        api_key: Optional[str] = None, base_url: Optional[str] = None) -> SandboxInfo:
        c = _client(client, api_key, base_url)
        return SandboxInfo.from_json(c.call("GET", "/v1/sandboxes/" + quote(sandbox_id)) or {})

    get_info = _either(
        _get_info, _get_info_by_id,
        """The sandbox as a :class:`~stead.SandboxInfo` (sandbox_id, name,
        template_id, state, metadata, started_at, end_at, idle_timeout ...),
        re-read from the daemon.

        Also callable on the class: ``Sandbox.get_info(sandbox_id, ...)``.""")

    def _set_timeout(self, timeout: Union[int, float, str]) -> "Sandbox":
        secs = _timeout_seconds(timeout)
        if self.refresh().status != "running":
            raise ConflictError("sandbox %s is %s: set_timeout needs a running sandbox (Sandbox.connect starts it)"
                                % (self.name or self.id, self.status or "not running"))
        # A file call counts as activity: the idle clock restarts now.
        self.files.stat("/")
        idle = _seconds(self.raw.get("idle_timeout"))
        if idle and secs > idle:
            warnings.warn(
                "set_timeout(%g): sandbox %s stops after %gs without activity (its idle_timeout, fixed at create); "
                "keep it busy or create it with timeout=%g" % (secs, self.name or self.id, idle, secs),
                RuntimeWarning, stacklevel=3)
        return self

    def _set_timeout_by_id(cls: type, sandbox_id: str, timeout: Union[int, float, str],
                           client: Optional[Client] = None, *, api_key: Optional[str] = None,
                           base_url: Optional[str] = None) -> "Sandbox":
        return cls.get(sandbox_id, _client(client, api_key, base_url))._set_timeout(timeout)

    set_timeout = _either(
        _set_timeout, _set_timeout_by_id,
        """E2B's set_timeout, mapped to what stead has: stead stops a sandbox
        after its ``idle_timeout`` (``Sandbox.create(timeout=...)``) without
        activity, not at a fixed time, and the daemon has no call that
        changes the idle timeout of an existing sandbox. So set_timeout
        counts as activity now (the idle clock restarts: the sandbox runs at
        least ``idle_timeout`` seconds more, and for good while it is used),
        and when ``timeout`` is longer than the sandbox's idle timeout it
        warns (RuntimeWarning) that the sandbox may stop sooner when left
        idle. ``timeout`` is seconds (> 0) or a duration string ("15m").
        Raises :class:`~stead.ConflictError` unless the sandbox runs.

        Also callable on the class: ``Sandbox.set_timeout(sandbox_id,
        timeout, ...)``.""")

    def send_input(self, data: str) -> None:
        """Write ``data`` (e.g. a line ending in a newline) to the agent service's stdin."""
        self._client.call("POST", self._path("/service/input"), body={"data": data})

    def logs(self) -> str:
        """The agent service's log so far."""
        resp = self._client.request("GET", self._path("/logs"), accept="text/plain")
        return resp.read().decode("utf-8", "replace")

    # -- snapshots ------------------------------------------------------------

    def snapshot(self, label: Optional[str] = None, description: Optional[str] = None) -> Snapshot:
        """Take a read-only snapshot (a running sandbox is frozen only for the instant it takes)."""
        body: Dict[str, Any] = {}
        if label:
            body["label"] = label
        if description:
            body["description"] = description
        return Snapshot(self._client, self._client.call("POST", self._path("/snapshots"), body=body))

    def snapshots(self) -> List[Snapshot]:
        """This sandbox's snapshots, oldest first."""
        return Snapshot.list(sandbox=self.id, client=self._client)

    def fork(
        self,
        count: int = 1,
        no_start: bool = False,
        volumes: Optional[Iterable[Union[str, Dict[str, Any]]]] = None,
    ) -> List["Sandbox"]:
        """Snapshot this sandbox and create ``count`` new sandboxes from it.
        They mount this sandbox's volumes; ``volumes`` (as at create) mount
        another volume at one of those paths instead, or add a mount."""
        body: Dict[str, Any] = {"count": count, "no_start": no_start}
        if volumes:
            body["volumes"] = [_mount(v) for v in volumes]
        res = self._client.call("POST", self._path("/fork"), body=body)
        return [Sandbox(self._client, d) for d in (res or {}).get("sandboxes") or []]

    def attach_volume(self, mount: Union[str, Dict[str, Any]]) -> "Sandbox":
        """Attach a volume (``"NAME[/SUB]:/path[:ro]"`` or a dict) to this
        stopped sandbox, mounted from its next start. A running or paused
        sandbox refuses (:class:`ConflictError`): stop it first."""
        self._update(self._client.call("POST", self._path("/volumes"), body=_mount(mount)))
        return self

    def detach_volume(self, path: str) -> "Sandbox":
        """Detach the volume mounted at ``path`` from this stopped sandbox;
        the volume keeps its data."""
        self._update(self._client.call("DELETE", self._path("/volumes"), {"path": path}))
        return self

    def rollback(self, snapshot: Union[str, Snapshot]) -> Snapshot:
        """Return the sandbox's files to ``snapshot`` (a :class:`Snapshot` or
        its id) in place. A running sandbox is restarted. A safety snapshot
        of the replaced files is taken first and returned: roll back to it
        to undo."""
        sid = snapshot.id if isinstance(snapshot, Snapshot) else snapshot
        res = self._client.call("POST", self._path("/rollback"), body={"snapshot": sid})
        self._update(res["sandbox"])
        return Snapshot(self._client, res["safety"])

    # -- network and ports -----------------------------------------------------

    def get_network(self) -> NetworkInfo:
        """The sandbox's network: address, gateway, egress policy, refusal
        and traffic counters, limits and exposed ports."""
        return NetworkInfo.from_json(self._client.call("GET", self._path("/network")) or {})

    def set_network(
        self,
        internet: Optional[bool] = None,
        allow: Union[None, str, Iterable[str]] = None,
        deny: Union[None, str, Iterable[str]] = None,
    ) -> NetworkInfo:
        """Change the sandbox's egress policy and return its network.

        The current policy is read, each argument given replaces that part
        of it (``allow=[]`` empties the allow list; a non-empty one makes the
        policy default-deny), and the result is written back. It applies at
        once, without a restart, and is kept across stop/start, snapshot and
        fork. An entry the daemon cannot parse raises
        :class:`~stead.InvalidError` and nothing changes; the sandbox's own
        token (the agent's) may not call it (:class:`~stead.ForbiddenError`).
        """
        if internet is None and allow is None and deny is None:
            raise InvalidError("set_network: nothing to change; pass internet, allow or deny")
        p = self.get_network().policy
        if internet is not None:
            p.internet = bool(internet)
        if allow is not None:
            p.allow = _entries("allow", allow)
        if deny is not None:
            p.deny = _entries("deny", deny)
        n = NetworkInfo.from_json(self._client.call("PUT", self._path("/network"), body=p.to_json()) or {})
        self.raw["network"] = n.policy.to_json()
        return n

    def list_ports(self) -> List[Port]:
        """The sandbox's exposed ports, in port order (tokens are never listed)."""
        return [Port.from_json(d) for d in self._client.list_all(self._path("/ports"))]

    def expose_port(self, port: int, public: bool = False) -> ExposedPort:
        """Expose ``port`` (1-65535) through the daemon's port proxy.

        A private port (the default) comes back with its ``token``, shown
        only this once: exposing the port again rotates it. ``public`` makes
        it reachable without a token. Nothing needs to listen on the port
        yet. :class:`~stead.SteadError` with status 501 when the daemon runs
        without networking or without a port proxy."""
        body: Dict[str, Any] = {"public": True} if public else {}
        return ExposedPort.from_json(
            self._client.call("PUT", self._path("/ports/%d" % _port(port)), body=body) or {}
        )

    def unexpose_port(self, port: int) -> None:
        """Stop exposing ``port``: its URLs stop answering and its token
        stops working. :class:`~stead.NotFoundError` if it is not exposed."""
        self._client.call("DELETE", self._path("/ports/%d" % _port(port)))

    # -- orient -------------------------------------------------------------

    def orient(self, files: Optional[Sequence[str]] = None, events: Optional[int] = None) -> Orient:
        """What a resuming agent must read first, in one call: why and when
        the sandbox last stopped, its latest checkpoints, its open tasks,
        the tails of ``files`` (default /workspace/decisions.md and
        /workspace/plan.md; at most 8; missing ones are left out), and the
        latest session run with its in-doubt tool intents and last
        ``events`` events (default 20, at most 200).

        Returns an :class:`~stead.Orient`: ``.text`` is ready for a model's
        prompt (an in-doubt intent shows under "IN DOUBT"); the structured
        fields hold the same. Reading it does not count as activity, and
        works on a stopped sandbox."""
        if isinstance(files, str):
            files = [files]
        q = {"files": ",".join(files) if files else None, "events": events}
        d = self._client.call("GET", self._path("/orient"), q) or {}
        sb = Sandbox(self._client, d["sandbox"]) if d.get("sandbox") else None
        return Orient.from_json(d, sandbox=sb)


class Commands:
    """``sb.commands``: run commands in a running sandbox."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    def run(
        self,
        cmd: Union[str, Sequence[str]],
        args: Optional[Sequence[str]] = None,
        envs: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        timeout: Union[None, int, float, str] = None,
        stdin: Union[None, str, bytes] = None,
        background: bool = False,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        *,
        env: Optional[Dict[str, str]] = None,
        check: bool = True,
    ) -> CommandResult:
        """Run a command and return its :class:`~stead.CommandResult`
        (``.stdout``, ``.stderr`` as text, ``.exit_code``).

        ``cmd`` as a string without ``args`` runs through ``/bin/sh -c``;
        with ``args`` (or as a list) it is the program, run directly.

        As in E2B, a command that exits non-zero (or is killed by a signal)
        raises :class:`~stead.CommandExitException`, which carries
        ``exit_code``, ``stdout``, ``stderr`` and the whole ``result``; one
        whose ``timeout`` expires raises :class:`~stead.TimeoutException`
        (its ``result`` holds the output so far). With ``check=False``
        the result is returned either way: look at ``result.ok``,
        ``exit_code`` and ``timed_out``.

        Args:
            envs: extra environment variables (``env`` is the same).
            cwd: working directory (default /home/agent, / for root).
            user: ``"agent"`` (default) or ``"root"``; E2B's ``"user"`` is
                taken as ``"agent"``.
            timeout: seconds or a duration string; the process group is
                killed when it expires. Default: none (E2B's is 60 s).
            stdin: text or bytes written to stdin, then closed.
            background: return at once with ``pid`` and ``log_path`` (the
                file in the sandbox its output goes to); never raises for
                the exit, which comes later.
            on_stdout, on_stderr: called with each chunk of output (text)
                as it is produced; giving either streams the output over
                Server-Sent Events. The result still has all the output.
            check: raise for a non-zero exit (default True, as E2B).
        """
        envs = _one_of("envs", envs, "env", env)
        if isinstance(cmd, str):
            argv = [cmd] + list(args) if args is not None else ["/bin/sh", "-c", cmd]
        else:
            argv = list(cmd) + list(args or [])
        req: Dict[str, Any] = {"command": argv}
        if envs:
            req["env"] = envs
        if cwd:
            req["cwd"] = cwd
        if user:
            req["user"] = "agent" if user == "user" else user
        if timeout is not None:
            req["timeout"] = _duration(timeout)
        if stdin is not None:
            req["stdin"] = stdin.decode("utf-8") if isinstance(stdin, bytes) else stdin
        if background:
            req["background"] = True
        c = self._sb.client
        path = self._sb._path("/exec")
        # A buffered exec holds the connection until the command exits (no
        # socket timeout); a stream gets a keep-alive every 15 s.
        if background:
            return _result(c.request("POST", path, json_body=req, timeout=None).json() or {})
        if on_stdout is None and on_stderr is None:
            resp = c.request("POST", path, json_body=req, timeout=None)
            return _checked(_result(resp.json() or {}), check)
        resp = c.request("POST", path, json_body=req, accept="text/event-stream", timeout=60.0)
        with resp:
            if resp.content_type != "text/event-stream":
                res = _result(resp.json() or {})
                if on_stdout and res.stdout_bytes:
                    on_stdout(res.stdout)
                if on_stderr and res.stderr_bytes:
                    on_stderr(res.stderr)
                return _checked(res, check)
            return _checked(_stream(c, resp, on_stdout, on_stderr), check)


def _checked(res: CommandResult, check: bool) -> CommandResult:
    """``res``, or the exception E2B raises for it when ``check``."""
    if check and res.timed_out:
        raise TimeoutException("command timed out (its timeout expired and its process group was killed)",
                               result=res)
    if check and not res.ok:
        raise CommandExitException(res)
    return res


def _output(d: Dict[str, Any], field: str) -> bytes:
    """The exact bytes of an output field: the daemon sends output as text
    and adds ``<field>_base64`` only when the bytes are not valid UTF-8."""
    b64 = d.get(field + "_base64")
    if b64:
        return base64.b64decode(b64)
    return (d.get(field) or "").encode("utf-8")


def _result(d: Dict[str, Any]) -> CommandResult:
    return CommandResult(
        exit_code=d.get("exit_code", 0),
        stdout_bytes=_output(d, "stdout"),
        stderr_bytes=_output(d, "stderr"),
        signal=d.get("signal", ""),
        pid=d.get("pid", 0),
        timed_out=d.get("timed_out", False),
        truncated=d.get("truncated", False),
        log_path=d.get("log_path", ""),
    )


def _stream(c: Client, resp: Response, on_stdout: Optional[OutputCallback],
            on_stderr: Optional[OutputCallback]) -> CommandResult:
    out, err = bytearray(), bytearray()
    dec = {"stdout": codecs.getincrementaldecoder("utf-8")("replace"),
           "stderr": codecs.getincrementaldecoder("utf-8")("replace")}
    for name, data in c.events(resp):
        if name in ("stdout", "stderr"):
            ev = json.loads(data)
            chunk = _output(ev, "data")
            (out if name == "stdout" else err).extend(chunk)
            cb = on_stdout if name == "stdout" else on_stderr
            if cb is not None:
                text = dec[name].decode(chunk)
                if text:
                    cb(text)
        elif name == "exit":
            ev = json.loads(data)
            for kind, cb in (("stdout", on_stdout), ("stderr", on_stderr)):
                rest = dec[kind].decode(b"", final=True)
                if cb is not None and rest:
                    cb(rest)
            res = _result(ev)
            res.stdout_bytes, res.stderr_bytes = bytes(out), bytes(err)
            return res
        elif name == "error":
            ev = json.loads(data)
            raise ExecError(ev.get("error") or "exec failed")
    raise ExecError("the stream ended before the command exited (connection lost or daemon restarted)")


class Files:
    """``sb.files``: the sandbox's file system (absolute paths)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    def _path(self, suffix: str = "") -> str:
        return self._sb._path("/files" + suffix)

    def read(self, path: str, format: str = "text", encoding: str = "utf-8") -> Any:
        """A file's content: text by default (decoded as ``encoding``;
        undecodable bytes raise UnicodeDecodeError), ``format="bytes"`` for
        bytes, ``format="stream"`` for an iterator of byte chunks (read as
        they arrive; iterate to the end or close it)."""
        if format not in ("text", "bytes", "stream"):
            raise InvalidError("read %s: format %r: want \"text\", \"bytes\" or \"stream\"" % (path, format))
        resp = self._sb.client.request("GET", self._path("/content"), {"path": path}, accept="application/octet-stream")
        if format == "stream":
            return resp.chunks()
        data = resp.read()
        return data if format == "bytes" else data.decode(encoding)

    def read_bytes(self, path: str) -> bytes:
        """A file's bytes (``read(path, format="bytes")``)."""
        return self.read(path, format="bytes")

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """A file's text."""
        return self.read(path, encoding=encoding)

    def write(self, path: str, data: Union[str, bytes, Any], mode: Union[None, int, str] = None,
              make_dirs: bool = True) -> FileInfo:
        """Create or replace a file with ``data`` (text is UTF-8 encoded; a
        binary file object is streamed). ``mode`` is the permission bits as
        an int (``0o755``) or octal string (``"0755"``); default 0644.
        Missing parent directories are created (as E2B does) unless
        ``make_dirs=False``, which raises :class:`~stead.NotFoundError`
        for them. Returns the written file's :class:`~stead.FileInfo`
        (``name``, ``path``, ``type`` as E2B's WriteInfo, and more)."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        q: Dict[str, Any] = {"path": path}
        if mode is not None:
            q["mode"] = "0%o" % (mode & 0o7777) if isinstance(mode, int) else mode

        def put() -> FileInfo:
            resp = self._sb.client.request("PUT", self._path("/content"), q, body=data,
                                           content_type="application/octet-stream")
            return FileInfo.from_json(resp.json() or {})

        parent = posixpath.dirname(path)
        if not make_dirs or parent in ("", "/"):
            return put()
        if not isinstance(data, (bytes, bytearray, memoryview)):
            self.mkdir(parent, parents=True)  # a stream cannot be sent twice
            return put()
        try:
            return put()
        except NotFoundError:
            if self.exists(parent):
                raise  # not the parent's absence (e.g. the sandbox is gone)
            self.mkdir(parent, parents=True)
            return put()

    def list(self, path: str, depth: int = 1) -> List[FileInfo]:
        """The entries of a directory; with ``depth`` > 1 (as E2B's), those
        of its subdirectories too, down to that many levels (symlinks to
        directories are not followed)."""
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise InvalidError("list %s: depth %r: want a whole number >= 1" % (path, depth))
        out = [FileInfo.from_json(d) for d in self._sb.client.list_all(self._path("/list"), {"path": path})]
        if depth > 1:
            for d in [e for e in out if e.is_dir]:
                out.extend(self.list(d.path, depth - 1))
        return out

    def stat(self, path: str) -> FileInfo:
        """Describe a file (symlinks are not followed)."""
        return FileInfo.from_json(self._sb.client.call("GET", self._path("/stat"), {"path": path}))

    def get_info(self, path: str) -> FileInfo:
        """E2B's name of :meth:`stat`."""
        return self.stat(path)

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists."""
        try:
            self.stat(path)
            return True
        except NotFoundError:
            return False

    def mkdir(self, path: str, parents: bool = False) -> None:
        """Create a directory; with ``parents``, missing parents too and no error if it exists."""
        body: Dict[str, Any] = {"path": path}
        if parents:
            body["parents"] = True
        self._sb.client.call("POST", self._path("/mkdir"), body=body)

    def make_dir(self, path: str) -> bool:
        """Create a directory and its missing parents, as E2B's make_dir:
        True when it was created, False when it existed already."""
        if self.exists(path):
            return False
        self.mkdir(path, parents=True)
        return True

    def remove(self, path: str, recursive: bool = False) -> None:
        """Remove a file or an empty directory; with ``recursive``, a whole
        tree (E2B's remove takes a tree without asking: here it must be
        said)."""
        self._sb.client.call("DELETE", self._path(), {"path": path, "recursive": True if recursive else None})

    def rename(self, src: str, dst: str) -> None:
        """Rename or move a file or directory within the sandbox."""
        self._sb.client.call("POST", self._path("/rename"), body={"from": src, "to": dst})

    def download_tar(self, path: str) -> bytes:
        """A tar of ``path`` (entries named relative to its parent)."""
        return self._sb.client.request("GET", self._path("/tar"), {"path": path}, accept="application/x-tar").read()

    def upload_tar(self, path: str, tar: Union[bytes, Any]) -> None:
        """Extract a tar (bytes or a binary file object) under directory ``path``."""
        self._sb.client.request("PUT", self._path("/tar"), {"path": path}, body=tar,
                                content_type="application/x-tar").read()


class Checkpoints:
    """Checkpoint documents of a sandbox (``sb.state`` / ``sb.checkpoints``):
    named JSON documents kept outside the sandbox, versioned, with
    optimistic concurrency. ``agent`` names an agent within the sandbox
    (default: the sandbox's default agent)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    def _path(self, name: str = "", suffix: str = "") -> str:
        p = self._sb._path("/checkpoints")
        if name:
            p += "/" + quote(name)
        return p + suffix

    def put(self, name: str, body: Any = _MISSING, if_version: Optional[int] = None, agent: Optional[str] = None,
            run: Optional[str] = None, keep: Optional[int] = None, *, doc: Any = _MISSING) -> Checkpoint:
        """Write ``body`` (anything JSON-serialisable) as the next version
        of document ``name``, atomically (``doc=`` is its older name).

        Args:
            if_version: the latest version the document must have (0: it
                must not exist yet); otherwise :class:`~stead.ConflictError`
                and nothing changes.
            agent: the named agent within the sandbox.
            run: a run id recorded as provenance.
            keep: set the document's history depth (default 10).

        Returns the new version, without its body. A document that fails
        the document's JSON Schema raises :class:`~stead.InvalidError`.
        """
        if body is _MISSING and doc is _MISSING:
            raise TypeError("put(%r): the document's body is missing" % name)
        if body is not _MISSING and doc is not _MISSING:
            raise TypeError("put(%r): give body or doc, not both" % name)
        if body is _MISSING:
            body = doc
        headers = {}
        if if_version is not None:
            headers["If-Match"] = '"%d"' % if_version
        q = {"agent": agent or None, "run": run or None, "keep": keep or None}
        resp = self._sb.client.request("PUT", self._path(name), q, body=json.dumps(body).encode("utf-8"),
                                       content_type="application/json", headers=headers)
        return Checkpoint.from_json(resp.json() or {})

    def get(self, name: str, version: Optional[int] = None, agent: Optional[str] = None) -> Checkpoint:
        """Read the latest version (or ``version``) of a document; the
        parsed document is ``.body``."""
        return Checkpoint.from_json(
            self._sb.client.call("GET", self._path(name), {"agent": agent or None, "version": version or None})
        )

    def history(self, name: str, agent: Optional[str] = None) -> List[Checkpoint]:
        """The kept versions of a document, oldest first, without bodies."""
        return [Checkpoint.from_json(d) for d in
                self._sb.client.list_all(self._path(name, "/versions"), {"agent": agent or None})]

    def rollback(self, name: str, version: int, agent: Optional[str] = None, run: Optional[str] = None,
                 if_version: Optional[int] = None) -> Checkpoint:
        """Write version ``version``'s body as the document's next version
        (its note says "rollback from N"); history is kept."""
        body: Dict[str, Any] = {"version": version}
        if run:
            body["run"] = run
        if if_version is not None:
            body["if_version"] = if_version
        return Checkpoint.from_json(
            self._sb.client.call("POST", self._path(name, "/rollback"), {"agent": agent or None}, body=body)
        )

    def list(self) -> List[CheckpointInfo]:
        """Every checkpoint document of the sandbox, all agents."""
        return [CheckpointInfo.from_json(d) for d in self._sb.client.list_all(self._path())]

    def delete(self, name: str, agent: Optional[str] = None) -> None:
        """Delete a document with every version and its schema."""
        self._sb.client.call("DELETE", self._path(name), {"agent": agent or None})

    def set_schema(self, name: str, schema: Optional[Dict[str, Any]], agent: Optional[str] = None) -> CheckpointInfo:
        """Set the JSON Schema every later write of the document must pass;
        None removes it."""
        q = {"agent": agent or None}
        if schema is None:
            d = self._sb.client.call("DELETE", self._path(name, "/schema"), q)
        else:
            d = self._sb.client.call("PUT", self._path(name, "/schema"), q, body=schema)
        return CheckpointInfo.from_json(d)
