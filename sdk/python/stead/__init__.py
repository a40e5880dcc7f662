"""stead: the Python SDK of the stead daemon (long-running AI-agent sandboxes).

Standard library only. Shaped like E2B's SDK::

    from stead import Sandbox, CommandExitException

    with Sandbox.create() as sbx:                      # killed (purged) at the end
        print(sbx.commands.run("echo hello").stdout)   # STEAD_URL / STEAD_API_KEY
        sbx.files.write("/home/agent/a.txt", "hi")
        print(sbx.files.read("/home/agent/a.txt"))     # text; format="bytes" for bytes

And stead's persistence beside it::

    sb = stead.Sandbox.create(name="agent-1", keep=True)
    try:
        sb.commands.run("exit 3")
    except CommandExitException as e:                  # a non-zero exit raises
        assert e.exit_code == 3
    sb.files.write("/workspace/plan.md", "# plan\\n")
    cp = sb.state.put("progress", {"step": 1})
    sb.state.put("progress", {"step": 2}, if_version=cp.version)
    snap = sb.snapshot(label="before refactor")
    sb.rollback(snap)
    run = sb.session.start_run(sb.session.create_thread("main"))
    sb.session.append(run, "tool_intent", {"tool": "deploy"}, idempotency_key="deploy-1")
    print(sb.orient().text)                            # shows the intent as IN DOUBT
    sb.set_network(allow=["*.pypi.org"])               # egress: default-deny but PyPI
    print(sb.expose_port(8080).token)                  # private port, token shown once
    sb.delete(purge=True)
    stead.Secret.set("OPENAI_API_KEY", key)            # stored encrypted, never shown again
    stead.Sandbox.create(secrets=["OPENAI_API_KEY"])   # in the service's and commands' env

See sdk/python/README.md for the whole surface.
"""

from .client import DEFAULT_ENDPOINT, Client, Response, resolve_api_key, resolve_endpoint
from .errors import (
    AuthenticationException,
    BudgetError,
    CommandExitException,
    Conflict,
    ConflictError,
    ExecError,
    InvalidArgumentException,
    NotEnoughSpaceException,
    NotFoundException,
    RateLimitError,
    RateLimitException,
    SandboxException,
    TimeoutException,
    Forbidden,
    ForbiddenError,
    Invalid,
    InvalidError,
    NotFound,
    NotFoundError,
    Quota,
    QuotaError,
    SteadError,
    Unauthenticated,
    UnauthenticatedError,
    UnreachableError,
)
from .models import (
    Checkpoint,
    CheckpointInfo,
    CommandResult,
    Event,
    EventPage,
    ExposedPort,
    FileInfo,
    KVEntry,
    ModelSession,
    NetworkInfo,
    NetworkPolicy,
    Observation,
    Orient,
    OrientFile,
    Port,
    Run,
    RunResume,
    SandboxInfo,
    Task,
    Thread,
)
from .sandbox import Checkpoints, Commands, Files, Sandbox, SandboxState, Session, Snapshot
from .events import (
    SIGNATURE_HEADER,
    create_webhook,
    delete_webhook,
    list_events,
    list_webhooks,
    redeliver,
    stream_events,
    verify_webhook,
    webhook_deliveries,
)
from .session import EVENT_TYPES
from .tasks import KV, TASK_STATES, Observations, Tasks
from .secret import Secret
from .tenants import ROLES, APIKey, Tenant
from .volume import Volume

__version__ = "0.2.0"

__all__ = [
    "Client",
    "Response",
    "DEFAULT_ENDPOINT",
    "resolve_endpoint",
    "resolve_api_key",
    "Sandbox",
    "SandboxState",
    "Snapshot",
    "Volume",
    "Secret",
    "Tenant",
    "APIKey",
    "ROLES",
    "Commands",
    "Files",
    "Checkpoints",
    "Session",
    "Tasks",
    "Observations",
    "KV",
    "EVENT_TYPES",
    "TASK_STATES",
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
    "Orient",
    "OrientFile",
    "Task",
    "Observation",
    "KVEntry",
    "NetworkPolicy",
    "NetworkInfo",
    "Port",
    "ExposedPort",
    "SteadError",
    "InvalidError",
    "UnauthenticatedError",
    "ForbiddenError",
    "NotFoundError",
    "ConflictError",
    "QuotaError",
    "UnreachableError",
    "ExecError",
    "BudgetError",
    "RateLimitError",
    "TimeoutException",
    "CommandExitException",
    "SandboxException",
    "NotFoundException",
    "AuthenticationException",
    "InvalidArgumentException",
    "NotEnoughSpaceException",
    "RateLimitException",
    "Invalid",
    "Unauthenticated",
    "Forbidden",
    "NotFound",
    "Conflict",
    "Quota",
    "list_events",
    "stream_events",
    "create_webhook",
    "list_webhooks",
    "delete_webhook",
    "webhook_deliveries",
    "redeliver",
    "verify_webhook",
    "SIGNATURE_HEADER",
]
