"""Checks for the sections of skills/nemo-mbridge-perf-megatron-fsdp that answer problems users reported upstream
(claim ids match the markers in its SKILL.md and references/). Same rule as the other
check modules: read each stated value from the sentence, compare it with the library."""

from __future__ import annotations

SKILL = "nemo-mbridge-perf-megatron-fsdp"
