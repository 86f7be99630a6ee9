"""Who sees the operator's view of the service: worker host names, the model endpoint's URL,
error texts of the stack's parts (/healthz, /health/), and the echo websocket (webapp.core.consumers).

KERNELWRIGHT_OPERATOR_VIEW: "everyone", "staff", or "auto" (the default): everyone where the
service answers to loopback names only (ALLOWED_HOSTS: localhost, 127.0.0.1, [::1], the
launcher's default, one person's own machine), staff users otherwise. The host names a
deployment must list to be reached from elsewhere are what turns "auto" to staff; an address
can't decide it, since behind a reverse proxy every request comes from loopback.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]", "::1"}
MODES = ("auto", "everyone", "staff")


def mode() -> str:
    value = str(getattr(settings, "KERNELWRIGHT_OPERATOR_VIEW", "auto")).strip().lower()
    if value not in MODES:
        raise ValueError(f"KERNELWRIGHT_OPERATOR_VIEW is {value!r}; one of {', '.join(MODES)}")
    if value == "auto":
        hosts = {str(h).strip().lower() for h in settings.ALLOWED_HOSTS}
        return "everyone" if hosts and hosts <= LOOPBACK_HOSTS else "staff"
    return value


def may_see(user: Any) -> bool:
    """Whether `user` (a request's or a websocket scope's, possibly anonymous or None) gets the
    operator's view."""
    return mode() == "everyone" or bool(getattr(user, "is_active", False) and getattr(user, "is_staff", False))
