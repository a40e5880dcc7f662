"""The daemon's event log (``GET /v1/events``) and webhooks (``/v1/webhooks``).

Events say what happened to the tenant's sandboxes: ``sandbox.created``,
``sandbox.started``, ``sandbox.paused``, ``sandbox.resumed``,
``sandbox.stopped`` (with its ``reason``), ``sandbox.archived``,
``sandbox.deleted``, ``sandbox.purged``, ``snapshot.created``,
``snapshot.deleted``, ``sandbox.forked``, ``sandbox.rolled_back``,
``backup.pushed``, ``backup.restored``, ``drill.passed`` ... Each is a dict
with ``id`` (only grows), ``time``, ``type``, ``tenant``, ``sandbox``,
``state``, ``reason`` and ``data``.
"""

import hashlib
import hmac
import json
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from .client import Client, default_client, quote
from .errors import SteadError, UnreachableError

__all__ = [
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

#: The header of a delivery's signature: ``t=<unix seconds>,v1=<hex>``.
SIGNATURE_HEADER = "Stead-Signature"

# A stream gets a keep-alive comment every 15 s: a socket quiet for this
# long is dead.
_STREAM_TIMEOUT = 60.0


def _query(after: int, types: Optional[Sequence[str]], sandbox: Optional[str], since: Optional[str], limit: Optional[int]) -> Dict[str, Any]:
    return {
        "after": after or None,
        "type": ",".join(types) if types else None,
        "sandbox": sandbox,
        "since": since,
        "limit": limit,
    }


def list_events(
    after: int = 0,
    types: Optional[Sequence[str]] = None,
    sandbox: Optional[str] = None,
    since: Optional[str] = None,
    limit: Optional[int] = None,
    client: Optional[Client] = None,
) -> Dict[str, Any]:
    """One page of the tenant's events with an id above ``after``, oldest
    first: ``{"items": [...], "next": id, "more": bool}``. ``types`` are
    type prefixes (``["sandbox.", "snapshot.created"]``), ``sandbox`` an id
    or a name, ``since`` an RFC 3339 time. Page on with ``after=page["next"]``
    while ``page["more"]``."""
    c = default_client(client)
    return c.call("GET", "/v1/events", _query(after, types, sandbox, since, limit))


def stream_events(
    after: int = 0,
    types: Optional[Sequence[str]] = None,
    sandbox: Optional[str] = None,
    reconnect: bool = True,
    client: Optional[Client] = None,
) -> Iterator[Dict[str, Any]]:
    """Yield every event with an id above ``after``, then each new one as it
    happens, forever (server-sent events). When the connection breaks (a
    daemon restart), it reconnects after the last id yielded, so no event
    is skipped or repeated; ``reconnect=False`` ends the iterator instead.
    A refusal of the daemon (a bad key, a bad filter) is raised."""
    c = default_client(client)
    wait = 0.5
    while True:
        try:
            resp = c.request("GET", "/v1/events", _query(after, types, sandbox, None, None),
                             accept="text/event-stream", timeout=_STREAM_TIMEOUT)
            try:
                for name, data in c.events(resp):
                    if name == "error":
                        raise SteadError("event stream: %s" % json.loads(data or "{}").get("error", data))
                    if name != "message":
                        continue
                    e = json.loads(data)
                    after = e.get("id", after)
                    wait = 0.5
                    yield e
            finally:
                resp.close()
        except (UnreachableError, OSError):
            pass
        except SteadError as e:
            if e.status is not None and 400 <= e.status < 500:
                raise
        if not reconnect:
            return
        time.sleep(wait)
        wait = min(wait * 2, 10.0)


def create_webhook(
    url: str,
    types: Optional[Sequence[str]] = None,
    secret: Optional[str] = None,
    after: Optional[int] = None,
    client: Optional[Client] = None,
) -> Dict[str, Any]:
    """Subscribe ``url`` to the tenant's events (of ``types`` prefixes; all
    when None). The answer's ``secret`` (generated when None is given) is
    shown this once. ``after`` also delivers the stored events after that
    id. Deliveries are POSTs of one event as JSON, in id order, at least
    once (deduplicate by the ``Stead-Event-Id`` header), signed: check them
    with :func:`verify_webhook`."""
    body: Dict[str, Any] = {"url": url}
    if types:
        body["types"] = list(types)
    if secret:
        body["secret"] = secret
    if after is not None:
        body["after"] = after
    return default_client(client).call("POST", "/v1/webhooks", body=body)


def list_webhooks(client: Optional[Client] = None) -> List[Dict[str, Any]]:
    """The tenant's webhooks, each with its cursor and last attempt."""
    return default_client(client).list_all("/v1/webhooks")


def delete_webhook(webhook_id: str, client: Optional[Client] = None) -> None:
    """Remove a webhook and its delivery log."""
    default_client(client).call("DELETE", "/v1/webhooks/" + quote(webhook_id))


def webhook_deliveries(webhook_id: str, limit: Optional[int] = None, client: Optional[Client] = None) -> List[Dict[str, Any]]:
    """A webhook's delivery attempts, newest first (``status_code``,
    ``error``, ``duration_ms``, ``ok``, ``attempt``)."""
    return (default_client(client).call("GET", "/v1/webhooks/" + quote(webhook_id) + "/deliveries",
                                       {"limit": limit}) or {}).get("items") or []


def redeliver(delivery_id: int, client: Optional[Client] = None) -> Dict[str, Any]:
    """Send a past delivery's event again, now; returns the new attempt."""
    return default_client(client).call("POST", "/v1/webhooks/deliveries/%d/redeliver" % int(delivery_id))


def verify_webhook(
    secret: Union[str, bytes],
    header: str,
    body: bytes,
    tolerance: float = 300.0,
    now: Optional[float] = None,
) -> bool:
    """Whether a delivery is genuine: ``header`` is the ``Stead-Signature``
    value, ``body`` the raw request body (before decoding). True when a
    ``v1`` signature is HMAC-SHA256(secret, ``"<t>.<body>"``) and ``t`` is
    within ``tolerance`` seconds of now (a negative tolerance skips that
    check). Compare in constant time; refuse the delivery when False."""
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    ts, sigs = None, []
    for part in (header or "").split(","):
        k, sep, v = part.strip().partition("=")
        if not sep:
            continue
        if k == "t":
            ts = v
        elif k == "v1":
            sigs.append(v)
    if ts is None or not ts.isdigit() or (len(ts) > 1 and ts.startswith("0")) or not sigs:
        return False
    if tolerance >= 0 and abs((time.time() if now is None else now) - int(ts)) > tolerance:
        return False
    want = hmac.new(key, ts.encode("ascii") + b"." + bytes(body), hashlib.sha256).hexdigest()
    return any(hmac.compare_digest(want, s) for s in sigs)
