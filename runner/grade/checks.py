"""Running a behaviour's deterministic check (runner/load/checks.py reads the sidecars) over
an answer, after normalising the answer so that style does not decide the verdict.

Normalising: Markdown emphasis and inline-code backticks go (`*parameters*`, `**not**`),
curly quotes become straight, contractions are spelled out ("isn't" -> "is not"), a shell
command split over lines with `\\` is joined, removed lines of a diff are dropped and the
`+` of added lines goes, and names bound in the answer are resolved: a module alias
(`import megatron.bridge.training.comm_overlap as co` makes `co.X` read
`megatron.bridge.training.comm_overlap.X`) and a config section bound to a variable
(`ddp = cfg.ddp` makes `ddp.x` read `cfg.ddp.x`).

What a check says, by kind:
  tripwire  a `must_not` pattern is found: the answer says what the behaviour rules out
  reversed  every `must` pattern is found, but one only inside a negated or reversed
            statement ("is not needed", "only if ...") while the pattern itself carries no
            negation: the right words saying the wrong thing
  presence  every `must` pattern is found, affirmatively, and no `must_not` one
  absence   some `must` pattern is not found
How much each kind decides is the grading policy (runner/grade/policy.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..load import Check

TRIPWIRE, REVERSED, PRESENCE, ABSENCE = "tripwire", "reversed", "presence", "absence"
KINDS = (TRIPWIRE, REVERSED, PRESENCE, ABSENCE)

_CONTRACTIONS = {
    "can't": "cannot", "won't": "will not", "shan't": "shall not", "isn't": "is not", "aren't": "are not",
    "wasn't": "was not", "weren't": "were not", "doesn't": "does not", "don't": "do not", "didn't": "did not",
    "hasn't": "has not", "haven't": "have not", "hadn't": "had not", "shouldn't": "should not",
    "wouldn't": "would not", "couldn't": "could not", "mustn't": "must not", "needn't": "need not",
}
_CONTRACTION_RE = re.compile(r"\b(" + "|".join(re.escape(k) for k in _CONTRACTIONS) + r")\b", re.IGNORECASE)
_EMPHASIS_RE = re.compile(r"(?<![\w*])(\*{1,3})(?=\S)(.+?)(?<=\S)\1(?![\w*])|(?<![\w])(_{1,2})(?=[^\s_])(.+?)(?<=[^\s_])\3(?!\w)")
_FENCE_RE = re.compile(r"^(\s*)(```|~~~)\s*([\w+-]*)")
_ALIAS_RE = re.compile(r"^\s*import\s+([\w.]+)\s+as\s+(\w+)\s*$|^\s*from\s+([\w.]+)\s+import\s+(\w+)\s+as\s+(\w+)\s*$", re.MULTILINE)
_QUOTED_KEY_RE = re.compile(r"[\"']((?:\w+\.)+\w+)[\"']\s*:")
_TABLE_ROW_RE = re.compile(r"^\s*\|\s*(?:cfg\.)?((?:\w+\.)*\w*_\w*|\w+\.\w+(?:\.\w+)*)\s*\|\s*([^|]{1,60}?)\s*\|")
_BINDING_RE = re.compile(r"^\s*(\w+)\s*=\s*((?:cfg|config|c)(?:\.\w+)+)\s*$", re.MULTILINE)

# A statement turned around: a negation, or a condition that makes an always-rule conditional.
NEGATION_RE = re.compile(r"\b(?<!-)(?:not|never|no longer|cannot|neither|nor)\b(?!\s+only\b)|\bonly\s+(?:if|when|needed|required|matters|applies)\b", re.IGNORECASE)
_CLAUSE_END_RE = re.compile(r"[.;:!?,\u2014\u2013](?:\s|$)|\s-\s|\n|\bbut\b|\bhowever\b|\bwhile\b|\bwhereas\b|\bjust\b|\bonly\b(?=\s+(?:a|an|the)\b)", re.IGNORECASE)
_LOOKBACK_WORDS = 6
# What follows a statement can turn it around too: "X = True is not required", "fsdp_dtensor
# only matters when ...", "Transformer Engine is only checked when ...".
NEGATED_AFTER_RE = re.compile(
    r"^\W*(?:[\w.=>\"'-]+\s+){0,3}?(?:(?:is|are|was|were|does|do|did|will|would|should|has|have)\s+(?:not|never|no longer)\b"
    r"|(?:is|are)\s+only\s+(?:checked|needed|required|used|relevant|applied)\b|only\s+(?:matters|applies|counts|happens)\b)",
    re.IGNORECASE,
)


def _diff_lines(lines: list[str]) -> list[str]:
    out, fence = [], None
    for line in lines:
        match = _FENCE_RE.match(line)
        if match:
            fence = None if fence is not None else match.group(3).lower()
            out.append(line)
            continue
        if fence in ("diff", "patch") and not line.startswith(("+++", "---")):
            if line.startswith("-"):
                continue  # what the diff removes is not advice
            if line.startswith("+"):
                line = line[1:]
        out.append(line)
    return out


def _yaml_paths(data, prefix: str = "") -> list[str]:
    out = []
    if isinstance(data, dict):
        for key, value in data.items():
            out += _yaml_paths(value, f"{prefix}{key}.")
    elif prefix:
        shown = repr(data) if isinstance(data, str) else str(data)
        out.append(f"{prefix[:-1]} = {shown}")
    return out


def _flatten_config_blocks(lines: list[str]) -> list[str]:
    """After a YAML block and after a Markdown table, the same settings as `a.b = value`
    lines, so that an override written as nested YAML or as a field/value table reads like
    the assignment it stands for."""
    import yaml

    out, block, fence = [], [], None
    for line in lines:
        match = _FENCE_RE.match(line)
        if match and fence is None:
            fence = match.group(3).lower()
            block = []
            out.append(line)
            continue
        if match and fence is not None:
            out.append(line)
            if fence in ("yaml", "yml"):
                try:
                    data = yaml.safe_load("\n".join(block))
                except yaml.YAMLError:
                    data = None
                out += _yaml_paths(data)
            fence = None
            continue
        if fence is not None:
            block.append(line)
        row = None if fence is not None else _TABLE_ROW_RE.match(line.replace("`", ""))
        out.append(line)
        if row and not set(row.group(2)) <= set("-: "):
            out.append(f"{row.group(1)} = {row.group(2).strip()}")
    return out


def normalise(answer: str) -> str:
    text = answer.replace("\u2018", "'").replace("\u2019", "'").replace("\u201c", '"').replace("\u201d", '"')
    text = "\n".join(_flatten_config_blocks(_diff_lines(text.split("\n"))))
    text = _QUOTED_KEY_RE.sub(r"\1:", text)
    text = re.sub(r"[ \t]*\\\n[ \t]*", " ", text)  # shell line continuations
    text = _CONTRACTION_RE.sub(lambda m: _CONTRACTIONS[m.group(1).lower()], text)
    for _ in range(2):  # nested emphasis: ***x*** or **_x_**
        text = _EMPHASIS_RE.sub(lambda m: m.group(2) if m.group(2) is not None else m.group(4), text)
    text = text.replace("`", "")
    for match in _ALIAS_RE.finditer(text):
        if match.group(1):
            module, alias = match.group(1), match.group(2)
            text = re.sub(rf"(?<![\w.]){re.escape(alias)}\.", module + ".", text)
        else:
            name, alias = match.group(4), match.group(5)
            text = re.sub(rf"(?<![\w.]){re.escape(alias)}(?=[.(])", name, text)
    for match in _BINDING_RE.finditer(text):
        name, target = match.group(1), match.group(2)
        if name not in ("cfg", "config"):
            text = re.sub(rf"(?<![\w.]){re.escape(name)}\.(?=\w)", target + ".", text)
    return text


def _clause_start(text: str, position: int) -> int:
    start = 0
    for end in _CLAUSE_END_RE.finditer(text, 0, position):
        start = end.end()
    return start


def _negated(text: str, match: re.Match) -> bool:
    """Whether the statement a match stands in is turned around: a negation inside the
    match, in the few words before it within the same clause, or in the predicate that
    follows it."""
    before = text[_clause_start(text, match.start()) : match.start()]
    window = " ".join(before.split()[-_LOOKBACK_WORDS:])
    end = _CLAUSE_END_RE.search(text, match.end())
    after = text[match.end() : end.start() if end else len(text)]
    return bool(NEGATION_RE.search(window) or NEGATION_RE.search(match.group(0)) or NEGATED_AFTER_RE.search(after))


def _carries_negation(pattern: re.Pattern) -> bool:
    """A pattern that spells a negation itself expects the negated statement."""
    return bool(re.search(r"not|never|n't|n''t|\bno\b|without|only|cannot|neither", pattern.pattern, re.IGNORECASE))


@dataclass(frozen=True)
class CheckOutcome:
    kind: str  # tripwire | reversed | presence | absence
    why: str

    @property
    def passed(self) -> bool:
        return self.kind == PRESENCE


def run_check(check: Check, answer: str) -> CheckOutcome:
    """What the check says of one answer (see the module docstring for the kinds)."""
    text = normalise(answer)
    for pattern in check.must_not:
        found = pattern.search(text)
        if found:
            return CheckOutcome(TRIPWIRE, f"found /{pattern.pattern}/: {found.group(0)[:80]!r}")
    reversed_by = None
    for pattern in check.must:
        matches = list(pattern.finditer(text))
        if not matches:
            return CheckOutcome(ABSENCE, f"missing /{pattern.pattern}/")
        # a zero-width match (lookaheads over the whole answer) states nothing to turn around
        if not _carries_negation(pattern) and all(m.group(0) and _negated(text, m) for m in matches):
            reversed_by = reversed_by or (pattern, matches[0])
    if reversed_by is not None:
        pattern, match = reversed_by
        return CheckOutcome(REVERSED, f"/{pattern.pattern}/ found only in a negated or reversed statement: {match.group(0)[:80]!r}")
    return CheckOutcome(PRESENCE, "all patterns agree")
