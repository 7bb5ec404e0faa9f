"""Hand-labelled answers for calibration, one folder per eval file owner:

    evals/calibration/<owner>/<case id>.md         known-good: every behaviour passes, correct
    evals/calibration/<owner>/<case id>.bad-N.md   known-bad, frontmatter:
        fails: [exact behaviour texts the answer fails]
        correct: false
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core import LoadError, UsageError
from .cases import Case
from .parsing import read_text, split_frontmatter


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


def load_labelled(directory: Path, cases: list[Case]) -> list[Labelled]:
    out = []
    for case in cases:
        folder = directory / case.owner
        good = folder / f"{case.id}.md"
        if not good.is_file():
            continue
        for path in [good, *sorted(folder.glob(f"{case.id}.bad-*.md"))]:
            text = read_text(path)
            fails, correct, body = set(), True, text.strip()
            if text.startswith("---"):
                document = split_frontmatter(path, text)
                data, body = document.frontmatter.data, document.body.strip()
                if path != good:
                    raw = data.get("fails")
                    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
                        raise LoadError(path, document.frontmatter.line(("fails",)), "calibration/labels", "a bad answer needs 'fails': a list of the behaviour texts it fails")
                    known = {b.text for b in case.behaviours}
                    for n, item in enumerate(raw):
                        if item.strip() not in known:
                            raise LoadError(path, document.frontmatter.line(("fails", n)), "calibration/labels", f"{case.key} has no behaviour {item!r}")
                    fails = {item.strip() for item in raw}
                    if not isinstance(data.get("correct"), bool):
                        raise LoadError(path, document.frontmatter.line(("correct",)), "calibration/labels", "'correct' must be true or false")
                    correct = data["correct"]
                    if not fails and correct:
                        raise LoadError(path, document.frontmatter.line(), "calibration/labels", "a bad answer must fail a behaviour or be incorrect (correct: false)")
            elif path != good:
                raise LoadError(path, 1, "calibration/labels", "a bad answer needs frontmatter with 'fails' and 'correct'")
            out.append(Labelled(path, case, body, fails, correct, path == good))
    return out


def require_labels(directory: Path, cases: list[Case]) -> list[Labelled]:
    if not directory.is_dir():
        raise UsageError(f"{directory}: no calibration answers (expected <owner>/<case id>.md and .bad-N.md files)")
    try:
        labelled = load_labelled(directory, cases)
    except LoadError as error:
        raise UsageError(error.one_line()) from None
    if not labelled:
        raise UsageError(f"{directory}: no calibration answer matches a case of the bundle")
    return labelled
