"""Claim checks: every claim in a SKILL.md run against the pinned Megatron-Bridge, the
cards that record the outcomes, and the GPU tier's results merged into them.

The only part of the project that imports torch or megatron, and only when claims run.
Importing this package costs the standard library alone (gpu/launch.py imports
`runner.claims.gpu` before anything is installed): the status vocabulary is here at once,
the functions load on first use."""

from importlib import import_module

from .sections import body_lines, description_lines, fact_tokens
from .status import (
    CPU_RESULTS,
    ERROR,
    FAILED,
    GPU_RESULTS,
    MISSING,
    NEEDS_GPU,
    OK_RESULTS,
    PASSED,
    SKIPPED,
    UNCHECKED,
    VERIFIED_CPU,
    VERIFIED_GPU,
)

_LAZY = {"ClaimsRun": "api", "GpuMerge": "api", "cards_writable": "api", "check_claims": "api", "merge_gpu_results": "api", "DriftRun": "drift", "run_drift": "drift", "MutationRun": "api", "mutate_claims": "api", "framing_sentences": "framing", "load_framing": "framing", "install_te_placeholders": "environment", "tiny_config": "environment", "resolve": "environment", "quiet": "environment", "collect_warnings": "environment"}

__all__ = [
    "CPU_RESULTS",
    "ERROR",
    "FAILED",
    "GPU_RESULTS",
    "MISSING",
    "NEEDS_GPU",
    "OK_RESULTS",
    "PASSED",
    "SKIPPED",
    "UNCHECKED",
    "VERIFIED_CPU",
    "VERIFIED_GPU",
    "body_lines",
    "description_lines",
    "fact_tokens",
    *_LAZY,
]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
