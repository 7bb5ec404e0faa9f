"""What the model sees under each condition. Eval files, ground truth and behaviours never
enter the context: only the case's prompt, and (by condition) the skills."""

from __future__ import annotations

from dataclasses import dataclass

from ..load import Case, Skill
from ..providers import Tool
from .skill_tools import ACTIVATE, READ, catalogue

CONDITIONS = ("baseline", "skills", "inline")

BASE_PROMPT = (
    "You are a coding assistant for an engineer who trains large models with NVIDIA "
    "Megatron-Bridge. Answer the question concretely: name exact config fields, values "
    "and commands, and say what to check."
)
SKILLS_PROMPT = (
    "Skills are folders of instructions and scripts for specific tasks. When a skill "
    "below matches the task, call activate_skill with its name before you answer, and "
    "read_skill_file for any file its instructions point you to. If none matches, answer "
    "without them."
)


@dataclass(frozen=True)
class Setup:
    system: str
    tools: tuple[Tool, ...]
    inlined: str | None = None  # the skill put into the prompt (inline condition)


def setup(condition: str, case: Case, skills: list[Skill]) -> Setup:
    if condition == "baseline":
        return Setup(BASE_PROMPT, ())
    if condition == "skills":
        return Setup(f"{BASE_PROMPT}\n\n{SKILLS_PROMPT}\n\n{catalogue(skills)}", (ACTIVATE, READ))
    if condition == "inline":
        # The upper bound: the right skill, already read. A case that expects no skill
        # gets none, i.e. the baseline prompt.
        skill = next((s for s in skills if s.name == case.expected_skill), None)
        if skill is None:
            return Setup(BASE_PROMPT, ())
        return Setup(f"{BASE_PROMPT}\n\nFollow this skill where it applies:\n<skill name=\"{skill.name}\">\n{skill.body.strip()}\n</skill>", (), skill.name)
    raise ValueError(f"unknown condition {condition!r}")
