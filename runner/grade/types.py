"""Typed grades, written to grades.jsonl (format 2) with every field present.

A behaviour is graded (`verdict` True or False, with its `source`) or ungraded (`verdict`
None: no grader shown reliable had a say). Behaviours are content (what the answer says) or
process (which skills the agent read). A record's `passed` is over its content verdicts
only: it fails when one fails, passes only when every one is graded and passes, and is
otherwise `ungraded` (counted in no rate). Process verdicts give `process_passed`, reported
as activation where a skill tool was offered and never part of a pass rate or an uplift:
a condition that offers no skill could never pass them. A case with no content behaviour
gives `process_only` records, counted in routing and activation only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

GRADE_FORMAT = 3  # 3 with `grader` per behaviour (absent in older lines: read as None)
# A record's grade status. Only GRADED, TURN_LIMIT and TRUNCATED records count in pass rates
# (the last two as failures: the model gave no whole answer).
GRADED, UNGRADED, TURN_LIMIT, TRUNCATED = "graded", "ungraded", "turn_limit", "truncated"
RECORD_ERROR, JUDGE_ERROR, PROCESS_ONLY = "record_error", "judge_error", "process_only"
COUNTED = (GRADED, TURN_LIMIT, TRUNCATED)
CONTENT, PROCESS = "content", "process"


@dataclass
class BehaviourGrade:
    index: int
    text: str
    kind: str  # content | process
    transcript: bool | None = None  # process behaviours: what the transcript shows
    transcript_why: str | None = None
    check: bool | None = None  # what the deterministic check says, where the case has one
    check_kind: str | None = None  # presence | absence | tripwire | reversed | clear; field-*; execute-* (runner/grade/policy.py)
    check_why: str | None = None
    grader: str | None = None  # check (patterns) | field | execute: which deterministic grader spoke
    judge: bool | None = None  # what the judge said
    evidence: str | None = None  # the judge's quote
    evidence_found: bool | None = None  # whether that quote is in the answer
    unsupported: bool = False  # a judge YES whose quote does not support it: it counts for nothing
    evidence_problem: str | None = None  # why that quote does not support it
    verdict: bool | None = None  # the final verdict; None: ungraded
    source: str | None = None  # transcript | judge | check | field | execute | answer (it says nothing) | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BehaviourGrade":
        return cls(**{f.name: data.get(f.name) for f in fields(cls)})


@dataclass(frozen=True)
class ScriptUse:
    expected: str
    read: bool  # read through read_skill_file
    cited: bool  # named in the answer
    passed: bool


@dataclass(frozen=True)
class Correctness:
    """The judge's verdict on the answer against the ground truth."""

    judge: bool
    evidence: str
    evidence_found: bool = True
    problem: str | None = None  # why a YES's quote does not support it

    @property
    def verdict(self) -> bool | None:
        """NO decides; YES counts only with its quote found in the answer (else no verdict)."""
        if not self.judge:
            return False
        return True if self.evidence_found else None


@dataclass
class RecordGrade:
    key: str
    case: str
    owner: str
    case_id: str | int
    condition: str
    trial: int
    expected_skill: str | None
    activated: list[str]
    routing: str | None  # correct | extra | wrong | missed; None where no skill tool was offered
    turns: int
    input_tokens: int | None  # None: some reply carried no token counts
    output_tokens: int | None
    cost_usd: float | None  # None: no price, or tokens unknown
    status: str = GRADED
    error: dict[str, Any] | None = None  # the run record's error, or the judge's
    judge_usage: dict[str, Any] | None = None
    behaviours: list[BehaviourGrade] = field(default_factory=list)
    script: ScriptUse | None = None
    correct: Correctness | None = None
    behaviour_rate: float | None = None  # over graded content behaviours
    passed: bool | None = None  # content only; None: not counted (an error, an ungraded behaviour, no content behaviour)
    process_passed: bool | None = None  # every process behaviour passes; None: the case has none
    says_nothing: str | None = None  # why the answer carries no content, where it does not
    disagreements: list[int] = field(default_factory=list)  # behaviour indexes where judge and check differ

    @property
    def tokens(self) -> int | None:
        return None if self.input_tokens is None or self.output_tokens is None else self.input_tokens + self.output_tokens

    @property
    def counted(self) -> bool:
        return self.status in COUNTED and self.passed is not None

    @property
    def ungraded(self) -> list[BehaviourGrade]:
        return [b for b in self.behaviours if b.verdict is None]

    def to_dict(self) -> dict[str, Any]:
        out = {"format": GRADE_FORMAT, **asdict(self)}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RecordGrade":
        if data.get("format") != GRADE_FORMAT:
            raise ValueError(f"grade format {data.get('format')!r}, expected {GRADE_FORMAT}")
        values = {f.name: data[f.name] for f in fields(cls)}
        values["behaviours"] = [BehaviourGrade.from_dict(b) for b in data["behaviours"]]
        values["script"] = ScriptUse(**data["script"]) if data["script"] else None
        values["correct"] = Correctness(**data["correct"]) if data["correct"] else None
        return cls(**values)
