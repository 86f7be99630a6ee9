"""Errors a policy raises when it cannot go on; the loop records them and ends the run."""

from __future__ import annotations


class PolicyError(RuntimeError):
    """A failure the user must fix (a wrong key, an unknown model, an unreachable endpoint),
    or one that outlasted the retries. `kind` is machine-readable: "auth", "model_not_found",
    "unreachable", "rate_limited", "server_error", "bad_request", "context_overflow"."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
