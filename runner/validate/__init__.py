"""Validation: a bundle, a skill or an evals file checked against the Agent Skills spec, the
project's schemas and its own rules; every problem a `Finding` with file, line and rule id."""

from .rules import RULES
from .validator import validate_path

__all__ = ["RULES", "validate_path"]
