"""Validation of a bundle, a skill or a single evals file.

Every problem is a `Finding` (`path:line: rule-id: message`); malformed input never
raises. Rules are listed in rules.py and documented in docs/validation.md.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

from ..claims import UNCHECKED
from ..core import Finding, LoadError, UsageError, check_schema
from ..load import (
    CARD_FILE,
    EVALS_FILE,
    FLAT,
    DEV,
    HELD_OUT,
    TRAINING,
    SKILL_FILE,
    Bundle,
    EvalsFile,
    Located,
    Skill,
    check_case_file,
    files_root,
    find_bundle,
    is_bundle,
    is_skill,
    load_cases,
    load_labelled,
    load_skill,
    load_yaml,
    read_checks,
    read_evals,
    sidecar_for,
)

SPEC_KEYS = {"name", "description", "license", "compatibility", "allowed-tools", "metadata"}
NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
MAX_NAME, MAX_DESCRIPTION, MAX_COMPATIBILITY, MAX_BODY_LINES = 64, 1024, 500, 500
MAX_BODY_TOKENS = 5000  # the Agent Skills guidance for a SKILL.md body; detail goes to references/
MIN_CASES, MIN_NEGATIVES, MIN_BEHAVIOURS, MAX_BEHAVIOURS = 6, 2, 4, 8
TRIGGER_RE = re.compile(r"\bwhen\b", re.IGNORECASE)
CLAIM_MARKER_RE = re.compile(r"<!--\s*claim:\s*([^\s>]+)\s*-->")
# `config.py:1099`, `#L120`, "line 42": anchors that rot as soon as upstream edits a file.
LINE_ANCHOR_RE = re.compile(r"\b[\w./-]+\.(?:py|md|yaml|yml|sh|json):\d+\b|#L\d+\b|\blines?\s+\d+\b", re.IGNORECASE)
MD_LINK_RE = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_PATH_RE = re.compile(r"`((?:scripts|references|assets)/[\w./-]+)`")


class Report:
    def __init__(self) -> None:
        self.findings: list[Finding] = []

    def add(self, path: Path | str, line: int, rule: str, message: str) -> None:
        self.findings.append(Finding(str(path), max(int(line), 1), rule, message))

    def extend(self, findings: list[Finding]) -> None:
        self.findings.extend(findings)

    def load(self, error: LoadError) -> None:
        self.findings.append(error.finding)


# --- entry point ------------------------------------------------------------------------


def validate_path(path: Path) -> list[Finding]:
    """Validate what `path` is: a bundle, a skill folder, a SKILL.md/card.yaml, or an evals .json."""
    if not path.exists():
        raise UsageError(f"{path}: no such file or directory")
    report = Report()
    if path.is_dir():
        if is_skill(path):
            validate_skill(report, path, find_bundle(path.parent))
        elif is_bundle(path):
            validate_bundle(report, Bundle(path.resolve()))
        else:
            raise UsageError(f"{path}: not a skill (no {SKILL_FILE}) nor a bundle (no skills/ folder)")
    elif path.suffix == ".json":
        bundle = find_bundle(path.parent)
        validate_evals(report, path, bundle, quality=False)
    elif path.name in (SKILL_FILE, CARD_FILE) and is_skill(path.parent):
        validate_skill(report, path.parent, find_bundle(path.parent.parent))
    elif path.name == CARD_FILE and is_bundle(path.parent):
        validate_bundle(report, Bundle(path.parent.resolve()))
    else:
        raise UsageError(f"{path}: cannot validate this file; give a bundle or skill folder, a SKILL.md, a card.yaml or an evals .json file")
    return sorted(set(report.findings), key=lambda f: (f.path, f.line, f.rule, f.message))


# --- bundle -----------------------------------------------------------------------------


def validate_bundle(report: Report, bundle: Bundle) -> None:
    names = bundle.skill_names()
    listed: list[str] = []
    card = _load_yaml_file(report, bundle.card_path, "bundle/card-missing", "bundle has no card.yaml")
    if card is not None:
        if _schema(report, bundle.card_path, card, "bundle-card", "bundle/schema"):
            listed = card.data["skills"]
            for name in sorted(names - set(listed)):
                report.add(bundle.card_path, card.line(("skills",)), "bundle/unlisted-skill", f"skills/{name} is not listed in the bundle card's 'skills'")
            for index, name in enumerate(listed):
                if name not in names:
                    report.add(bundle.card_path, card.line(("skills", index)), "bundle/missing-skill", f"card lists skill {name!r} but skills/{name}/ does not exist")
    if not names:
        report.add(bundle.skills_dir, 1, "bundle/empty", "skills/ holds no skill folders")
    for skill_dir in bundle.skill_dirs():
        validate_skill(report, skill_dir, bundle, names)
    for path in bundle.bundle_eval_files():
        validate_evals(report, path, bundle, quality=False)
    _check_calibration(report, bundle)
    _check_census(report, bundle)


def _check_census(report: Report, bundle: Bundle) -> None:
    """The census of real problems (evals/problems/): schema, the seeded draw, and every
    answered_by naming a skill of the bundle and claims its card lists."""
    from ..load import CENSUS_DIR, load_census

    root = bundle.root / CENSUS_DIR
    if not root.is_dir():
        return
    try:
        census = load_census(root)
    except LoadError as error:
        report.load(error)
        return
    cards: dict[str, set[str]] = {}
    for skill_dir in bundle.skill_dirs():
        try:
            cards[skill_dir.name] = {c.get("id") for c in (load_yaml(skill_dir / CARD_FILE).data or {}).get("claims", []) if isinstance(c, dict)}
        except (LoadError, OSError):
            cards[skill_dir.name] = set()
    for problem_id, problem in sorted(census.problems.items()):
        answered = problem.get("answered_by")
        if not answered:
            continue
        path = root / f"{problem_id}.yaml"
        if answered["skill"] not in cards:
            report.add(path, 1, "census/answered-by", f"answered_by names {answered['skill']!r}, which is not a skill of the bundle")
            continue
        unknown = [c for c in answered["claims"] if c not in cards[answered["skill"]]]
        if unknown:
            report.add(path, 1, "census/answered-by", f"answered_by names claim {unknown[0]!r}, which {answered['skill']}'s card does not list")


def _check_calibration(report: Report, bundle: Bundle) -> None:
    """Labelled answers (evals/calibration/, evals/heldout/) must name behaviours their case has."""
    folders = [bundle.evals_dir / name for name in (TRAINING, DEV, HELD_OUT) if (bundle.evals_dir / name).is_dir()]
    if not folders:
        return
    files = [d / EVALS_FILE for d in bundle.skill_dirs()] + bundle.bundle_eval_files()
    cases = []
    for path in files:
        try:
            cases.extend(load_cases(path))
        except LoadError:
            return  # already reported for the evals file itself
    for folder in folders:
        try:
            load_labelled(folder, cases)
        except LoadError as error:
            report.load(error)


# --- skill ------------------------------------------------------------------------------


def validate_skill(report: Report, root: Path, bundle: Bundle | None, names: set[str] | None = None) -> None:
    """`names`: the bundle's skill names when the caller has listed them already."""
    skill: Skill | None = None
    try:
        skill = load_skill(root)
    except LoadError as error:
        report.load(error)
    marker_ids: dict[str, tuple[Path, int]] | None = None  # None: SKILL.md unreadable, skip the cross-check
    if skill is not None:
        before = len(report.findings)
        _check_frontmatter(report, skill)
        if len(report.findings) == before:
            # Our rules are stricter than the spec's; the reference validator is the
            # second opinion for anything they might miss (strictyaml quirks, new rules).
            _check_with_reference_validator(report, skill)
        _check_body(report, skill)
        marker_ids = _claim_markers(report, skill)
        _check_unclaimed_facts(report, skill)
        _check_framing(report, skill)
    _check_scripts(report, root)
    _check_card(report, root, marker_ids)
    evals_path = root / EVALS_FILE
    if not evals_path.is_file():
        report.add(evals_path, 1, "evals/missing", "skill has no evals/evals.json")
    else:
        if names is None:
            names = {root.name} | (bundle.skill_names() if bundle else set())
        validate_evals(report, evals_path, bundle, quality=True, owner=root.name, names=names)


