"""The one error every parser raises when its input is not what it parses."""

from __future__ import annotations


class ParseError(ValueError):
    """The input is not a parsable output of the tool; ``str()`` says what was wrong and where."""

    def __init__(self, message: str, *, details: list[str] | None = None) -> None:
        #: Lines of the input that explain the failure (e.g. the tool's own error lines).
        self.details = details or []
        super().__init__(message if not self.details else message + "\n  " + "\n  ".join(self.details))
