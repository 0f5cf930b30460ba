"""Problems: one error shape for the whole project.

Every error a user sees about their config repo — a YAML syntax error, a schema
violation, a gateway rejecting an item, a note on a failed commit — is a
`Problem`, printed as ``file:line:col: kind[id].field: message``. Parts that are
unknown are left out, never invented.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Location:
    """Where something is in the config repo: a file and a 1-based line and column."""

    file: str
    line: int = 0
    col: int = 0

    def __str__(self) -> str:
        parts = [self.file]
        if self.line:
            parts.append(str(self.line))
            if self.col:
                parts.append(str(self.col))
        return ":".join(parts)


@dataclass(frozen=True)
class Problem:
    """One thing wrong, with as much of its place as is known."""

    message: str
    location: Location | None = None
    kind: str | None = None
    id: str | None = None
    field: str | None = None

    def subject(self) -> str:
        """The ``kind[id].field`` part, or ``""`` when nothing of it is known."""
        text = self.kind or ""
        if self.id is not None:
            text += f"[{self.id}]"
        if self.field:
            text += f".{self.field}" if text else self.field
        return text

    def __str__(self) -> str:
        head = [str(self.location)] if self.location else []
        subject = self.subject()
        if subject:
            head.append(subject)
        return ": ".join([*head, self.message])


class ProblemsError(Exception):
    """Raised when a stage refuses its input; carries every problem found, not just the first."""

    def __init__(self, stage: str, problems: list[Problem]) -> None:
        self.stage = stage
        self.problems = list(problems)
        first = str(self.problems[0]) if self.problems else "no detail"
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        super().__init__(f"{stage} failed: {first}{more}")