def _check_frontmatter(report: Report, skill: Skill) -> None:
    fm: Located = skill.document.frontmatter
    data, path = fm.data, skill.skill_md
    for key, line in fm.duplicates:
        report.add(path, line, "yaml/duplicate-key", f"frontmatter key {key!r} appears twice")
    for key in data:
        if key not in SPEC_KEYS:
            report.add(path, fm.line((key,)), "skill/extra-key", f"top-level key {key!r} is not in the Agent Skills spec; move it under 'metadata'")

    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        report.add(path, fm.line(("name",)), "skill/name", "frontmatter needs 'name', a non-empty string")
    else:
        if not NAME_RE.match(name) or len(name) > MAX_NAME:
            report.add(path, fm.line(("name",)), "skill/name", f"name {name!r} must be ASCII kebab-case (a-z, 0-9, single hyphens), at most {MAX_NAME} characters")
        if name != skill.root.name:
            report.add(path, fm.line(("name",)), "skill/name-dir", f"name {name!r} differs from its folder {skill.root.name!r}")

    description = data.get("description")
    if not isinstance(description, str) or not description.strip():
        report.add(path, fm.line(("description",)), "skill/description", "frontmatter needs 'description', a non-empty string")
    else:
        if len(description) > MAX_DESCRIPTION:
            report.add(path, fm.line(("description",)), "skill/description", f"description has {len(description)} characters; the limit is {MAX_DESCRIPTION}")
        if not TRIGGER_RE.search(description):
            report.add(path, fm.line(("description",)), "skill/description-trigger", "description must say when to use the skill (e.g. 'Use when ...'), with the words that should trigger it")

    license_ = data.get("license")
    if not isinstance(license_, str) or not license_.strip():
        report.add(path, fm.line(("license",)), "skill/license", "frontmatter needs 'license' (e.g. Apache-2.0)")

    if "compatibility" in data:
        value = data["compatibility"]
        if not isinstance(value, str) or len(value) > MAX_COMPATIBILITY:
            report.add(path, fm.line(("compatibility",)), "skill/compatibility", f"'compatibility' must be a string of at most {MAX_COMPATIBILITY} characters")
    if "allowed-tools" in data and not isinstance(data["allowed-tools"], str):
        report.add(path, fm.line(("allowed-tools",)), "skill/allowed-tools", "'allowed-tools' must be a space-separated string")
    if "metadata" in data:
        meta = data["metadata"]
        if not isinstance(meta, dict):
            report.add(path, fm.line(("metadata",)), "skill/metadata", "'metadata' must be a mapping of string keys to string values")
        else:
            for key, value in meta.items():
                if not isinstance(key, str) or not isinstance(value, str):
                    report.add(path, fm.line(("metadata", key)), "skill/metadata", f"metadata.{key} must map a string to a string (quote numbers and dates)")


