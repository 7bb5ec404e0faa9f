"""`mbskills mutate`: change one fact of a claim section at a time and see whether its
check notices.

Mutations are generated mechanically from the SKILL.md text (no list of expected facts):
booleans flipped, numbers changed, backticked names swapped for another of the skill,
quoted messages cut, exception types swapped, negations dropped, comparisons turned, a
sentence deleted; and word-level: two named objects of a sentence trading places, and a
condition, order or verdict replaced by its neighbour (before/after, with/without,
accepted/refused, passes/fails, first/last, unless/if, ...). Each mutant is the whole SKILL.md re-read with that one change; the
checks that read the changed section (its own and any that build on it as a sibling) run
again in this process, so Megatron is imported once. A mutant is killed when one of them
fails. Equivalent mutants (the sentence stays true) are listed in a reviewed allow-list.
"""

from __future__ import annotations

import fnmatch
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..core import UsageError, defaults, write_atomic
from ..load import CARD_FILE, SKILL_FILE, Bundle, load_yaml
from .sections import FENCE_RE, MARKER_RE

ALLOW_FILE = Path(defaults.MUTANTS_ALLOW)

# A failure message that means "the sentence is no longer one its check knows" rather
# than "the check compared the stated value and the library disagreed".
UNRECOGNISED = ("SKILL.md no longer says", "SKILL.md states what its check does not hold", "places in SKILL.md, expected one", "has no code block", "SKILL.md lost claim")

EXCEPTION_SWAP = {"ValueError": "AssertionError", "AssertionError": "ValueError", "AttributeError": "KeyError", "KeyError": "AttributeError", "TypeError": "ValueError", "RuntimeError": "ValueError", "ImportError": "RuntimeError", "ModuleNotFoundError": "ImportError"}
COMPARISON_SWAP = {">=": ">", "<=": "<", ">": ">=", "<": "<=", "at least": "at most", "at most": "at least", "more than": "fewer than", "above": "below", "below": "above"}


@dataclass(frozen=True)
class Mutation:
    skill: str
    claim: str
    operator: str
    line: int  # 1-based line of the change in its file
    was: str
    now: str
    start: int  # offsets into the file's text
    end: int
    file: str = "SKILL.md"  # relative to the skill folder

    def apply(self, text: str) -> str:
        return text[: self.start] + self.now + text[self.end :]

    def context(self, text: str) -> str:
        """The original line(s) the change touches, whitespace collapsed."""
        begin = text.rfind("\n", 0, self.start) + 1
        finish = text.find("\n", self.end)
        return " ".join(text[begin : finish if finish >= 0 else len(text)].split())


@dataclass
class Outcome:
    mutation: Mutation
    killed: bool
    how: str  # contradicted | unrecognised | survived | equivalent
    by: str = ""  # the claim whose check failed
    message: str = ""
    context: str = ""


@dataclass
class SkillScore:
    skill: str
    total: int = 0
    killed: int = 0
    contradicted: int = 0
    unrecognised: int = 0
    equivalent: int = 0
    survivors: list[Outcome] = field(default_factory=list)

    @property
    def rate(self) -> float:
        scored = self.total - self.equivalent
        return self.killed / scored if scored else 0.0


@dataclass
class MutateRun:
    scores: list[SkillScore]
    outcomes: list[Outcome]
    stale: list[str]  # allow-list entries that match no surviving mutant
    seconds: float
    min_kill: float

    @property
    def ok(self) -> bool:
        return not self.stale and all(s.rate >= self.min_kill for s in self.scores)


# --- generating mutants -------------------------------------------------------------


def _section_spans(text: str) -> list[tuple[str, int, int, list[tuple[int, int]]]]:
    """(claim id, start, end, code spans) for every claim section, as offsets into `text`."""
    spans, current, inside, offset, code_start = [], None, False, 0, None
    code: list[tuple[int, int]] = []

    def close(at: int) -> None:
        if current is not None:
            spans.append((current[0], current[1], at, list(code)))

    for line in text.split("\n"):
        line_end = offset + len(line)
        if FENCE_RE.match(line):  # a code span runs from its opening fence to past its closing one
            if inside:
                code.append((code_start, line_end + 1))
            else:
                code_start = offset
            inside = not inside
        elif not inside and (MARKER_RE.search(line) or line.startswith("#")):
            close(offset)
            marker = MARKER_RE.search(line)
            current = (marker.group(1), line_end + 1) if marker else None
            code = []
        offset = line_end + 1
    close(len(text))
    from .sections import description_lines

    described = description_lines(text)
    if described is not None:  # the front-matter description, when a claim reads it
        claim, first, last = described
        starts = [0]
        for line in text.split("\n"):
            starts.append(starts[-1] + len(line) + 1)
        begin = starts[first] + (len("description:") if text[starts[first] :].startswith("description:") else 0)
        spans.insert(0, (claim, begin, starts[last], []))
    return spans


