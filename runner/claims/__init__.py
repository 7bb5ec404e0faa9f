"""Claim checks: every claim in a SKILL.md run against the pinned Megatron-Bridge.

This subpackage is the only part of the project that imports torch or megatron, and it
does so only when `mbskills check` runs (`run.py` imports the check modules). `sections.py`
is light: it reads the claims out of SKILL.md and is safe to import anywhere.
"""
