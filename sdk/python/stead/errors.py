"""Errors raised by the stead SDK.

Every error the daemon answers with is an RFC 9457 problem document; the SDK
raises it as a :class:`SteadError` subclass chosen by the HTTP status, with
the problem's ``detail`` as the message::

    try:
        sb = stead.Sandbox.connect("agent-1")
    except stead.NotFoundError:
        sb = stead.Sandbox.create(name="agent-1")

=====================  ===========  ===========================================
class                  status       meaning
=====================  ===========  ===========================================
InvalidError           400/413/422  the request was malformed
UnauthenticatedError   401          no or an unknown API key
ForbiddenError         403          the key may not do this
NotFoundError          404          no such thing (or another tenant's)
ConflictError          409          the current state forbids it (e.g. if_version)
QuotaError             507          a limit would be exceeded
UnreachableError       (none)       the daemon could not be reached at all
ExecError              (none)       a command's output stream failed mid-way
=====================  ===========  ===========================================

Any other status (500, 501, 504 ...) is a plain :class:`SteadError`. The
short names ``NotFound``, ``Conflict``, ``Invalid``, ``Unauthenticated``,
``Forbidden`` and ``Quota`` are aliases, and ``StealError`` is an alias of
``SteadError``.
"""

from __future__ import annotations

import json
from typing import List, Optional

__all__ = [
    "SteadError",
    "StealError",
    "InvalidError",
    "UnauthenticatedError",
    "ForbiddenError",
    "NotFoundError",
    "ConflictError",
    "QuotaError",
    "UnreachableError",
    "ExecError",
    "Invalid",
    "Unauthenticated",
    "Forbidden",
    "NotFound",
    "Conflict",
    "Quota",
    "error_from_response",
]


class SteadError(Exception):
    """An error of the stead API or of reaching it.

    Attributes:
        status: the HTTP status code (0 when there was no HTTP response).
        title: the short summary of the status, e.g. ``"Not Found"``.
        detail: what went wrong and, where possible, what to do.
        errors: individual validation failures, as ``"location: message"``.
    """

    def __init__(
        self,
        detail: str,
        status: int = 0,
        title: str = "",
        errors: Optional[List[str]] = None,
    ) -> None:
        self.status = status
        self.title = title
        self.detail = detail
        self.errors = list(errors or [])
        msg = detail or title or "stead error"
        if self.errors:
            msg += " (" + "; ".join(self.errors) + ")"
        super().__init__(msg)


#: Alias of :class:`SteadError`.
StealError = SteadError


class InvalidError(SteadError):
    """400, 413 or 422: the request was malformed (or a document failed its schema)."""


class UnauthenticatedError(SteadError):
    """401: no API key, or an unknown one."""


class ForbiddenError(SteadError):
    """403: the key may not do this."""


class NotFoundError(SteadError):
    """404: the thing does not exist or belongs to another tenant."""


class ConflictError(SteadError):
    """409: the current state forbids the request (a taken name, starting a
    running sandbox, a failed ``if_version`` check ...)."""


class QuotaError(SteadError):
    """507: a limit would be exceeded."""


class UnreachableError(SteadError):
    """The daemon could not be reached at all (nothing listening, no socket)."""


class ExecError(SteadError):
    """The daemon reported an error in the middle of a command's output
    stream, or the stream ended before the command exited."""


Invalid = InvalidError
Unauthenticated = UnauthenticatedError
Forbidden = ForbiddenError
NotFound = NotFoundError
Conflict = ConflictError
Quota = QuotaError

_BY_STATUS = {
    400: InvalidError,
    413: InvalidError,
    422: InvalidError,
    401: UnauthenticatedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    507: QuotaError,
}

_REASONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    413: "Request Entity Too Large",
    422: "Unprocessable Entity",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    507: "Insufficient Storage",
}


def error_from_response(status: int, content_type: str, body: bytes) -> SteadError:
    """Build the error for a non-2xx response from its status, Content-Type
    and (at most 64 KiB of) body."""
    cls = _BY_STATUS.get(status, SteadError)
    title = _REASONS.get(status, "HTTP %d" % status)
    mt = (content_type or "").split(";", 1)[0].strip().lower()
    if mt in ("application/problem+json", "application/json"):
        try:
            p = json.loads(body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            p = None
        if isinstance(p, dict):
            errs = []
            for d in p.get("errors") or []:
                if not isinstance(d, dict):
                    continue
                loc, msg = d.get("location") or "", d.get("message") or ""
                errs.append("%s: %s" % (loc, msg) if loc else msg)
            return cls(
                p.get("detail") or "",
                status=status,
                title=p.get("title") or title,
                errors=errs,
            )
    return cls(body.decode("utf-8", "replace").strip(), status=status, title=title)
