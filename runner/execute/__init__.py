"""The execute grader's engine: a worker subprocess that imports Megatron-Bridge once, builds
a scenario's config, applies the assignments an answer proposes (data only, on an
allow-list) and reports what Bridge's own `runtime_config_update()` did with them: the
exception and its message, the resolved fields, the warnings it logged.

Importing this package costs the standard library alone; only the worker process
(runner/execute/worker.py) imports torch and megatron. Grading (runner/grade/) turns what
was observed into verdicts."""

from .pool import ExecuteError, ExecutePool

__all__ = ["ExecuteError", "ExecutePool"]
