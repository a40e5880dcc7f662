"""Plain result types of the stead SDK (built from the API's JSON)."""

from __future__ import annotations


from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

__all__ = ["CommandResult", "FileInfo", "Checkpoint", "CheckpointInfo"]


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

    ``doc`` is the parsed JSON document: set by ``state.get``; None after a
    put or in a history listing (those carry no body).
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


