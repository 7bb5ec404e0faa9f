"""Foundations every stage may use: the exception hierarchy and exit codes, findings,
whole-file atomic writes and the project's JSON Schemas. Standard library only at import
(jsonschema loads on the first schema check), so the GPU launcher can import the package."""

from . import bridge_names, defaults
from .atomic import cannot_write, write_all_atomic, write_atomic
from .errors import EXIT_FINDINGS, EXIT_HARNESS, EXIT_OK, EXIT_USAGE, Finding, HarnessError, LoadError, MbskillsError, UsageError
from .schemas import SchemaProblem, check_schema, schema
from .secrets import KEY_VARIABLES, redact, redact_standard_streams
from .secrets import register as register_secret

__all__ = [
    "EXIT_FINDINGS",
    "EXIT_HARNESS",
    "EXIT_OK",
    "EXIT_USAGE",
    "Finding",
    "HarnessError",
    "KEY_VARIABLES",
    "LoadError",
    "MbskillsError",
    "SchemaProblem",
    "UsageError",
    "bridge_names",
    "check_schema",
    "defaults",
    "redact",
    "redact_standard_streams",
    "register_secret",
    "schema",
    "cannot_write",
    "write_all_atomic",
    "write_atomic",
]
