"""Sandboxes: lifecycle, commands, files, snapshots, checkpoint state, orient and network."""

from __future__ import annotations

import base64
import codecs
import json
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

from .client import Client, Response, default_client, quote
from .errors import ExecError, InvalidError
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
)
from .session import Session
from .tasks import KV, Observations, Tasks

__all__ = ["Sandbox", "Snapshot", "Commands", "Files", "Checkpoints", "SandboxState", "Session"]

OutputCallback = Callable[[str], Any]


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
        return [cls(c, d) for d in c.call("GET", "/v1/snapshots", {"sandbox": sandbox or None}) or []]

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

    def put(self, name: str, doc: Any, if_version: Optional[int] = None, agent: Optional[str] = None,
            run: Optional[str] = None, keep: Optional[int] = None) -> Checkpoint:
        """See :meth:`Checkpoints.put`."""
        return self._checkpoints.put(name, doc, if_version=if_version, agent=agent, run=run, keep=keep)

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
    """A stead sandbox, E2B style::

        import stead
        sb = stead.Sandbox.create(name="agent-1")
        res = sb.commands.run("echo hello")
        sb.files.write("/workspace/plan.md", "# plan\\n")
        sb.state.put("progress", {"step": 3})
        sb.pause(); sb.resume()

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
        """The sandbox's IPv4 address on the daemon's bridge ("" without
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
        client: Optional[Client] = None,
        name: Optional[str] = None,
        template: Optional[str] = None,
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
        """Create a sandbox (started unless ``no_start``).

        Args:
            client: the daemon to use; default ``stead.Client()``.
            name: unique name in the tenant (default: the id).
            template: template id (default ``host``).
            instance_type: micro, small (default), medium or large.
            env: environment of the service and of commands.
            service: the supervised agent service: a dict as the API's
                Service (command, env, cwd, user, restart, stop_signal,
                stop_line, stop_grace), an argv list, or a shell string.
            volumes: mounts, as dicts (volume, path, sub_path, read_only)
                or the CLI form ``"NAME[/SUB/PATH]:/mount/path[:ro]"``.
            idle_timeout: seconds or a duration string such as ``"15m"``
                (default 15m; 0 disables auto-stop).
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
            labels: labels (``{"team": "research"}``); keys scoped by a
                label selector reach the sandboxes carrying theirs, and a
                label-scoped key's creates get its labels.
        """
        c = default_client(client)
        req: Dict[str, Any] = {}
        for k, v in (
            ("name", name),
            ("template", template),
            ("instance_type", instance_type),
            ("env", env),
            ("service", _service(service)),
            ("idle_timeout", _duration(idle_timeout)),
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
        return cls(c, c.call("POST", "/v1/sandboxes", body=req))

    @classmethod
    def get(cls, id_or_name: str, client: Optional[Client] = None) -> "Sandbox":
        """The sandbox as it is, without starting it."""
        c = default_client(client)
        return cls(c, c.call("GET", "/v1/sandboxes/" + quote(id_or_name)))

    @classmethod
    def connect(cls, id_or_name: str, client: Optional[Client] = None) -> "Sandbox":
        """Bring a sandbox back for use, as E2B's connect does: a stopped
        one is started, a paused one resumed, a running one returned as it
        is. Raises :class:`~stead.NotFoundError` if there is no such sandbox."""
        sb = cls.get(id_or_name, client)
        if sb.status != "running":
            sb.start()
        return sb

    @classmethod
    def list(cls, client: Optional[Client] = None, all: bool = False) -> List["Sandbox"]:
        """The tenant's sandboxes; ``all`` includes soft-deleted ones."""
        c = default_client(client)
        return [cls(c, d) for d in c.call("GET", "/v1/sandboxes", {"all": True if all else None}) or []]

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
        or with ``purge`` destroy it for good."""
        return self._update(self._client.call("DELETE", self._path(), {"purge": True if purge else None}))

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
        return [Port.from_json(d) for d in self._client.call("GET", self._path("/ports")) or []]

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
        env: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        timeout: Union[None, int, float, str] = None,
        stdin: Union[None, str, bytes] = None,
        background: bool = False,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
    ) -> CommandResult:
        """Run a command and return its :class:`~stead.CommandResult`.

        ``cmd`` as a string without ``args`` runs through ``/bin/sh -c``;
        with ``args`` (or as a list) it is the program, run directly.

        Args:
            env: extra environment variables.
            cwd: working directory (default /home/agent, / for root).
            user: ``"agent"`` (default) or ``"root"``.
            timeout: seconds or a duration string; the process group is
                killed when it expires (``result.timed_out``).
            stdin: text or bytes written to stdin, then closed.
            background: return at once with ``pid`` and ``log_path``.
            on_stdout, on_stderr: called with each chunk of output (text)
                as it is produced; giving either streams the output over
                Server-Sent Events. The result still has all the output.

        A non-zero exit is not an error: check ``result.exit_code`` (or
        ``result.ok``).
        """
        if isinstance(cmd, str):
            argv = [cmd] + list(args) if args is not None else ["/bin/sh", "-c", cmd]
        else:
            argv = list(cmd) + list(args or [])
        req: Dict[str, Any] = {"command": argv}
        if env:
            req["env"] = env
        if cwd:
            req["cwd"] = cwd
        if user:
            req["user"] = user
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
        if background or (on_stdout is None and on_stderr is None):
            resp = c.request("POST", path, json_body=req, timeout=None)
            return _result(resp.json() or {})
        resp = c.request("POST", path, json_body=req, accept="text/event-stream", timeout=60.0)
        with resp:
            if resp.content_type != "text/event-stream":
                res = _result(resp.json() or {})
                if on_stdout and res.stdout_bytes:
                    on_stdout(res.stdout)
                if on_stderr and res.stderr_bytes:
                    on_stderr(res.stderr)
                return res
            return _stream(c, resp, on_stdout, on_stderr)


def _b64(v: Optional[str]) -> bytes:
    return base64.b64decode(v) if v else b""


def _result(d: Dict[str, Any]) -> CommandResult:
    return CommandResult(
        exit_code=d.get("exit_code", 0),
        stdout_bytes=_b64(d.get("stdout")),
        stderr_bytes=_b64(d.get("stderr")),
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
            chunk = _b64(ev.get("data"))
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

    def read(self, path: str) -> bytes:
        """A file's bytes."""
        resp = self._sb.client.request("GET", self._path("/content"), {"path": path}, accept="application/octet-stream")
        return resp.read()

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """A file's text."""
        return self.read(path).decode(encoding)

    def write(self, path: str, data: Union[str, bytes, Any], mode: Union[None, int, str] = None) -> FileInfo:
        """Create or replace a file with ``data`` (text is UTF-8 encoded; a
        binary file object is streamed). ``mode`` is the permission bits as
        an int (``0o755``) or octal string (``"0755"``); default 0644.
        Missing parent directories are not created (see :meth:`mkdir`)."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        q: Dict[str, Any] = {"path": path}
        if mode is not None:
            q["mode"] = "0%o" % (mode & 0o7777) if isinstance(mode, int) else mode
        resp = self._sb.client.request("PUT", self._path("/content"), q, body=data,
                                       content_type="application/octet-stream")
        return FileInfo.from_json(resp.json() or {})

    def list(self, path: str) -> List[FileInfo]:
        """The entries of a directory."""
        return [FileInfo.from_json(d) for d in self._sb.client.call("GET", self._path("/list"), {"path": path}) or []]

    def stat(self, path: str) -> FileInfo:
        """Describe a file (symlinks are not followed)."""
        return FileInfo.from_json(self._sb.client.call("GET", self._path("/stat"), {"path": path}))

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists."""
        from .errors import NotFoundError

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

    def remove(self, path: str, recursive: bool = False) -> None:
        """Remove a file or an empty directory; with ``recursive``, a whole tree."""
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

    def put(self, name: str, doc: Any, if_version: Optional[int] = None, agent: Optional[str] = None,
            run: Optional[str] = None, keep: Optional[int] = None) -> Checkpoint:
        """Write ``doc`` (anything JSON-serialisable) as the next version of
        document ``name``, atomically.

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
        headers = {}
        if if_version is not None:
            headers["If-Match"] = '"%d"' % if_version
        q = {"agent": agent or None, "run": run or None, "keep": keep or None}
        resp = self._sb.client.request("PUT", self._path(name), q, body=json.dumps(doc).encode("utf-8"),
                                       content_type="application/json", headers=headers)
        return Checkpoint.from_json(resp.json() or {})

    def get(self, name: str, version: Optional[int] = None, agent: Optional[str] = None) -> Checkpoint:
        """Read the latest version (or ``version``) of a document; the
        parsed document is ``.doc``."""
        return Checkpoint.from_json(
            self._sb.client.call("GET", self._path(name), {"agent": agent or None, "version": version or None})
        )

    def history(self, name: str, agent: Optional[str] = None) -> List[Checkpoint]:
        """The kept versions of a document, oldest first, without bodies."""
        return [Checkpoint.from_json(d) for d in
                self._sb.client.call("GET", self._path(name, "/versions"), {"agent": agent or None}) or []]

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
        return [CheckpointInfo.from_json(d) for d in self._sb.client.call("GET", self._path()) or []]

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
