"""What the model sees under each condition. Eval files, ground truth and behaviours never
enter the context: only the case's prompt, and (by condition) the skills."""

from __future__ import annotations

from dataclasses import dataclass

from ..load import Case, Skill
from ..providers import Tool
from .placebo import DECOY, decoy_skill, decoy_text
from .skill_tools import ACTIVATE, READ, catalogue

CONDITIONS = ("baseline", "skills", "inline", "placebo", "inline-placebo")
REPLICA = "@"  # `baseline@2`: an identical second arm of a condition, its own requests and cache


def base_condition(condition: str) -> str | None:
    """The condition an arm repeats (`baseline@2` -> `baseline`), the condition itself for
    a plain one, None for a name that is neither."""
    name, sep, copy = condition.partition(REPLICA)
    if name not in CONDITIONS:
        return None
    if not sep:
        return name
    return name if copy.isdigit() and not copy.startswith("0") and int(copy) >= 2 else None


def is_replica(condition: str) -> bool:
    return REPLICA in condition and base_condition(condition) is not None

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
    extra: tuple[Skill, ...] = ()  # skills the tools serve beyond the bundle's (the placebo's decoy)


INLINE_LEAD = "Follow this skill where it applies:"


def inline_block(name: str, body: str) -> str:
    return f'{INLINE_LEAD}\n<skill name="{name}">\n{body}\n</skill>'


@dataclass(frozen=True)
class ClientSetup:
    """What an agent client's workspace holds under a condition: the same arms as the API
    loop, through the client's own folders (its skills folder, its instruction file)."""

    install: bool = False
    extra: tuple[Skill, ...] = ()
    instructions: str | None = None
    inlined: str | None = None


def client_setup(condition: str, case: Case, skills: list[Skill]) -> ClientSetup:
    condition = base_condition(condition) or condition
    if condition == "baseline":
        return ClientSetup()
    if condition == "skills":
        return ClientSetup(install=True)
    if condition == "placebo":
        return ClientSetup(install=True, extra=(decoy_skill(skills),))
    if condition in ("inline", "inline-placebo"):
        skill = next((s for s in skills if s.name == case.expected_skill), None)
        if skill is None:
            return ClientSetup()
        name, body = (skill.name, skill.body.strip()) if condition == "inline" else (DECOY, decoy_text(len(skill.body.strip())))
        return ClientSetup(instructions=inline_block(name, body), inlined=name)
    raise ValueError(f"unknown condition {condition!r}")


def setup(condition: str, case: Case, skills: list[Skill]) -> Setup:
    condition = base_condition(condition) or condition  # a replica sees what its condition sees
    if condition == "baseline":
        return Setup(BASE_PROMPT, ())
    if condition == "skills":
        return Setup(f"{BASE_PROMPT}\n\n{SKILLS_PROMPT}\n\n{catalogue(skills)}", (ACTIVATE, READ))
    if condition == "placebo":
        decoy = decoy_skill(skills)
        return Setup(f"{BASE_PROMPT}\n\n{SKILLS_PROMPT}\n\n{catalogue([*skills, decoy])}", (ACTIVATE, READ), extra=(decoy,))
    if condition in ("inline", "inline-placebo"):
        # The upper bound: the right skill, already read (or, as a placebo, a decoy body
        # of the same length). A case that expects no skill gets none: the baseline prompt.
        skill = next((s for s in skills if s.name == case.expected_skill), None)
        if skill is None:
            return Setup(BASE_PROMPT, ())
        name, body = (skill.name, skill.body.strip()) if condition == "inline" else (DECOY, decoy_text(len(skill.body.strip())))
        return Setup(f"{BASE_PROMPT}\n\n{inline_block(name, body)}", (), name)
    raise ValueError(f"unknown condition {condition!r}")
