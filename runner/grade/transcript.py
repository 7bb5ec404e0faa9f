"""Grading from the transcript alone: routing (was the expected skill activated, none for
a case that expects none, a wrong one told apart from none), the expected script (read
through the tool, or cited in the answer), and behaviours about the process ("Read the X
skill before answering"), which a judge reading only the answer cannot see."""

from __future__ import annotations

import re
from typing import NamedTuple

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


class Process(NamedTuple):
    """A behaviour about using skills: positive or negative, the skill it names (None: the
    case's expected one, or any), and for "X rather than Y" the skill it rules out."""

    kind: str
    named: str | None
    avoided: str | None = None


_PHRASE = re.compile(r"\b(?:the|a|an)\s+((?:[A-Za-z0-9/-]+\s+){0,5}?)skill\b", re.IGNORECASE)
_RATHER = re.compile(r"\b(?:rather\s+than|instead\s+of|not)\s+(?:the|a|an)\s+((?:[A-Za-z0-9/-]+\s+){0,5}?)skill\b", re.IGNORECASE)


def _skill_named(phrase: str, skill_names: list[str]) -> str | None:
    """The skill a phrase names: its id, or the one skill whose name shares the most words
    with it ("Megatron FSDP" -> a skill named x-megatron-fsdp); None when no single one."""
    for name in skill_names:
        if name in phrase:
            return name
    words = set(re.findall(r"[a-z0-9]+", phrase.lower()))
    scores = sorted(((len(words & set(name.split("-"))), name) for name in skill_names), reverse=True)
    if scores and scores[0][0] > 0 and (len(scores) == 1 or scores[1][0] < scores[0][0]):
        return scores[0][1]
    return None


def process_behaviour(text: str, skill_names: list[str]) -> Process | None:
    """The behaviour as a Process when it is about using skills, else None."""
    text = text.strip()
    if NEGATIVE.search(text):
        phrase = _PHRASE.search(text)
        return Process("negative", _skill_named(phrase.group(1), skill_names) if phrase else None)
    if POSITIVE.search(text):
        rather = _RATHER.search(text)
        head = text[: rather.start()] if rather else text
        phrase = _PHRASE.search(head)
        return Process("positive", _skill_named(phrase.group(1), skill_names) if phrase else None, _skill_named(rather.group(1), skill_names) if rather else None)
    return None


def grade_process(process: Process, record: dict) -> tuple[bool, str]:
    seen = seen_skills(record)
    used = f"used: {', '.join(seen) or 'none'}"
    if process.kind == "negative":
        if process.named:
            return process.named not in seen, f"{process.named} {'was' if process.named in seen else 'was not'} used"
        return not seen, f"skills {used}"
    target = process.named or record["expected_skill"]
    if target is None:
        return bool(seen), f"skills {used}"
    if target not in seen:
        return False, f"{target} was not read; {used}"
    avoided = process.avoided
    if avoided and avoided in seen and seen.index(avoided) < seen.index(target):
        # "X rather than Y": reaching for Y first is the wrong choice, whatever came after
        return False, f"{avoided} was read before {target}; {used}"
    return True, f"{target} was read; {used}"


def script_use(record: dict) -> ScriptUse | None:
    script = record.get("expected_script")
    if not script:
        return None
    skill = record["expected_skill"]
    read = f"{skill}/{script}" in record["files_read"]
    answer = record.get("answer") or ""
    cited = script in answer or script.rsplit("/", 1)[-1] in answer
    return ScriptUse(script, read, cited, read or cited)
