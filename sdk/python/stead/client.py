"""The HTTP transport of the stead SDK: endpoint and API-key resolution,
requests over TCP or a unix socket, problem-document errors, and
Server-Sent Events."""

from __future__ import annotations

import datetime
import http.client
import json
import os
import socket
import ssl
import urllib.parse
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from .errors import SteadError, TimeoutException, UnreachableError, error_from_response

__all__ = ["Client", "Response", "DEFAULT_ENDPOINT", "DEFAULT_SOCKET", "DEFAULT_ADMIN_KEY"]

#: The TCP address the daemon listens on by default.
DEFAULT_ENDPOINT = "http://127.0.0.1:7878"
#: The daemon's local socket; used when it exists and STEAD_ENDPOINT is unset.
DEFAULT_SOCKET = "/run/stead/stead.sock"
#: The bootstrap admin key written by ``stead serve``.
DEFAULT_ADMIN_KEY = "/var/lib/stead/admin.key"

#: How much of an error response is read.
_MAX_ERROR_BODY = 64 << 10

_UNSET = object()


def resolve_endpoint(endpoint: Optional[str] = None) -> str:
    """Return the endpoint as the CLI picks it: ``endpoint`` if given, else
    ``$STEAD_ENDPOINT`` (or ``$STEAD_URL``, its alias for code ported from
    E2B-style SDKs), else ``unix:///run/stead/stead.sock`` if that socket
    exists, else ``http://127.0.0.1:7878``."""
    if endpoint:
        return endpoint
    for name in ("STEAD_ENDPOINT", "STEAD_URL"):
        env = os.environ.get(name)
        if env:
            return env
    if os.path.exists(DEFAULT_SOCKET):
        return "unix://" + DEFAULT_SOCKET
    return DEFAULT_ENDPOINT