_BACKTICK = re.compile(r"`([^`]{1,200})`")  # may wrap onto the next line
_QUOTE = re.compile(r'"([^"]{1,300})"')
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)*(?![\w])")
_BOOL = re.compile(r"\b(True|False|on|off)\b")  # prose says on/off where code says True/False
BOOL_SWAP = {"True": "False", "False": "True", "on": "off", "off": "on"}
_EXCEPTION = re.compile(r"\b(" + "|".join(EXCEPTION_SWAP) + r")\b")
_NEGATION = re.compile(r"(\*\*not\*\*|\bnot\b|\bnever\b|\bno\b)\s?", re.IGNORECASE)
_COMPARISON = re.compile(r"(?<![<>=-])(>=|<=|>|<)(?![>=-])|\b(at least|at most|more than|above|below)\b")


# Word-level operators: a condition, an order or a verdict replaced by its neighbour.
WORD_SWAP = {
    "before": "after", "after": "before", "with": "without", "without": "with",
    "accepts": "rejects", "rejects": "accepts", "accepted": "refused", "refused": "accepted", "rejected": "accepted",
    "allows": "refuses", "refuses": "allows", "passes": "fails", "fails": "passes", "pass": "fail", "fail": "pass",
    "first": "last", "last": "first", "earlier": "later", "later": "earlier", "older": "newer", "newer": "older",
    "unless": "if", "enabled": "disabled", "disabled": "enabled", "inside": "outside", "outside": "inside",
    "only": "also", "both": "neither", "every": "no", "all": "none", "raises": "warns", "warns": "raises",
}
_WORD = re.compile(r"\b(" + "|".join(sorted(WORD_SWAP, key=len, reverse=True)) + r")\b", re.IGNORECASE)
_SENTENCE_NAMES = re.compile(r"`([^`\n]{1,200})`")


def _word_swapped(word: str) -> str:
    now = WORD_SWAP[word.lower()]
    return now.capitalize() if word[:1].isupper() else now


def _number_changed(token: str) -> str:
    parts = token.split(".")
    parts[-1] = str(int(parts[-1]) + 1)
    return ".".join(parts)


def _quote_changed(content: str) -> str:
    words = content.split(" ")
    return " ".join(words[:-1]) if len(words) > 1 else content + "s"