def _check_with_reference_validator(report: Report, skill: Skill) -> None:
    try:
        from skills_ref.validator import validate as reference_validate
    except ImportError:  # pragma: no cover - the pinned install always has it
        report.add(skill.skill_md, 1, "skill/spec", "the Agent Skills reference validator (skills-ref) is not installed")
        return
    for message in reference_validate(skill.root):
        report.add(skill.skill_md, 1, "skill/spec", f"skills-ref: {message}")


def _in_fence_map(lines: list[str]) -> list[bool]:
    inside, fenced = False, []
    for line in lines:
        if line.lstrip().startswith(("```", "~~~")):
            inside = not inside
            fenced.append(True)
        else:
            fenced.append(inside)
    return fenced


def _check_body(report: Report, skill: Skill) -> None:
    path, first = skill.skill_md, skill.document.body_start_line
    lines = skill.body.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    if len(lines) >= MAX_BODY_LINES:
        report.add(path, first + MAX_BODY_LINES, "skill/body-length", f"body has {len(lines)} lines; keep it under {MAX_BODY_LINES} and move detail to references/")
    if not any(line.strip() for line in lines):
        report.add(path, first, "skill/body-empty", "SKILL.md has frontmatter but no instructions")
    tokens = estimated_tokens("\n".join(lines))
    if tokens > MAX_BODY_TOKENS:
        report.add(path, first, "skill/body-size", f"body is about {tokens} tokens (characters / 4); keep it under {MAX_BODY_TOKENS} and move detail to references/ files linked where it is needed")
    fenced = _in_fence_map(lines)
    for offset, line in enumerate(lines):
        number = first + offset
        for match in LINE_ANCHOR_RE.finditer(line):
            report.add(path, number, "skill/line-anchor", f"{match.group(0)!r} anchors code by line number; name the module and symbol instead")
        targets = [m.group(1) for m in MD_LINK_RE.finditer(line)]
        if not fenced[offset]:
            targets += [m.group(1) for m in CODE_PATH_RE.finditer(line)]
        for target in targets:
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # URLs and in-page anchors
            relative = target.split("#", 1)[0]
            resolved = (skill.root / relative).resolve()
            if not resolved.is_relative_to(skill.root.resolve()):
                report.add(path, number, "skill/reference-outside", f"{target!r} points outside the skill folder; installed skills cannot reach it")
            elif not resolved.exists():
                report.add(path, number, "skill/missing-file", f"{target!r} is referenced but does not exist in the skill")


