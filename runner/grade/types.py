"""Typed grades. In memory every field is always there; `to_dict` writes grades.jsonl in
its format 1 (keys in the same order, `why` only on transcript-graded behaviours and
`judge_usage` only where a judge ran), and `from_dict` reads it back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GRADE_FORMAT = 1
GRADED, RECORD_ERROR, JUDGE_ERROR = "graded", "record_error", "judge_error"
CONTENT, PROCESS = "content", "process"


@dataclass
class BehaviourGrade:
    index: int
    text: str
    kind: str  # content | process
    transcript: bool | None = None  # process behaviours: what the transcript shows
    transcript_why: str | None = None
    check: bool | None = None  # content behaviours with a deterministic check
    check_why: str | None = None
    judge: bool | None = None
    evidence: str | None = None  # the judge's quote
    evidence_found: bool | None = None  # whether that quote is in the answer
    verdict: bool | None = None  # the final verdict; None: ungraded
    source: str | None = None  # transcript | judge | check | None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.index,
            "text": self.text,
            "kind": self.kind,
            "transcript": self.transcript,
            "check": self.check,
            "check_why": self.check_why,
            "judge": self.judge,
            "evidence": self.evidence,
            "evidence_found": self.evidence_found,
        }
        if self.kind == PROCESS:
            out["why"] = self.transcript_why
        out["verdict"] = self.verdict
        out["source"] = self.source
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BehaviourGrade":
        return cls(
            index=data["index"],
            text=data["text"],
            kind=data["kind"],
            transcript=data.get("transcript"),
            transcript_why=data.get("why"),
            check=data.get("check"),
            check_why=data.get("check_why"),
            judge=data.get("judge"),
            evidence=data.get("evidence"),
            evidence_found=data.get("evidence_found"),
            verdict=data.get("verdict"),
            source=data.get("source"),
        )


@dataclass(frozen=True)
class ScriptUse:
    expected: str
    read: bool  # read through read_skill_file
    cited: bool  # named in the answer
    passed: bool

    def to_dict(self) -> dict[str, Any]:
        return {"expected": self.expected, "read": self.read, "cited": self.cited, "passed": self.passed}


@dataclass(frozen=True)
class Correctness:
    """The judge's verdict on the answer against the ground truth."""

    judge: bool
    evidence: str

    def to_dict(self) -> dict[str, Any]:
        return {"judge": self.judge, "evidence": self.evidence}


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
    tokens: int
    turns: int
    status: str = GRADED  # graded | record_error | judge_error
    error: dict[str, Any] | None = None  # the run record's error, or the judge's
    judge_usage: dict[str, Any] | None = None
    behaviours: list[BehaviourGrade] = field(default_factory=list)
    script: ScriptUse | None = None
    correct: Correctness | None = None
    behaviour_rate: float | None = None
    passed: bool | None = None  # None: not graded (an error, or no verdict at all)
    disagreements: list[int] = field(default_factory=list)  # behaviour indexes where judge and check differ

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "key": self.key,
            "case": self.case,
            "owner": self.owner,
            "case_id": self.case_id,
            "condition": self.condition,
            "trial": self.trial,
            "expected_skill": self.expected_skill,
            "format": GRADE_FORMAT,
            "activated": self.activated,
            "routing": self.routing,
            "tokens": self.tokens,
            "turns": self.turns,
            "status": self.status,
            "error": self.error,
        }
        if self.judge_usage is not None:
            out["judge_usage"] = self.judge_usage
        out.update(
            behaviours=[b.to_dict() for b in self.behaviours],
            script=self.script.to_dict() if self.script else None,
            correct=self.correct.to_dict() if self.correct else None,
            behaviour_rate=self.behaviour_rate,
            passed=self.passed,
            disagreements=self.disagreements,
        )
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RecordGrade":
        if data.get("format") != GRADE_FORMAT:
            raise ValueError(f"grade format {data.get('format')!r}, expected {GRADE_FORMAT}")
        script, correct = data.get("script"), data.get("correct")
        return cls(
            key=data["key"],
            case=data["case"],
            owner=data["owner"],
            case_id=data["case_id"],
            condition=data["condition"],
            trial=data["trial"],
            expected_skill=data["expected_skill"],
            activated=list(data["activated"]),
            routing=data["routing"],
            tokens=data["tokens"],
            turns=data["turns"],
            status=data["status"],
            error=data.get("error"),
            judge_usage=data.get("judge_usage"),
            behaviours=[BehaviourGrade.from_dict(b) for b in data.get("behaviours") or ()],
            script=ScriptUse(**script) if script else None,
            correct=Correctness(**correct) if correct else None,
            behaviour_rate=data.get("behaviour_rate"),
            passed=data.get("passed"),
            disagreements=list(data.get("disagreements") or ()),
        )
