"""Stage 2, run: put eval cases to a model under each condition (baseline, skills through
the two skill tools, inline), one record per case x condition x trial in a resumable run
directory; and read run directories back (`show`, grading)."""

from .evaluate import EvalRequest, run_eval
from .plan import CONDITIONS, Summary
from .rundir import TRUNCATION_STOPS, RunStatus, load_run, planned_keys, read_records, record_key, run_status
from .show import records_json, records_table, select_records, transcript

__all__ = [
    "CONDITIONS",
    "TRUNCATION_STOPS",
    "EvalRequest",
    "RunStatus",
    "Summary",
    "load_run",
    "planned_keys",
    "read_records",
    "records_json",
    "records_table",
    "record_key",
    "run_eval",
    "run_status",
    "select_records",
    "transcript",
]
