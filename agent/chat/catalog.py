"""What a model costs and how much it reads, by model name (a prefix match: "gpt-4o-2024-08-06"
is "gpt-4o"). Unknown models cost 0 (reported as such) and get DEFAULT_CONTEXT."""

from __future__ import annotations

from typing import Any

# USD per million tokens (input, output). Defaults from the providers' public price pages at
# the time of writing; pass `prices=` to the policy to override.
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5": (1.25, 10.00),
    "o3": (2.00, 8.00),
    "o4-mini": (1.10, 4.40),
    "deepseek-chat": (0.27, 1.10),
    "deepseek-reasoner": (0.55, 2.19),
}
# Context windows in tokens by model-name prefix.
CONTEXT_WINDOWS: dict[str, int] = {
    "gpt-4o": 128_000,
    "gpt-4.1": 1_000_000,
    "gpt-5": 400_000,
    "o3": 200_000,
    "o4": 200_000,
    "deepseek": 64_000,
    "qwen": 32_768,
    "llama": 128_000,
}
DEFAULT_CONTEXT = 32_768


def prefix_lookup(table: dict[str, Any], model: str) -> Any:
    """The entry of the longest key that starts the model's name (its last path part), or None."""
    name = model.lower().split("/")[-1]
    best = max((k for k in table if name.startswith(k)), key=len, default=None)
    return table[best] if best is not None else None


def context_window(model: str) -> int:
    return prefix_lookup(CONTEXT_WINDOWS, model) or DEFAULT_CONTEXT


def cost(prices: dict[str, tuple[float, float]], model: str, prompt_tokens: int, completion_tokens: int) -> float:
    price = prefix_lookup(prices, model)
    if price is None:
        return 0.0
    return (prompt_tokens * price[0] + completion_tokens * price[1]) / 1e6
