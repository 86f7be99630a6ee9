"""One chat-completions request through the official `openai` client: transient failures (429,
connection errors, 408/409/5xx) retried with exponential backoff and jitter (a shorter
Retry-After wins), parameters an endpoint refuses (max_tokens, temperature) adapted once, and
every other failure a PolicyError whose words say what to check. Two outcomes are for the
policy to act on: SwitchToText (the endpoint rejects `tools`) and ContextOverflow."""

from __future__ import annotations

import random
import time
from typing import Any

from agent.errors import PolicyError


class SwitchToText(Exception):
    """The endpoint rejects native tool calls: use the text protocol."""


class ContextOverflow(Exception):
    """The endpoint says the conversation does not fit the model's context."""


class ChatClient:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str,
        *,
        max_tokens: int,
        temperature: float | None,
        max_retries: int,
        backoff_base_s: float,
        backoff_max_s: float,
        timeout_s: float,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        import openai

        self.base_url, self.model, self.max_tokens, self.temperature = base_url, model, max_tokens, temperature
        self.max_retries, self.backoff_base_s, self.backoff_max_s = max_retries, backoff_base_s, backoff_max_s
        self.timeout_s, self.extra_body = timeout_s, extra_body
        self.max_tokens_param = "max_tokens"
        self.requests = 0
        self.openai = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=0)

    def _kwargs(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, self.max_tokens_param: self.max_tokens}
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if tools is not None:
            kwargs["tools"] = tools
            kwargs["tool_choice"] = "auto"
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        return kwargs

    def create(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, may_switch: bool = False
    ) -> Any:
        """The endpoint's reply to `messages` (native tool calls with `tools`). With `may_switch`,
        an endpoint that rejects `tools` raises SwitchToText."""
        import openai

        kwargs = self._kwargs(messages, tools)
        last: Exception | None = None
        for attempt in range(self.max_retries + 1):
            self.requests += 1
            try:
                return self.openai.chat.completions.create(**kwargs)
            except openai.BadRequestError as exc:
                if self._adapted(_msg(exc), kwargs, may_switch):
                    continue
                raise PolicyError(
                    "bad_request", f"the model endpoint refused the request (HTTP 400): {_msg(exc)}"
                ) from exc
            except (openai.RateLimitError, openai.APIConnectionError, openai.InternalServerError) as exc:
                last = exc
            except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError) as exc:
                raise self._refused(exc) from exc
            except openai.APIStatusError as exc:
                if exc.status_code == 422 and may_switch and _rejects_tools(_msg(exc).lower()):
                    raise SwitchToText() from exc
                if not (exc.status_code in (408, 409) or exc.status_code >= 500):
                    raise PolicyError(
                        "bad_request", f"the model endpoint answered HTTP {exc.status_code}: {_msg(exc)}"
                    ) from exc
                last = exc
            if attempt < self.max_retries:
                time.sleep(self.delay(attempt, last))
        assert last is not None
        raise self._gave_up(last) from last

    def _adapted(self, message: str, kwargs: dict[str, Any], may_switch: bool) -> bool:
        """A 400 the request can be changed for: True when `kwargs` now differ (send again);
        raises ContextOverflow or SwitchToText; False when nothing helps."""
        text = message.lower()
        if (
            "context" in text
            and ("length" in text or "window" in text or "maximum" in text)
            or "too many tokens" in text
        ):
            raise ContextOverflow(message)
        if may_switch and _rejects_tools(text):
            raise SwitchToText()
        if "max_completion_tokens" in text and self.max_tokens_param == "max_tokens":
            self.max_tokens_param = "max_completion_tokens"
            kwargs["max_completion_tokens"] = kwargs.pop("max_tokens")
            return True
        if "temperature" in text and "temperature" in kwargs:
            kwargs.pop("temperature")
            self.temperature = None
            return True
        return False

    def _refused(self, exc: Exception) -> PolicyError:
        """401, 403, 404 in words: the key, the model's permission, the model or the URL."""
        import openai

        if isinstance(exc, openai.AuthenticationError):
            return PolicyError(
                "auth",
                f"the model endpoint {self.base_url} rejected the API key (HTTP 401): {_msg(exc)}. "
                "Check --api-key / OPENAI_API_KEY.",
            )
        if isinstance(exc, openai.PermissionDeniedError):
            return PolicyError("auth", f"the API key may not use model {self.model!r} (HTTP 403): {_msg(exc)}")
        return PolicyError(
            "model_not_found",
            f"model {self.model!r} was not found at {self.base_url} (HTTP 404: {_msg(exc)}). "
            f"{self.available_models()}Also check that the base URL ends with /v1.",
        )

    def _gave_up(self, last: Exception) -> PolicyError:
        import openai

        tries = self.max_retries + 1
        if isinstance(last, openai.RateLimitError):
            return PolicyError("rate_limited", f"still rate-limited (HTTP 429) after {tries} attempts: {_msg(last)}")
        if isinstance(last, openai.APITimeoutError):
            return PolicyError(
                "unreachable",
                f"the model endpoint {self.base_url} timed out on {tries} attempts (timeout {self.timeout_s:g} s)",
            )
        if isinstance(last, openai.APIConnectionError):
            return PolicyError(
                "unreachable", f"cannot reach the model endpoint {self.base_url} after {tries} attempts: {_msg(last)}"
            )
        return PolicyError("server_error", f"the model endpoint kept failing after {tries} attempts: {_msg(last)}")

    def delay(self, attempt: int, exc: Exception | None) -> float:
        """Exponential backoff with jitter; a server's Retry-After wins when it is shorter than the cap."""
        delay = min(self.backoff_max_s, self.backoff_base_s * (2**attempt)) * (0.5 + random.random() / 2)
        response = getattr(exc, "response", None)
        header = response.headers.get("retry-after") if response is not None else None
        if header:
            try:
                delay = min(self.backoff_max_s, max(0.0, float(header)))
            except ValueError:
                pass
        return delay

    def available_models(self) -> str:
        try:
            ids = [m.id for m in self.openai.models.list()][:20]
        except Exception:  # a hint only
            return ""
        return f"The endpoint serves: {', '.join(ids)}. " if ids else ""


def _rejects_tools(text: str) -> bool:
    return ("tool" in text or "function" in text) and any(
        w in text
        for w in (
            "not support",
            "unsupported",
            "does not support",
            "not supported",
            "unknown",
            "unrecognized",
            "not allowed",
            "invalid",
            "extra",
        )
    )


def _msg(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
    return str(exc)
