"""Foundations every stage may use: the exception hierarchy and exit codes, findings,
whole-file atomic writes and the project's JSON Schemas. Standard library only at import
(jsonschema loads on the first schema check), so the GPU launcher can import the package."""

from . import defaults
from .atomic import write_atomic
from .errors import EXIT_FINDINGS, EXIT_HARNESS, EXIT_OK, EXIT_USAGE, Finding, HarnessError, LoadError, MbskillsError, UsageError
from .schemas import SchemaProblem, check_schema, schema

__all__ = [
    "EXIT_FINDINGS",
    "EXIT_HARNESS",
    "EXIT_OK",
    "EXIT_USAGE",
    "Finding",
    "HarnessError",
    "LoadError",
    "MbskillsError",
    "SchemaProblem",
    "UsageError",
    "check_schema",
    "defaults",
    "schema",
    "write_atomic",
]
