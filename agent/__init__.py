"""Kernelwright's agent: a multi-turn loop that writes, compiles, checks and times kernels.

Entry points: `agent.loop.run` (the loop), `agent.openai_policy.OpenAIPolicy` (any
OpenAI-compatible endpoint), `agent.evaluator.LocalEvaluator` (the sandbox in-process),
`python -m agent optimize TASK.py` (the CLI). No Django here: this package runs on GPU hosts
that have only torch, numpy and pytest (the openai package is needed only by OpenAIPolicy).
"""
