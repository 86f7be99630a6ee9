"""The built-in offline policy: an expert's turns (analyse, rewrite, generate, check, time, keep
the best) without a model. Imports only torch/numpy-free modules at package import time; the
graph capture runs in a child process (agent.builtin.analyze)."""

from agent.builtin.policy import BuiltinPolicy

__all__ = ["BuiltinPolicy"]