def _documents(skill: Skill) -> list[tuple[Path, str]]:
    """SKILL.md and references/*.md with their text: what the claim and framing rules read."""
    documents = [(skill.skill_md, skill.skill_md.read_text("utf-8"))]
    references = skill.root / "references"
    if references.is_dir():
        documents += [(path, path.read_text("utf-8", errors="replace")) for path in sorted(references.rglob("*.md"))]
    return documents


def _check_unclaimed_facts(report: Report, skill: Skill) -> None:
    """Every fact a skill states sits in a claim section, where its check reads it; outside
    them only advice and framing, so no token that carries a value."""
    from ..claims import body_lines, fact_tokens

    documents = _documents(skill)
    for path, text in documents:
        for line in body_lines(text):
            if line.claim_id is not None or CLAIM_MARKER_RE.search(line.text):
                continue
            tokens = [t.text for t in fact_tokens(line.text)]
            if tokens:
                report.add(path, line.number, "skill/unclaimed-fact", f"{', '.join(repr(t) for t in tokens[:3])} stated outside any claim section; put it under a <!-- claim: ID --> marker whose check reads it, or drop it")


def estimated_tokens(text: str) -> int:
    """About four characters per token for English prose and code; no tokenizer needed."""
    return len(text) // 4


def _check_framing(report: Report, skill: Skill) -> None:
    """Outside claim sections, every sentence (headings and list items included) is one of
    the skill's reviewed framing sentences (checks/framing.yaml), so no statement about the
    library can be added or changed there without a check or a review. Applies to skills
    whose card lists claims."""
    from ..claims import framing_sentences, load_framing

    card = skill.root / CARD_FILE
    try:
        claims = (load_yaml(card).data or {}).get("claims") if card.is_file() else None
    except LoadError:
        return  # the card's own rules report it
    if not claims:
        return
    try:
        reviewed = load_framing(skill.root)
    except LoadError as error:
        report.load(error)
        return
    seen: set[str] = set()
    documents = _documents(skill)
    for path, text in documents:
        for number, sentence in framing_sentences(text):
            seen.add(sentence)
            if sentence not in reviewed.sentences:
                report.add(path, number, "skill/unreviewed-sentence", f"{sentence[:70]!r} is outside any claim section and not in {reviewed.path.name}; put it in a claim section whose check reads it, or have it reviewed as framing")
    for sentence, number in reviewed.sentences.items():
        if sentence not in seen:
            report.add(reviewed.path, number, "skill/stale-framing", f"{sentence[:70]!r} no longer occurs outside a claim section; remove it from the list")


