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
  tripwire  a `must_not` pattern is found, and not inside a denied statement: the answer
            says what the behaviour rules out
  reversed  every `must` pattern is found, but every match of one of them stands in a
            turned-around statement (a negation the pattern does not spell, a predicate
            that denies or narrows it, a claim reported and then denied): the right words
            saying the wrong thing; a double negative ("not ... unless") is not reversed
  presence  every `must` pattern is found, affirmatively, and no `must_not` one
  absence   some `must` pattern is not found
  clear     the check has only `must_not` patterns and none is found: the answer avoids a
            mistake, which an answer that says nothing does too
How much each kind decides is the grading policy (runner/grade/policy.py).

An answer that says nothing (empty, only markup, or a short "I do not know" with no
config name or value in it) fails every content behaviour, whatever the checks say.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..load import Check
from .extract import normalise

TRIPWIRE, REVERSED, PRESENCE, ABSENCE, CLEAR = "tripwire", "reversed", "presence", "absence", "clear"
KINDS = (TRIPWIRE, REVERSED, PRESENCE, ABSENCE, CLEAR)

# A code token: a dotted or snake_case name, a call, an assignment, a number with a unit.
CODE_TOKEN_RE = re.compile(r"\w+\.\w+|\w+_\w+|\w+\(|=|\b\d")
_WORD_RE = re.compile(r"[A-Za-z]+")
# What an answer that declines to answer says.
_DECLINES_RE = re.compile(
    r"\b(?:i\s+(?:do\s+not|cannot|can\s+not|am\s+not\s+(?:sure|able))|not\s+sure|no\s+idea|unable\s+to|cannot\s+(?:help|answer|say)|unknown|n/?a)\b", re.IGNORECASE
)
NOTHING_WORDS = 3  # fewer words than this, with no code token, says nothing
DECLINE_WORDS = 15  # a decline up to this long, with no code token, says nothing


def says_nothing(answer: str) -> str | None:
    """Why an answer carries no content (None when it does): empty, only markup or
    punctuation, a word or two, or a short decline, in each case with no code token."""
    text = normalise(answer or "")
    if CODE_TOKEN_RE.search(text):
        return None
    words = _WORD_RE.findall(text)
    if not words:
        return "the answer is empty" if not text.strip() else "the answer is only markup or punctuation"
    if len(words) < NOTHING_WORDS:
        return f"the answer is {len(words)} word{'s' if len(words) > 1 else ''} with no config name or value"
    if len(words) <= DECLINE_WORDS and _DECLINES_RE.search(text):
        return "the answer declines to answer"
    return None

# A statement turned around: a negation, or a condition that makes an always-rule conditional.
# "not None" names a value (Python's "is not None"), not a negation; "no need to X" denies X.
NEGATION_RE = re.compile(r"\b(?<!-)(?:not(?!\s+None\b)|never|no longer|no need|cannot|neither|nor)\b(?!\s+only\b)|\bonly\s+(?:if|when|needed|required|matters|applies|trips|fires|triggers|bites|happens)\b", re.IGNORECASE)
_CLAUSE_END_RE = re.compile(r"[.;:!?,\u2014\u2013](?:\s|$)|\s-\s|\n|\bbut\b|\bhowever\b|\bwhile\b|\bwhereas\b|\bjust\b|\bonly\b(?=\s+(?:a|an|the)\b)", re.IGNORECASE)
_LOOKBACK_WORDS = 6
# What follows a statement can turn it around too: "X = True is not required", "fsdp_dtensor
# only matters when ...", "Transformer Engine is only checked when ...".
NEGATED_AFTER_RE = re.compile(
    r"^\W*(?:[\w.=>\"'-]+\s+){0,3}?(?:is|are|was|were|does|do|did|will|would|should|has|have)\s+(?:not|never|no longer)\b", re.IGNORECASE
)
# ... or narrow an always-rule to a case: "only trips on load", "applies only when ...".
NARROWED_AFTER_RE = re.compile(
    r"^\W*(?:[\w.=>\"'-]+\s+){0,3}?(?:(?:is|are)\s+only\s+(?:checked|needed|required|used|relevant|applied)\b"
    r"|only\s+(?:matters|applies|counts|happens|trips|fires|bites|triggers)\b|(?:applies|matters|counts|holds)\s+only\b)",
    re.IGNORECASE,
)
# A statement put in someone else's mouth and denied next: "People often say X. In 0.6.2
# it does not."
MYTH_RE = re.compile(r"\b(?:people|some|many|folks|others)\s+(?:often\s+|sometimes\s+)?(?:say|claim|think|believe|suggest|assume|expect)\b|\ba common (?:worry|misconception|myth|belief|claim)\b"
                     r"|\bit is (?:often|commonly|sometimes) (?:said|claimed|assumed)\b|\byou (?:may|might) have (?:read|heard)\b|\bcontrary to\b", re.IGNORECASE)
