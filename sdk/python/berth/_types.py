"""Result types of the hand-written layer (the API's own types are in berth.models)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from ._models import ExecExit


@dataclass
class ExecResult:
    """A finished command: its exit status and all of its output."""

    exit: ExecExit
    stdout: bytes = b""
    stderr: bytes = b""
    sandbox_id: str = ""
    """The one-shot sandbox of a client.run (empty for an exec)."""

    @property
    def exit_code(self) -> int:
        return self.exit.code

    @property
    def text(self) -> str:
        """stdout decoded as UTF-8 (bad bytes replaced)."""
        return self.stdout.decode("utf-8", "replace")


@dataclass
class ProcessOutput:
    """A background process's output as read from its log, and its exit once it ended."""

    stdout: bytes = b""
    stderr: bytes = b""
    exit: Optional[ExecExit] = None
    gap: int = 0
    """Bytes the daemon dropped before this reader read them."""


@dataclass
class Page:
    """One page of a list; ``next_cursor`` is "" on the last."""

    items: List[Any] = field(default_factory=list)
    next_cursor: str = ""
