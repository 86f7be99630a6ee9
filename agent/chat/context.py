"""How much of the conversation is sent: the system prompt, the task and the last
`keep_recent_turns` turns always; older turns shortened (two levels), then the oldest dropped,
until the estimate fits the model's context window. The task message then carries the current
best candidate's files (agent.chat.prompts.task_message), so nothing verified is forgotten."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent.chat.render import estimate_messages

Messages = list[dict[str, Any]]


class ContextWindow:
    def __init__(self, tokens: int, max_tokens: int, keep_recent_turns: int = 4) -> None:
        self.tokens, self.max_tokens, self.keep_recent_turns = tokens, max_tokens, keep_recent_turns
        self.compact_level = 0  # raised when the conversation nears the context window
        self.dropped_turns = 0

    def reset(self) -> None:
        self.compact_level = self.dropped_turns = 0

    def budget_tokens(self) -> int:
        """What the request may hold: the window less the reply's room and a margin."""
        return max(2048, self.tokens - self.max_tokens - 512)

    def visible(self, index: int, n_turns: int) -> tuple[bool, int]:
        """(kept, compaction level) of turn `index` of `n_turns` under the current state."""
        recent = n_turns - index <= self.keep_recent_turns
        if index < self.dropped_turns:
            return False, 2
        return True, 0 if recent else min(self.compact_level, 2)

    def fit(self, render: Callable[[], Messages], render_turn: Callable[[int], Messages], n_turns: int) -> Messages:
        """Render, compacting older turns until the estimate fits (or nothing more can go).
        Shortening is tried first (two levels); then the oldest turns are dropped, the number
        computed in one pass from per-turn estimates so long runs stay cheap to prepare."""
        limit = self.budget_tokens() * 0.9
        while True:
            msgs = render()
            if estimate_messages(msgs) <= limit:
                return msgs
            if self.compact_level < 2:
                self.compact_level += 1
                continue
            break
        if self.dropped_turns == 0 and n_turns > 2:
            self.dropped_turns = 1  # so the head below includes the context note and the pinned best
        head = estimate_messages(render()[:2])
        sizes = [estimate_messages(render_turn(i)) for i in range(n_turns)]
        total = head + sum(sizes[self.dropped_turns :])
        while total > limit and self.dropped_turns < n_turns - 2:
            total -= sizes[self.dropped_turns]
            self.dropped_turns += 1
        return render()

    def compact_more(self, n_turns: int) -> bool:
        """One more step after the server said the context overflowed: shorten, then drop a
        quarter of the remaining older turns. The last two turns always stay."""
        if self.compact_level < 2:
            self.compact_level += 1
            return True
        room = n_turns - 2 - self.dropped_turns
        if room > 0:
            self.dropped_turns += max(1, room // 4)
            return True
        return False
