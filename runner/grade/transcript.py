"""Grading from the transcript alone: routing (was the expected skill activated, none for
a case that expects none, a wrong one told apart from none), the expected script (read
through the tool, or cited in the answer), and behaviours about the process ("Read the X
skill before answering"), which a judge reading only the answer cannot see."""

from __future__ import annotations

import re

from .types import ScriptUse

# "Read the X skill before answering", "Activates the Megatron FSDP skill", "Uses the ... skill"
POSITIVE = re.compile(r"^(?:reads?|loads?|activates?|uses?|consults?|opens?)\b.*\bskill\b", re.IGNORECASE)
# "Does not activate any skill", "Doesn't load the X skill"
NEGATIVE = re.compile(
    r"^(?:(?:does\s+not|doesn't|do\s+not|never)\s+(?:read|load|activate|use|consult|open)\b.*\bskill"
    r"|(?:reads?|loads?|activates?|uses?|consults?|opens?)\s+no\b.*\bskill)",
    re.IGNORECASE,
)


def routing_outcome(expected: str | None, activated: list[str]) -> str:
    """correct | extra (the right one and others) | wrong (others only) | missed (none)
    for a case that expects a skill; correct | wrong for one that expects none."""
    if expected is None:
        return "correct" if not activated else "wrong"
    if expected in activated:
        return "correct" if len(set(activated)) == 1 else "extra"
    return "wrong" if activated else "missed"


def seen_skills(record: dict) -> list[str]:
    """Skills whose instructions reached the model: activated ones, or the inlined one."""
    seen = list(record["activated_skills"])
    if record.get("inlined_skill") and record["inlined_skill"] not in seen:
        seen.append(record["inlined_skill"])
    return seen


def process_behaviour(text: str, skill_names: list[str]) -> tuple[str, str | None] | None:
    """('positive'|'negative', named skill or None) when the behaviour is about using skills."""
    text = text.strip()
    named = next((name for name in skill_names if name in text), None)
    if NEGATIVE.search(text):
        return "negative", named
    if POSITIVE.search(text):
        return "positive", named
    return None


def grade_process(kind: str, named: str | None, record: dict) -> tuple[bool, str]:
    seen = seen_skills(record)
    if kind == "negative":
        if named:
            return named not in seen, f"{named} {'was' if named in seen else 'was not'} used"
        return not seen, f"skills used: {', '.join(seen) or 'none'}"
    target = named or record["expected_skill"]
    if target is None:
        return bool(seen), f"skills used: {', '.join(seen) or 'none'}"
    return target in seen, f"{target} {'was' if target in seen else 'was not'} read; used: {', '.join(seen) or 'none'}"


def script_use(record: dict) -> ScriptUse | None:
    script = record.get("expected_script")
    if not script:
        return None
    skill = record["expected_skill"]
    read = f"{skill}/{script}" in record["files_read"]
    answer = record.get("answer") or ""
    cited = script in answer or script.rsplit("/", 1)[-1] in answer
    return ScriptUse(script, read, cited, read or cited)
