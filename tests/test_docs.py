"""The README stays a user's document and the docs keep pointing at files that exist."""

from __future__ import annotations

import re

from conftest import REPO

DOCS = sorted((REPO / "docs").glob("*.md"))


def test_readme_is_short_and_links_to_the_docs():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    linked = set(re.findall(r"\]\((docs/[\w.-]+\.md)\)", readme))
    assert linked == {f"docs/{p.name}" for p in DOCS}


def test_every_repository_path_named_in_the_docs_exists():
    missing = []
    for path in [REPO / "README.md", *DOCS]:
        for name in re.findall(r"`((?:runner|tests|gpu|bench|requirements|docs|skills)/[\w./-]*[\w/])`", path.read_text()):
            if "<" in name or "*" in name:
                continue
            if not (REPO / name).exists():
                missing.append(f"{path.relative_to(REPO)}: {name}")
    assert missing == []