_SENTENCE_END_RE = re.compile(r"[.!?](?:\s|$)|\n\s*\n")


def _clause_start(text: str, position: int) -> int:
    start = 0
    for end in _CLAUSE_END_RE.finditer(text, 0, position):
        start = end.end()
    return start


def _negations(text: str) -> set[str]:
    return {m.group(0).lower().split()[0] for m in NEGATION_RE.finditer(text)}


def _negated(text: str, match: re.Match, expected: frozenset[str]) -> bool:
    """Whether the statement a match stands in is turned around: a negation inside the
    match that the pattern does not spell itself, or (for a pattern that spells none) one in
    the few words before it within the same clause, in the predicate that follows it, or a
    denial of what "people often say"."""
    end = _CLAUSE_END_RE.search(text, match.end())
    after = text[match.end() : end.start() if end else len(text)]
    stated = match.group(0)
    ends = list(_SENTENCE_END_RE.finditer(stated))
    if ends:  # a match that runs over sentences states what its last sentence says
        stated = stated[ends[-1].end() :]
    if _negations(stated) - expected:
        # "not accepted unless X", "never without X": a double negative states the rule
        return not _UNLESS_RE.search(stated + after)
    if _denied(text, match) or ("only" not in expected and NARROWED_AFTER_RE.search(after)):
        return True
    if expected:
        return False  # the pattern states a negated fact; its context cannot be told apart
    before = text[_clause_start(text, match.start()) : match.start()]
    window = " ".join(before.split()[-_LOOKBACK_WORDS:])
    return bool(NEGATION_RE.search(window) or NEGATED_AFTER_RE.search(after))


def _denied(text: str, match: re.Match) -> bool:
    """A match in a sentence that reports what others claim, when the next sentence denies it."""
    start = 0
    for end in _SENTENCE_END_RE.finditer(text, 0, match.start()):
        start = end.end()
    stop = _SENTENCE_END_RE.search(text, match.start())
    if stop is not None and match.end() > stop.start():
        return False  # the match runs on into the next sentence, the one that denies
    if not MYTH_RE.search(text[start : stop.end() if stop else len(text)]):
        return False
    following = text[stop.end() : stop.end() + 80] if stop else ""
    return bool(NEGATION_RE.search(following) or re.match(r"\s*(?:no|wrong|false|not so|that is wrong)\b", following, re.IGNORECASE))


_PATTERN_NEGATIONS = {"not": r"not|n't|n''t", "never": "never", "no": r"\bno\b", "cannot": "cannot", "neither": r"neither|\bnor\b", "nor": r"neither|\bnor\b", "only": "only"}
_UNLESS_RE = re.compile(r"\b(?:unless|without|except|on its own|by itself|alone|in isolation)\b", re.IGNORECASE)


def _expected_negations(pattern: re.Pattern) -> frozenset[str]:
    """The negation words a pattern spells itself: those, inside a match, are the statement."""
    return frozenset(word for word, spelled in _PATTERN_NEGATIONS.items() if re.search(spelled, pattern.pattern, re.IGNORECASE))


@dataclass(frozen=True)
class CheckOutcome:
    kind: str  # tripwire | reversed | presence | absence | clear
    why: str

    @property
    def passed(self) -> bool:
        """What the check says of the behaviour; how much that decides is the policy's."""
        return self.kind in (PRESENCE, CLEAR)


def run_check(check: Check, answer: str) -> CheckOutcome:
    """What the check says of one answer (see the module docstring for the kinds)."""
    text = normalise(answer)
    for pattern in check.must_not:
        # a forbidden statement that is itself denied ("it's a myth that X is fine") trips nothing
        expected = _expected_negations(pattern)
        found = next((m for m in pattern.finditer(text) if not (m.group(0) and _negated(text, m, expected))), None)
        if found:
            return CheckOutcome(TRIPWIRE, f"found /{pattern.pattern}/: {found.group(0)[:80]!r}")
    reversed_by = None
    for pattern in check.must:
        matches = list(pattern.finditer(text))
        if not matches:
            return CheckOutcome(ABSENCE, f"missing /{pattern.pattern}/")
        # a zero-width match (lookaheads over the whole answer) states nothing to turn around
        expected = _expected_negations(pattern)
        if all(m.group(0) and _negated(text, m, expected) for m in matches):
            reversed_by = reversed_by or (pattern, matches[0])
    if reversed_by is not None:
        pattern, match = reversed_by
        return CheckOutcome(REVERSED, f"/{pattern.pattern}/ found only in a negated or reversed statement: {match.group(0)[:80]!r}")
    if not check.must:
        return CheckOutcome(CLEAR, "no forbidden pattern found (nothing required)")
    return CheckOutcome(PRESENCE, "all patterns agree")