def resolve_api_key(api_key: Optional[str] = None) -> str:
    """Return the API key as the CLI picks it: ``api_key`` if given, else
    ``$STEAD_API_KEY``, else the contents of ``$STEAD_DATA_DIR/admin.key``
    (or ``/var/lib/stead/admin.key`` without STEAD_DATA_DIR) when readable,
    else ``""``."""
    if api_key:
        return api_key
    env = os.environ.get("STEAD_API_KEY")
    if env:
        return env
    path = DEFAULT_ADMIN_KEY
    data_dir = os.environ.get("STEAD_DATA_DIR")
    if data_dir:
        path = os.path.join(data_dir, "admin.key")
    try:
        with open(path, "r", encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


class _UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection over a unix socket."""

    def __init__(self, path: str, timeout: Optional[float] = None) -> None:
        super().__init__("stead", timeout=timeout)
        self._path = path

    def connect(self) -> None:  # noqa: D401 - http.client API
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if self.timeout is not None:
                s.settimeout(self.timeout)
            s.connect(self._path)
        except BaseException:
            s.close()
            raise
        self.sock = s


class Response:
    """A successful (2xx) response whose body has not been read yet.

    Use :meth:`json`, :meth:`read` or :meth:`lines`; :meth:`close` (or a
    ``with`` block) releases the connection.
    """

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self._conn = conn
        self._resp = resp
        self.status = resp.status
        self.headers = resp.headers

    @property
    def content_type(self) -> str:
        """The media type of the body, lower-cased, without parameters."""
        return (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()

    def read(self) -> bytes:
        """Read the whole body and close."""
        try:
            return self._resp.read()
        finally:
            self.close()

    def json(self) -> Any:
        """Read the body as JSON (None when empty) and close."""
        body = self.read()
        if not body.strip():
            return None
        return json.loads(body.decode("utf-8"))

    def chunks(self, size: int = 64 << 10) -> Iterator[bytes]:
        """The body in chunks of at most ``size`` bytes as they arrive;
        closes the response at the end (or when the iterator is closed)."""
        try:
            while True:
                b = self._resp.read(size)
                if not b:
                    return
                yield b
        finally:
            self.close()

    def readline(self) -> bytes:
        """Read one line of the body as it arrives (b"" at the end)."""
        return self._resp.readline()

    def close(self) -> None:
        """Release the connection."""
        try:
            self._resp.close()
        finally:
            self._conn.close()

    def __enter__(self) -> "Response":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Client:
    """A connection to one stead daemon.

    ``Client()`` resolves the endpoint and the key like the ``stead`` CLI:

    * endpoint: ``endpoint``, else ``$STEAD_ENDPOINT`` (alias
      ``$STEAD_URL``), else the local socket
      ``unix:///run/stead/stead.sock`` if it exists, else
      ``http://127.0.0.1:7878``. ``http://``, ``https://`` and
      ``unix:///path/to.sock`` endpoints are supported.
    * API key: ``api_key``, else ``$STEAD_API_KEY``, else the contents of
      ``$STEAD_DATA_DIR/admin.key`` (default ``/var/lib/stead/admin.key``).

    ``timeout`` is the socket timeout in seconds of ordinary calls
    (commands get their own). Each call uses its own connection, so a
    client is safe to share between threads.

    ``tenant``, for an admin key, is the tenant the calls act in (sent as
    the ``X-Stead-Tenant`` header; default: the key's own). See
    :meth:`with_tenant`.
    """

    def __init__(
        self,
        endpoint: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: Optional[float] = 300.0,
        tenant: Optional[str] = None,
    ) -> None:
        self.endpoint = resolve_endpoint(endpoint)
        self.api_key = resolve_api_key(api_key)
        self.timeout = timeout
        self.tenant = tenant
        ep = self.endpoint
        if ep.startswith("unix://"):
            path = ep[len("unix://"):]
            if not path:
                raise ValueError("endpoint %r: unix endpoints are unix:///path/to.sock" % ep)
            self._scheme, self._netloc, self._prefix, self._unix = "unix", "", "", path
        elif ep.startswith("http://") or ep.startswith("https://"):
            u = urllib.parse.urlsplit(ep)
            if not u.netloc:
                raise ValueError("endpoint %r: no host" % ep)
            self._scheme, self._netloc, self._prefix, self._unix = u.scheme, u.netloc, u.path.rstrip("/"), ""
        else:
            raise ValueError("endpoint %r: want http://host:port or unix:///path/to.sock" % ep)

    def __repr__(self) -> str:
        return "stead.Client(%r)" % self.endpoint

    def with_tenant(self, tenant: Optional[str]) -> "Client":
        """A client like this one whose calls act in ``tenant`` (admin keys
        only; another key naming another tenant gets 403)."""
        return Client(self.endpoint, self.api_key, self.timeout, tenant)

    # -- transport ---------------------------------------------------------

    def _connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        if self._scheme == "unix":
            return _UnixHTTPConnection(self._unix, timeout=timeout)
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._netloc, timeout=timeout, context=ssl.create_default_context())
        return http.client.HTTPConnection(self._netloc, timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        query: Optional[Mapping[str, Any]] = None,
        json_body: Any = _UNSET,
        body: Any = None,
        content_type: Optional[str] = None,
        accept: str = "application/json",
        headers: Optional[Mapping[str, str]] = None,
        timeout: Any = _UNSET,
    ) -> Response:
        """Send one request and return the 2xx :class:`Response`, or raise
        the :class:`~stead.SteadError` subclass of the problem the daemon
        answered with.

        ``path`` is already escaped; ``query`` values of None are left
        out and booleans are sent as ``true``/``false``. ``json_body`` is
        encoded as JSON; otherwise ``body`` (bytes or a binary file) is sent
        as is with ``content_type``.
        """
        url = self._prefix + path
        if query:
            q = []
            for k, v in query.items():
                if v is None:
                    continue
                if isinstance(v, bool):
                    v = "true" if v else "false"
                q.append((k, str(v)))
            if q:
                url += "?" + urllib.parse.urlencode(q)
        h: Dict[str, str] = {"Accept": accept + ", application/problem+json"}
        if self.api_key:
            h["Authorization"] = "Bearer " + self.api_key
        if self.tenant:
            h["X-Stead-Tenant"] = self.tenant
        if json_body is not _UNSET:
            body = json.dumps(json_body).encode("utf-8")
            content_type = "application/json"
        if content_type:
            h["Content-Type"] = content_type
        if body is None and method in ("POST", "PUT", "PATCH"):
            body = b""
        if headers:
            h.update(headers)
        conn = self._connection(self.timeout if timeout is _UNSET else timeout)
        try:
            try:
                conn.request(method, url, body=body, headers=h)
            except (ConnectionRefusedError, FileNotFoundError, socket.gaierror) as e:
                raise UnreachableError(
                    "cannot reach the stead daemon at %s (is `stead serve` running? "
                    "set STEAD_ENDPOINT or pass endpoint=): %s" % (self.endpoint, e)
                ) from e
            resp = conn.getresponse()
        except SteadError:
            conn.close()
            raise
        except socket.timeout as e:
            conn.close()
            raise TimeoutException("%s %s: no answer from the daemon within %ss" % (method, path, conn.timeout)) from e
        except OSError as e:
            conn.close()
            raise SteadError("%s %s: %s" % (method, path, e)) from e
        if 200 <= resp.status < 300:
            return Response(conn, resp)
        try:
            data = resp.read(_MAX_ERROR_BODY)
        except OSError:
            data = b""
        finally:
            conn.close()
        raise error_from_response(resp.status, resp.headers.get("Content-Type") or "", data)

    def call(self, method: str, path: str, query: Optional[Mapping[str, Any]] = None, body: Any = _UNSET) -> Any:
        """Send a JSON request (``body`` encoded as JSON when given) and
        return the decoded JSON response (None for an empty one)."""
        return self.request(method, path, query=query, json_body=body).json()

    def list_all(self, path: str, query: Optional[Mapping[str, Any]] = None) -> List[Any]:
        """``GET`` a list route and return the items of every page: each
        list answers ``{"items": [...], "next": cursor, "more": bool}`` and
        is read on with ``after=next`` while ``more``."""
        out: List[Any] = []
        after = None
        while True:
            q = dict(query or {})
            q["limit"] = 1000
            if after:
                q["after"] = after
            page = self.call("GET", path, q) or {}
            out.extend(page.get("items") or [])
            nxt = page.get("next")
            if not page.get("more") or not nxt or nxt == after:
                return out
            after = nxt

    def events(self, resp: Response) -> Iterator[Tuple[str, str]]:
        """Parse a ``text/event-stream`` body into ``(event, data)`` pairs
        as they arrive; comments (keep-alives) are skipped. The iterator
        ends with the stream."""
        name, data = "", None
        while True:
            raw = resp.readline()
            if not raw:
                return
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line == "":
                if name == "" and data is None:
                    continue
                yield (name or "message"), (data or "")
                name, data = "", None
            elif line.startswith(":"):
                continue
            else:
                field, _, value = line.partition(":")
                if value.startswith(" "):
                    value = value[1:]
                if field == "event":
                    name = value
                elif field == "data":
                    data = value if data is None else data + "\n" + value

    # -- daemon -----------------------------------------------------------

    def health(self) -> Dict[str, Any]:
        """``GET /healthz``: ``{"status": "ok", "version": ...}`` (no key needed)."""
        return self.call("GET", "/healthz")

    def info(self) -> Dict[str, Any]:
        """``GET /v1/info``: version, pool, runtime, instance types and what persists."""
        return self.call("GET", "/v1/info")

    def openapi(self) -> Dict[str, Any]:
        """The daemon's OpenAPI 3.1 document."""
        return self.call("GET", "/openapi.json")

    # -- metering ---------------------------------------------------------

    def usage(
        self,
        by: Optional[str] = None,
        since: Any = None,
        until: Any = None,
        sandbox: Optional[str] = None,
        tenant: Optional[str] = None,
    ) -> Dict[str, Any]:
        """``GET /v1/usage``: metered usage and its cost.

        ``by`` is ``"day"`` or ``"sandbox"`` (default: the total only);
        ``since``/``until`` are ``datetime.date``/``datetime.datetime``
        values or strings (``YYYY-MM-DD`` or RFC 3339; default: the first
        of this month to now, UTC); ``sandbox`` is one sandbox's id or name;
        ``tenant`` asks for another tenant (admin keys only). The answer has
        ``total`` and ``rows`` (running seconds by instance type, memory
        GiB-seconds, pool/snapshot/repository GB-hours, costs) and
        ``always_on``: what every sandbox running its whole life would have
        cost against what auto-stop cost (``saving_percent``).
        """
        return self.call("GET", "/v1/usage", query={
            "by": by, "since": _when(since), "until": _when(until), "sandbox": sandbox, "tenant": tenant,
        })


def _when(v: Any) -> Optional[str]:
    """A date or datetime as the API reads it (naive datetimes are UTC)."""
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=datetime.timezone.utc)
        return v.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(v, datetime.date):
        return v.isoformat()
    raise TypeError("since/until: want a date, a datetime or a string, not %r" % (v,))


def quote(s: str) -> str:
    """Escape one path segment."""
    return urllib.parse.quote(s, safe="")


def default_client(client: Optional[Client]) -> Client:
    """Return ``client``, or a new :class:`Client` resolved from the environment."""
    return client if client is not None else Client()

