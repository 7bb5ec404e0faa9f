"""Grading from the transcript alone: routing (was the expected skill activated, none for
a case that expects none, a wrong one told apart from none), the expected script (read
through the tool, or cited in the answer), and behaviours about the process ("Read the X
skill before answering"), which a judge reading only the answer cannot see."""

from __future__ import annotations

import re

from .types import ScriptUse

# A process behaviour names the skill as the object of its verb: "Read the X skill before
# answering", "Activates the Megatron FSDP skill", "Uses the TP/DP/PP communication overlap
# skill rather than ...". "Uses ckpt_format from the skill: fsdp_dtensor" is about content.
_VERB = r"(?:reads?|loads?|activates?|uses?|consults?|opens?)"
_NAME = r"(?:(?!(?:from|of|in|on|with|as|for|to|by|at)\b)[A-Za-z0-9/-]+\s+){0,4}"
POSITIVE = re.compile(rf"^{_VERB}\s+(?:the|a|an)\s+{_NAME}skill\b", re.IGNORECASE)
# "Does not activate any skill", "Doesn't load the X skill", "Activates no skill from this bundle"
NEGATIVE = re.compile(
    rf"^(?:(?:does\s+not|doesn't|do\s+not|never)\s+(?:read|load|activate|use|consult|open)\s+(?:the|a|an|any)\s+{_NAME}skill\b"
    rf"|{_VERB}\s+no\s+{_NAME}skills?\b)",
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


def activations(record: dict) -> list[str]:
    """Skills activated, in order: through activate_skill, or by reading the skill's SKILL.md
    with read_skill_file (the whole skill reached the model either way; records written
    before the tool counted that read are read the same way)."""
    out = list(record["activated_skills"])
    for entry in record.get("files_read") or ():
        skill, _, path = entry.partition("/")
        if path == "SKILL.md" and skill not in out:
            out.append(skill)
    return out


def seen_skills(record: dict) -> list[str]:
    """Skills whose instructions reached the model: activated ones, or the inlined one."""
    seen = activations(record)
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