def _claim_markers(report: Report, skill: Skill) -> dict[str, tuple[Path, int]]:
    """Claim id -> (file, line) for the markers of SKILL.md and references/*.md."""
    markers: dict[str, tuple[Path, int]] = {}
    documents = [(skill.skill_md, skill.body.split("\n"), skill.document.body_start_line)]
    references = skill.root / "references"
    if references.is_dir():
        documents += [(path, path.read_text("utf-8", errors="replace").split("\n"), 1) for path in sorted(references.rglob("*.md"))]
    from ..claims import description_lines

    described = description_lines(skill.skill_md.read_text("utf-8"))
    if described is not None:
        markers[described[0]] = (skill.skill_md, described[1] + 1)
    for path, lines, first in documents:
        for offset, line in enumerate(lines):
            for match in CLAIM_MARKER_RE.finditer(line):
                claim_id, number = match.group(1), first + offset
                if claim_id in markers:
                    where, at = markers[claim_id]
                    report.add(path, number, "skill/duplicate-claim", f"claim marker {claim_id!r} already stands at {where.name}:{at}")
                elif not NAME_RE.match(claim_id):
                    report.add(path, number, "skill/claim-id", f"claim id {claim_id!r} must be kebab-case")
                else:
                    markers[claim_id] = (path, number)
    return markers


def _check_scripts(report: Report, root: Path) -> None:
    scripts = root / "scripts"
    if not scripts.is_dir():
        return
    for script in sorted(p for p in scripts.rglob("*") if p.is_file()):
        if script.suffix == ".py":
            try:
                ast.parse(script.read_bytes(), filename=str(script))
            except SyntaxError as error:
                report.add(script, error.lineno or 1, "skill/script-syntax", f"Python does not parse: {error.msg}")
            except ValueError as error:  # NUL bytes and the like
                report.add(script, 1, "skill/script-syntax", f"Python does not parse: {error}")
        elif script.suffix == ".sh":
            result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
            if result.returncode != 0:
                match = re.search(r"line (\d+): (.*)", result.stderr)
                line, message = (int(match.group(1)), match.group(2)) if match else (1, result.stderr.strip())
                report.add(script, line, "skill/script-syntax", f"bash does not parse: {message}")


def _check_card(report: Report, root: Path, marker_ids: dict[str, tuple[Path, int]] | None) -> None:
    card_path = root / CARD_FILE
    card = _load_yaml_file(report, card_path, "card/missing", "skill has no card.yaml")
    if card is None or not _schema(report, card_path, card, "skill-card", "card/schema"):
        return
    data = card.data
    if data["name"] != root.name:
        report.add(card_path, card.line(("name",)), "card/name", f"card name {data['name']!r} differs from the skill folder {root.name!r}")
    seen: set[str] = set()
    for index, claim in enumerate(data["claims"]):
        line = card.line(("claims", index, "id"))
        if claim["id"] in seen:
            report.add(card_path, line, "card/duplicate-claim", f"claim id {claim['id']!r} is listed twice")
        seen.add(claim["id"])
        if marker_ids is not None and claim["id"] not in marker_ids:
            report.add(card_path, line, "card/claim-unanchored", f"claim {claim['id']!r} has no <!-- claim: {claim['id']} --> marker in SKILL.md or references/")
        if claim["status"] != UNCHECKED and "checked" not in claim:
            report.add(card_path, card.line(("claims", index, "status")), "card/claim-status", f"status {claim['status']!r} needs the 'checked' record that `mbskills check --write-cards` writes")
    for claim_id, (path, line) in sorted((marker_ids or {}).items(), key=lambda item: (str(item[1][0]), item[1][1])):
        if claim_id not in seen:
            report.add(path, line, "skill/claim-unknown", f"claim marker {claim_id!r} has no entry in card.yaml")


# --- evals ------------------------------------------------------------------------------


def validate_evals(
    report: Report,
    path: Path,
    bundle: Bundle | None,
    *,
    quality: bool,
    owner: str | None = None,
    names: set[str] | None = None,
) -> None:
    try:
        evals = read_evals(path)
    except LoadError as error:
        report.load(error)
        return
    report.extend(evals.findings)
    if evals.findings:
        return
    if names is None and bundle is not None:
        names = bundle.skill_names()
    skills_root = bundle.skills_dir if bundle is not None else (path.resolve().parents[2] if owner else None)

    first_seen: dict[str, int] = {}
    for case in evals.cases:
        line = evals.case_line(case.index, "id")
        if str(case.id) in first_seen:
            report.add(path, line, "evals/duplicate-id", f"case id {case.id!r} repeats the id of the case at line {first_seen[str(case.id)]}")
        else:
            first_seen[str(case.id)] = line
    if evals.format != FLAT and owner is not None and evals.located.data["skill_name"] != owner:
        report.add(path, evals.located.line(("skill_name",)), "evals/skill-name", f"skill_name {evals.located.data['skill_name']!r} differs from the skill folder {owner!r}")
    elif evals.format != FLAT and owner is None and names is not None and evals.located.data["skill_name"] not in names:
        # a bundle-level file: its cases expect this skill, which must exist
        report.add(path, evals.located.line(("skill_name",)), "evals/unknown-skill", f"skill_name {evals.located.data['skill_name']!r} is not a skill of this bundle ({', '.join(sorted(names)) or 'none'})")

    for case in evals.cases:
        _check_case_targets(report, evals, case, names, skills_root, owner)
    if quality and owner is not None:
        _check_coverage(report, evals, owner)
    _check_sidecar(report, evals)


