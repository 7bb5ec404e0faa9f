"""Stage 3, grade: each record of a run gets routing and process verdicts from its
transcript, deterministic-check verdicts from the case's sidecar and, with a judge, LLM
verdicts; calibration measures the checks and the judge against hand-labelled answers."""

from .calibrate import calibration_lines
from .grading import GradedRun, JudgeOptions, calibrate_bundle, grade_run
from .judge import Judge, JudgeError
from .types import COUNTED, GRADE_FORMAT, GRADED, JUDGE_ERROR, PROCESS_ONLY, RECORD_ERROR, TRUNCATED, TURN_LIMIT, UNGRADED, BehaviourGrade, Correctness, RecordGrade, ScriptUse

__all__ = [
    "GRADED",
    "GRADE_FORMAT",
    "JUDGE_ERROR",
    "RECORD_ERROR",
    "TURN_LIMIT",
    "TRUNCATED",
    "PROCESS_ONLY",
    "UNGRADED",
    "COUNTED",
    "BehaviourGrade",
    "Correctness",
    "GradedRun",
    "Judge",
    "JudgeError",
    "JudgeOptions",
    "RecordGrade",
    "ScriptUse",
    "calibrate_bundle",
    "calibration_lines",
    "grade_run",
]
