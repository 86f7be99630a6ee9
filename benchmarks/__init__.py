"""The built-in policy's task suite (benchmarks/tasks) and the scripts that run the policy over
it through the real agent loop and sandbox: `python -m benchmarks.suite`, `python -m
benchmarks.case_studies`. Needs only torch, numpy (and pytest for the tests)."""