def _sentences(text: str, start: int, end: int, code: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sentence spans of the prose in [start, end): split after . ! ? followed by a space
    and a capital (outside backticks and quotes), at blank lines and at list items."""
    spans, begin, ticks, quotes = [], None, False, False
    position = start
    while position < end:
        inside_code = next((b for a, b in code if a <= position < b), None)
        if inside_code is not None:
            if begin is not None:
                spans.append((begin, position))
                begin = None
            position = inside_code
            continue
        ch = text[position]
        line_start = position == 0 or text[position - 1] == "\n"
        if line_start and re.match(r"[ \t]*(?:[-*]|\d+\.)[ \t]", text[position:end]) and begin is not None:
            spans.append((begin, position))
            begin = None
        if line_start and text[position:end].startswith("\n") and begin is not None:
            spans.append((begin, position))
            begin = None
        if begin is None and not ch.isspace():
            begin = position
        if ch == "`":
            ticks = not ticks
        elif ch == '"' and not ticks:
            quotes = not quotes
        elif ch in ".!?" and not ticks and not quotes and begin is not None:
            following = text[position + 1 : position + 3]
            if re.match(r"\s[A-Z*`(\"]", following) or position + 1 >= end or text[position + 1] == "\n" and text[position + 2 : position + 3] in ("\n", ""):
                spans.append((begin, position + 1))
                begin = None
        position += 1
    if begin is not None and text[begin:end].strip():
        spans.append((begin, end))
    return [(a, b) for a, b in spans if text[a:b].strip(" -*\n")]


def generate(skill: str, text: str, file: str = "SKILL.md") -> list[Mutation]:
    mutations: list[Mutation] = []

    def add(claim: str, operator: str, start: int, end: int, now: str) -> None:
        if text[start:end] != now:
            mutations.append(Mutation(skill, claim, operator, text.count("\n", 0, start) + 1, text[start:end], now, start, end, file))

    for claim, start, end, code in _section_spans(text):
        body = text[start:end]
        prose_only = [(a - start, b - start) for a, b in code]

        def in_code(offset: int) -> bool:
            return any(a <= offset < b for a, b in prose_only)

        names = list(dict.fromkeys(m.group(1) for m in _BACKTICK.finditer(body)))
        for m in _BOOL.finditer(body):
            if m.group(1) in ("on", "off") and in_code(m.start()):
                continue
            add(claim, "boolean", start + m.start(), start + m.end(), BOOL_SWAP[m.group(1)])
        for m in _NUMBER.finditer(body):
            add(claim, "number", start + m.start(), start + m.end(), _number_changed(m.group(0)))
        for m in _EXCEPTION.finditer(body):
            add(claim, "exception", start + m.start(), start + m.end(), EXCEPTION_SWAP[m.group(1)])
        for m in _COMPARISON.finditer(body):
            if in_code(m.start()):
                continue
            token = m.group(1) or m.group(2)
            add(claim, "comparison", start + m.start(), start + m.end(), COMPARISON_SWAP[token])
        for m in _NEGATION.finditer(body):
            if not in_code(m.start()):
                add(claim, "negation", start + m.start(), start + m.end(), "always " if m.group(1).lower() == "never" else "")
        for m in _BACKTICK.finditer(body):
            if in_code(m.start()):
                continue
            others = [n for n in names if n != m.group(1)]
            if others:  # the next distinct name of the section, so the swap is deterministic
                index = names.index(m.group(1))
                add(claim, "name", start + m.start(1), start + m.end(1), (names[index + 1:] + names[:index])[0] if len(names) > 1 else others[0])
        for m in _QUOTE.finditer(body):
            add(claim, "message", start + m.start(1), start + m.end(1), _quote_changed(m.group(1)))
        for m in _WORD.finditer(body):
            if not in_code(m.start()):
                add(claim, "word", start + m.start(), start + m.end(), _word_swapped(m.group(1)))
        for a, b in _sentences(text, start, end, code):
            add(claim, "sentence", a, b, "")
            # two named objects of one sentence trade places
            pair = [m for m in _SENTENCE_NAMES.finditer(text, a, b)][:2]
            if len(pair) == 2 and pair[0].group(1) != pair[1].group(1):
                first, second = pair
                swapped = second.group(1) + text[first.end(1) : second.start(1)] + first.group(1)
                add(claim, "swap", first.start(1), second.end(1), swapped)
    return sorted(mutations, key=lambda m: (m.line, m.start, m.operator))


# --- the allow-list ----------------------------------------------------------------------


@dataclass(frozen=True)
class Equivalent:
    skill: str
    claim: str
    operator: str
    was: str
    now: str
    near: str  # a phrase of the original line, to tell occurrences apart
    reason: str
    line: int  # in the allow-list file

    def matches(self, mutation: Mutation, context: str) -> bool:
        return (self.skill, self.claim, self.operator, self.was, self.now) == (mutation.skill, mutation.claim, mutation.operator, mutation.was, mutation.now) and self.near in context


def load_allow_list(path: Path) -> list[Equivalent]:
    if not path.is_file():
        return []
    located = load_yaml(path)
    entries = located.data or []
    if not isinstance(entries, list):
        raise UsageError(f"{path}:{located.line()}: expected a list of equivalent mutants")
    allowed = []
    keys = ("skill", "claim", "operator", "was", "now", "near", "reason")
    for index, entry in enumerate(entries):
        where = f"{path}:{located.line((index,))}"
        if not isinstance(entry, dict):
            raise UsageError(f"{where}: entry {index} is not a mapping")
        missing = [k for k in keys if not isinstance(entry.get(k), str)]
        if missing:
            raise UsageError(f"{where}: entry {index} needs {', '.join(missing)} (strings)")
        if not entry["reason"].strip():
            raise UsageError(f"{where}: entry {index} gives no reason")
        allowed.append(Equivalent(*(entry[k] for k in keys), located.line((index,))))
    return allowed


# --- running ------------------------------------------------------------------------------


def _classify(results) -> tuple[bool, str, str, str]:
    from .status import ERROR, FAILED

    for result in results:
        if result.status in (FAILED, ERROR):
            how = "unrecognised" if any(marker in result.message for marker in UNRECOGNISED) else "contradicted"
            return True, how, result.claim, result.message
    return False, "survived", "", ""


def mutate_bundle(bundle: Bundle, *, skills: list[str] | None = None, pattern: str = "*", min_kill: float = 0.95, allow_path: Path | None = None, progress=None) -> MutateRun:
    from .run import load_checks, run_skill
    from .environment import quiet
    from .sections import read_skill_sections, skill_documents
    from .status import OK_RESULTS

    bundle.require_skills(skills)
    allow_path = allow_path or bundle.root / ALLOW_FILE
    allowed = load_allow_list(allow_path)
    start = time.perf_counter()
    load_checks([root for root in bundle.skill_dirs() if not skills or root.name in skills])
    scores, outcomes, used = [], [], set()
    with quiet(stderr=True):  # a mutated script's argparse usage line must not reach the terminal
        for root in bundle.skill_dirs():
            if skills and root.name not in skills:
                continue
            texts = {path: path.read_text("utf-8") for path in skill_documents(root) if path.is_file()}
            claims = load_yaml(root / CARD_FILE).data.get("claims", [])
            traces: dict = {}
            baseline = run_skill(root, claims, read_skill_sections(root, texts), traces=traces)
            broken = [r for r in baseline if r.status not in OK_RESULTS]
            if broken:
                raise UsageError(f"{root / SKILL_FILE}: mutation testing needs every claim passing first; {broken[0].claim} is {broken[0].status}: {broken[0].message} (run `mbskills check`)")
            readers: dict[str, set[str]] = {}
            for claim_id, trace in traces.items():
                readers.setdefault(claim_id, set()).add(claim_id)
                for sibling in trace.siblings:
                    readers.setdefault(sibling, set()).add(claim_id)
            score = SkillScore(root.name)
            mutations = [m for path, text in texts.items() for m in generate(root.name, text, path.relative_to(root).as_posix()) if fnmatch.fnmatchcase(m.claim, pattern)]
            for number, mutation in enumerate(mutations, start=1):
                path = root / mutation.file
                context = mutation.context(texts[path])
                mutated = {**texts, path: mutation.apply(texts[path])}
                results = run_skill(root, claims, read_skill_sections(root, mutated), only=readers.get(mutation.claim, {mutation.claim}))
                killed, how, by, message = _classify(results)
                outcome = Outcome(mutation, killed, how, by, message, context)
                if not killed:
                    match = next((e for e in allowed if e.matches(mutation, context)), None)
                    if match is not None:
                        used.add(match)
                        outcome.how, outcome.message = "equivalent", match.reason
                score.total += 1
                score.killed += killed
                score.contradicted += how == "contradicted"
                score.unrecognised += how == "unrecognised"
                score.equivalent += outcome.how == "equivalent"
                if outcome.how == "survived":
                    score.survivors.append(outcome)
                outcomes.append(outcome)
                if progress:
                    progress(root.name, number, len(mutations))
            scores.append(score)
    in_scope = [e for e in allowed if (not skills or e.skill in skills) and fnmatch.fnmatchcase(e.claim, pattern)]
    stale = [f"{allow_path}:{e.line}: {e.skill}/{e.claim} {e.operator} {e.was!r} -> {e.now!r} matches no surviving mutant; remove it" for e in in_scope if e not in used]
    return MutateRun(scores, outcomes, stale, time.perf_counter() - start, min_kill)


def format_report(run: MutateRun) -> str:
    lines = []
    for score in run.scores:
        lines.append(
            f"{score.skill}: {score.killed} of {score.total - score.equivalent} mutants killed ({score.rate:.1%}); "
            f"{score.contradicted} by a comparison with the library, {score.unrecognised} by the sentence no longer read; "
            f"{score.equivalent} equivalent (allow-list), {len(score.survivors)} survived"
        )
        for outcome in score.survivors:
            m = outcome.mutation
            lines.append(f"  survived: {m.file}:{m.line} [{m.claim}] {m.operator}: {m.was!r} -> {m.now!r}   in: {outcome.context[:100]}")
    lines.extend(run.stale)
    verdict = "ok" if run.ok else "FAILED"
    lines.append(f"{verdict}: target {run.min_kill:.0%} killed per skill; {sum(s.total for s in run.scores)} mutants in {run.seconds:.1f} s")
    return "\n".join(lines)


def write_report(run: MutateRun, out: Path) -> Path:
    import json

    payload = {
        "schema": "mbskills-mutate/1",
        "min_kill": run.min_kill,
        "ok": run.ok,
        "seconds": round(run.seconds, 3),
        "skills": [
            {"skill": s.skill, "total": s.total, "killed": s.killed, "rate": round(s.rate, 4), "contradicted": s.contradicted, "unrecognised": s.unrecognised, "equivalent": s.equivalent, "survived": len(s.survivors)}
            for s in run.scores
        ],
        "stale_allow_entries": run.stale,
        "mutants": [
            {**{k: v for k, v in asdict(o.mutation).items() if k not in ("start", "end")}, "killed": o.killed, "how": o.how, "by": o.by, "message": o.message, "context": o.context}
            for o in run.outcomes
        ],
    }
    path = out / "mutate.json"
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(payload, indent=2) + "\n")
    return path