def _check_sidecar(report: Report, evals: EvalsFile) -> None:
    """The deterministic-checks sidecar beside an evals file, when there is one."""
    sidecar = sidecar_for(evals.path)
    if sidecar.is_file():
        report.extend(read_checks(sidecar, evals.cases)[1])


def _check_case_targets(report: Report, evals: EvalsFile, case, names, skills_root, owner) -> None:
    path = evals.path
    if evals.format == FLAT and case.expected_skill is not None and names is not None and case.expected_skill not in names:
        report.add(path, evals.case_line(case.index, "expected_skill"), "evals/unknown-skill", f"case {case.id!r}: expected_skill {case.expected_skill!r} is not a skill of this bundle ({', '.join(sorted(names)) or 'none'})")
    if case.expected_script:
        line = evals.case_line(case.index, "expected_script")
        if case.expected_skill is None:
            report.add(path, line, "evals/script-without-skill", f"case {case.id!r}: expected_script is set but expected_skill is null")
        elif skills_root is not None and (skills_root / case.expected_skill).is_dir():
            target = (skills_root / case.expected_skill / case.expected_script).resolve()
            if not target.is_file():
                report.add(path, line, "evals/missing-script", f"case {case.id!r}: expected_script {case.expected_script!r} does not exist in skills/{case.expected_skill}/")
    for offset, name in enumerate(case.files):
        problem = check_case_file(files_root(path), name)
        if problem:
            report.add(path, evals.case_line(case.index, "files", offset), "evals/missing-file", f"case {case.id!r}: {problem}")


def _check_coverage(report: Report, evals: EvalsFile, owner: str) -> None:
    path, cases = evals.path, evals.cases
    if len(cases) < MIN_CASES:
        report.add(path, 1, "evals/too-few-cases", f"{len(cases)} cases; a bundle skill needs at least {MIN_CASES}")
    negatives = [c for c in cases if c.expected_skill != owner]
    if len(negatives) < MIN_NEGATIVES:
        report.add(path, 1, "evals/too-few-negatives", f"{len(negatives)} negative cases (expected_skill null or another skill); at least {MIN_NEGATIVES} are needed")
    for case in cases:
        if not MIN_BEHAVIOURS <= len(case.behaviours) <= MAX_BEHAVIOURS:
            key = "expected_behavior" if evals.format == FLAT else "assertions"
            report.add(path, evals.case_line(case.index, key), "evals/behaviour-count", f"case {case.id!r} has {len(case.behaviours)} expected behaviours; give {MIN_BEHAVIOURS}-{MAX_BEHAVIOURS} specific, checkable ones")


# --- helpers ----------------------------------------------------------------------------


def _load_yaml_file(report: Report, path: Path, missing_rule: str, missing_message: str) -> Located | None:
    if not path.is_file():
        report.add(path, 1, missing_rule, missing_message)
        return None
    try:
        located = load_yaml(path)
    except LoadError as error:
        report.load(error)
        return None
    for key, line in located.duplicates:
        report.add(path, line, "yaml/duplicate-key", f"key {key!r} appears twice in one mapping; the last one silently wins")
    return located


def _schema(report: Report, path: Path, located: Located, schema_name: str, rule: str) -> bool:
    errors = check_schema(schema_name, located.data)
    for error in errors:
        report.add(path, located.line(error.path), rule, f"{error.where}: {error.message}")
    return not errors
