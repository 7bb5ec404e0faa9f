"""Hand-labelled answers for calibration, one folder per eval file owner:

    evals/calibration/<owner>/<case id>.md         known-good: every behaviour passes, correct
    evals/calibration/<owner>/<case id>.bad-N.md   known-bad, frontmatter:
        fails: [exact behaviour texts the answer fails]
        correct: false
    evals/heldout/<owner>/<case id>.held-N.md      the held-out set, written without looking
        at the checks; frontmatter `fails` (may be []) and `correct`, and a `style`
    evals/dev/<owner>/<case id>.dev-N.md           a tuning set like it (checks may be mended
        against it)

evals/calibration/ is the training set (the checks were tuned on it, and replay: answers
with its known-good files) and evals/dev/ the tuning set; evals/heldout/ is never used to
tune a check.
"""


from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core import LoadError, UsageError
from .cases import Case
from .parsing import read_text, split_frontmatter

TRAINING, DEV, HELD_OUT = "calibration", "dev", "heldout"  # folders under the bundle's evals/


@dataclass
class Labelled:
    path: Path
    case: Case
    answer: str
    fails: set[str]
    correct: bool
    good: bool

    def label(self, text: str) -> bool:
        return text not in self.fails


def _labels(path: Path, case: Case, text: str, *, good_allowed: bool) -> tuple[set[str], bool, str]:
    """(fails, correct, body) from a labelled answer's frontmatter."""
    document = split_frontmatter(path, text)
    data, body = document.frontmatter.data, document.body.strip()
    raw = data.get("fails")
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise LoadError(path, document.frontmatter.line(("fails",)), "calibration/labels", "a labelled answer needs 'fails': a list of the behaviour texts it fails ([] for none)")
    known = {b.text for b in case.behaviours}
    for n, item in enumerate(raw):
        if item.strip() not in known:
            raise LoadError(path, document.frontmatter.line(("fails", n)), "calibration/labels", f"{case.key} has no behaviour {item!r}")
    fails = {item.strip() for item in raw}
    if not isinstance(data.get("correct"), bool):
        raise LoadError(path, document.frontmatter.line(("correct",)), "calibration/labels", "'correct' must be true or false")
    correct = data["correct"]
    if not good_allowed and not fails and correct:
        raise LoadError(path, document.frontmatter.line(), "calibration/labels", "a bad answer must fail a behaviour or be incorrect (correct: false)")
    return fails, correct, body


def load_labelled(directory: Path, cases: list[Case]) -> list[Labelled]:
    """Every labelled answer in `directory` for these cases:
    <owner>/<id>.md (known-good; frontmatter optional), <id>.bad-N.md (known-bad) and
    <id>.held-N.md and <id>.dev-N.md (either, as their frontmatter says)."""
    out = []
    for case in cases:
        folder = directory / case.owner
        good = folder / f"{case.id}.md"
        bad = sorted(folder.glob(f"{case.id}.bad-*.md"))
        held = sorted(folder.glob(f"{case.id}.held-*.md")) + sorted(folder.glob(f"{case.id}.dev-*.md"))
        for path in ([good] if good.is_file() else []) + bad + held:
            text = read_text(path)
            if path == good:
                fails, correct, body = set(), True, split_frontmatter(path, text).body.strip() if text.startswith("---") else text.strip()
            elif not text.startswith("---"):
                raise LoadError(path, 1, "calibration/labels", "a labelled answer needs frontmatter with 'fails' and 'correct'")
            else:
                fails, correct, body = _labels(path, case, text, good_allowed=path in held)
            out.append(Labelled(path, case, body, fails, correct, not fails and correct))
    return out


def require_labels(directory: Path, cases: list[Case]) -> list[Labelled]:
    if not directory.is_dir():
        raise UsageError(f"{directory}: no calibration answers (expected <owner>/<case id>.md, .bad-N.md or .held-N.md files)")
    try:
        labelled = load_labelled(directory, cases)
    except LoadError as error:
        raise UsageError(error.one_line()) from None
    if not labelled:
        raise UsageError(f"{directory}: no calibration answer matches a case of the bundle")
    return labelled
