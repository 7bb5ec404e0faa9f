"""The one vocabulary of claim statuses, for the CPU tier (`mbskills check`), the GPU tier
(gpu/validate.sh's results file) and the cards both write into. The schemas
(skill-card, gpu-results) spell the same words; a test holds them together."""

from __future__ import annotations

# What one check run reports.
PASSED, FAILED, ERROR = "passed", "failed", "error"
MISSING = "no-check"  # the card lists a claim no check is registered for
# A GPU-tier claim whose CPU side (building and validating what the GPU run trains) held:
# not a failure, and not run here. gpu/validate.sh runs it; `--gpu-results` records it.
NEEDS_GPU = "needs-gpu"
SKIPPED = "skipped"  # the GPU run could not check it (too few GPUs, no Transformer Engine)

CPU_RESULTS = (PASSED, FAILED, ERROR, MISSING, NEEDS_GPU)
GPU_RESULTS = (PASSED, FAILED, SKIPPED, ERROR)
OK_RESULTS = (PASSED, NEEDS_GPU)  # `mbskills check` exits 0 when every result is one of these

# What a card's `claims[].status` says.
UNCHECKED, VERIFIED_CPU, FAILED_CPU = "unchecked", "verified-cpu", "failed"
VERIFIED_GPU, FAILED_GPU = "verified-gpu", "failed-gpu"
CARD_SKIPPED = "skipped"
CPU_CARD_STATUSES = (UNCHECKED, VERIFIED_CPU, FAILED_CPU, CARD_SKIPPED)
GPU_CARD_STATUSES = (UNCHECKED, VERIFIED_GPU, FAILED_GPU, CARD_SKIPPED)


def cpu_card_status(result: str) -> str:
    return VERIFIED_CPU if result == PASSED else FAILED_CPU


def gpu_card_status(result: str) -> str | None:
    """The status a GPU result gives its claim; None: a skip, the claim keeps its own."""
    return {PASSED: VERIFIED_GPU, FAILED: FAILED_GPU, ERROR: FAILED_GPU}.get(result)
