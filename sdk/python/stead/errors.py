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
BudgetError            402          the tenant's or sandbox's spend cap is reached
ForbiddenError         403          the key may not do this
NotFoundError          404          no such thing (or another tenant's)
ConflictError          409          the current state forbids it (e.g. if_version)
RateLimitError         429          too many requests; try again later
QuotaError             507          a limit would be exceeded
TimeoutException       408/504      the daemon or the socket timed out, or a
                                    command's ``timeout`` expired
UnreachableError       (none)       the daemon could not be reached at all
ExecError              (none)       a command's output stream failed mid-way
CommandExitException   (none)       a command exited non-zero (``commands.run``)
=====================  ===========  ===========================================

Any other status (500, 501 ...) is a plain :class:`SteadError`. The short
names ``NotFound``, ``Conflict``, ``Invalid``, ``Unauthenticated``,
``Forbidden`` and ``Quota`` are aliases.

E2B's names are aliases too, so code ported from E2B catches the same
errors: ``SandboxException`` (:class:`SteadError`, the base of all),
``NotFoundException``, ``AuthenticationException``,
``InvalidArgumentException``, ``NotEnoughSpaceException``,
``RateLimitException``, ``TimeoutException`` and ``CommandExitException``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, List, Optional

if TYPE_CHECKING:  # pragma: no cover - typing only
    from .models import CommandResult

__all__ = [
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


class BudgetError(SteadError):
    """402: the tenant's or the sandbox's spend cap is reached (a start is
    refused while the budget is exceeded)."""


class RateLimitError(SteadError):
    """429: too many requests; try again later."""


class TimeoutException(SteadError):
    """Something took too long: the daemon answered 408 or 504, the socket
    timed out waiting for it, or a command's ``timeout`` expired (then
    ``result`` is the command's :class:`~stead.CommandResult`, with what it
    wrote before it was killed; otherwise None)."""

    def __init__(
        self,
        detail: str,
        status: int = 0,
        title: str = "",
        errors: Optional[List[str]] = None,
        result: "Optional[CommandResult]" = None,
    ) -> None:
        super().__init__(detail, status=status, title=title, errors=errors)
        self.result = result


class CommandExitException(SteadError):
    """A command run by ``sb.commands.run`` exited non-zero or was killed
    by a signal (pass ``check=False`` to get the result instead).

    Attributes:
        result: the :class:`~stead.CommandResult`.
        exit_code: the exit status (-1 when a signal ended it).
        stdout, stderr: the output as text.
        error: what went wrong, e.g. ``"exit status 3"``.
    """

    def __init__(self, result: "CommandResult") -> None:
        self.result = result
        self.exit_code: int = result.exit_code
        self.stdout: str = result.stdout
        self.stderr: str = result.stderr
        self.error: str = result.error
        msg = "command failed: " + result.error
        tail = self.stderr.strip()
        if tail:
            msg += ": " + (tail if len(tail) <= 500 else "..." + tail[-500:])
        super().__init__(msg)


Invalid = InvalidError
Unauthenticated = UnauthenticatedError
Forbidden = ForbiddenError
NotFound = NotFoundError
Conflict = ConflictError
Quota = QuotaError

#: E2B's name of :class:`SteadError`, the base of every SDK error.
SandboxException = SteadError
#: E2B's name of :class:`NotFoundError`.
NotFoundException = NotFoundError
#: E2B's name of :class:`UnauthenticatedError`.
AuthenticationException = UnauthenticatedError
#: E2B's name of :class:`InvalidError`.
InvalidArgumentException = InvalidError
#: E2B's name of :class:`QuotaError`.
NotEnoughSpaceException = QuotaError
#: E2B's name of :class:`RateLimitError`.
RateLimitException = RateLimitError

_BY_STATUS = {
    400: InvalidError,
    413: InvalidError,
    422: InvalidError,
    401: UnauthenticatedError,
    402: BudgetError,
    403: ForbiddenError,
    404: NotFoundError,
    408: TimeoutException,
    409: ConflictError,
    429: RateLimitError,
    504: TimeoutException,
    507: QuotaError,
}

_REASONS = {
    400: "Bad Request",
    401: "Unauthorized",
    402: "Payment Required",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    409: "Conflict",
    413: "Request Entity Too Large",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
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
