"""`mbskills check`: run every claim of every skill in one process, report, update cards.

Imports megatron (through the check modules) once, at `load_checks()`.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import json
import time
import traceback
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core import UsageError
from ..load import CARD_FILE, Bundle, load_yaml
from .plugins import load_checks_of
from .registry import CHECKS, Context
from .sections import DuplicateClaim, read_skill_sections
from .status import ERROR, FAILED, MISSING, NEEDS_GPU, PASSED, cpu_card_status


@dataclass
class ClaimResult:
    skill: str
    claim: str
    statement: str
    status: str  # passed | failed | error | no-check | needs-gpu
    seconds: float
    message: str = ""
    tier: str = "cpu"


def load_checks(skill_roots: list[Path] = ()) -> dict:
    """Import the heavy side once: TE placeholders first, then Bridge's config layer; then
    the checks each skill in `skill_roots` carries in its checks/ folder (plugins.py)."""
    import os

    from .environment import install_te_placeholders, quiet

    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # torch's C++ start-up notes
    install_te_placeholders()
    try:
        with quiet(stderr=True):
            import megatron.bridge.training.config  # noqa: F401 - the one slow import, timed apart from the checks
    except ImportError as error:
        raise UsageError(f"cannot import the pinned Megatron-Bridge ({error}); set up the environment with `bash run.sh`") from None
    with quiet(stderr=True):
        load_checks_of(list(skill_roots))
    return CHECKS


def run_checks(bundle: Bundle, *, skills: list[str] | None = None, pattern: str = "*") -> list[ClaimResult]:
    from .environment import quiet

    load_checks([root for root in bundle.skill_dirs() if not skills or root.name in skills])
    with quiet():
        return _run_all(bundle, skills, pattern)


def _run_all(bundle: Bundle, skills: list[str] | None, pattern: str) -> list[ClaimResult]:
    results: list[ClaimResult] = []
    for root in bundle.skill_dirs():
        if skills and root.name not in skills:
            continue
        card = load_yaml(root / CARD_FILE).data
        try:
            sections = read_skill_sections(root)
        except DuplicateClaim as error:
            raise UsageError(str(error)) from None
        results.extend(run_skill(root, card.get("claims", []), sections, pattern))
    return results


def run_skill(root: Path, claims: list[dict], sections: dict, pattern: str = "*", only: set[str] | None = None, traces: dict | None = None) -> list[ClaimResult]:
    """One skill's claims: every card entry with its check, and a failure for each check or
    SKILL.md marker that the card does not list (a deleted entry must not skip its check)."""
    results = []
    listed = set()
    for entry in claims:
        claim_id = entry["id"]
        listed.add(claim_id)
        if not fnmatch.fnmatchcase(claim_id, pattern) or (only is not None and claim_id not in only):
            continue
        results.append(_run_one(root, claim_id, entry.get("statement", ""), sections, entry.get("tier", "cpu"), traces))
    orphans = {key[1]: "a check is registered" for key in CHECKS if key[0] == root.name}
    orphans.update({claim_id: "SKILL.md has a marker" for claim_id in sections})
    for claim_id, why in sorted(orphans.items()):
        if claim_id not in listed and fnmatch.fnmatchcase(claim_id, pattern) and (only is None or claim_id in only):
            results.append(ClaimResult(root.name, claim_id, "", FAILED, 0.0, f"{why} for this claim, but card.yaml does not list it"))
    return results


def _run_one(root: Path, claim_id: str, statement: str, sections: dict, tier: str = "cpu", traces: dict | None = None) -> ClaimResult:
    def result(status: str, seconds: float, message: str = "") -> ClaimResult:
        return ClaimResult(root.name, claim_id, statement, status, seconds, message, tier)

    check = CHECKS.get((root.name, claim_id))
    if check is None:
        return result(MISSING, 0.0, "no check is registered for this claim")
    if check.tier != tier:
        return result(ERROR, 0.0, f"card.yaml gives this claim tier {tier!r}; its check is registered as tier {check.tier!r}")
    if claim_id not in sections:
        return result(FAILED, 0.0, "SKILL.md has no marker for this claim")
    start = time.perf_counter()
    ctx = Context(root.name, root, sections[claim_id], sections)
    if traces is not None:
        traces[claim_id] = ctx.trace
    try:
        check.func(ctx)
    except AssertionError as failure:
        return result(FAILED, time.perf_counter() - start, str(failure) or "assertion failed")
    except (Exception, SystemExit) as error:  # a check that crashes (or a script that exits) says so, with where
        where = traceback.extract_tb(error.__traceback__)[-1]
        return result(ERROR, time.perf_counter() - start, f"{type(error).__name__}: {error} ({Path(where.filename).name}:{where.lineno})")
    unread = ctx.unread()
    if unread:
        return result(FAILED, time.perf_counter() - start, f"SKILL.md states what its check does not hold: {unread[0]}" + (f" (and {len(unread) - 1} more)" if len(unread) > 1 else ""))
    if tier == "gpu":
        return result(NEEDS_GPU, time.perf_counter() - start, "what the GPU run trains builds and validates from SKILL.md; the training itself needs a GPU (gpu/validate.sh, then --gpu-results)")
    return result(PASSED, time.perf_counter() - start)


def format_table(results: list[ClaimResult]) -> str:
    rows = [("claim", "skill", "status", "seconds")] + [(r.claim, r.skill, r.status, f"{r.seconds:.2f}") for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(widths[i]) if i < 3 else cell.rjust(widths[i]) for i, cell in enumerate(row)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in results:
        if r.status != PASSED:
            lines.append(f"{r.skill}/{r.claim}: {r.status}: {r.message}")
    passed = sum(r.status == PASSED for r in results)
    needs_gpu = sum(r.status == NEEDS_GPU for r in results)
    summary = f"{passed} passed, {len(results) - passed - needs_gpu} failed"
    if needs_gpu:
        summary += f", {needs_gpu} need a GPU (not run here)"
    lines.append(summary)
    return "\n".join(lines)


def write_reports(results: list[ClaimResult], out: Path, versions: dict[str, str], seconds: float) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    json_path, junit_path = out / "claims.json", out / "junit.xml"
    payload = {"schema": "mbskills-claims/1", "tier": "cpu", "versions": versions, "seconds": round(seconds, 3), "results": [asdict(r) for r in results]}
    json_path.write_text(json.dumps(payload, indent=2) + "\n", "utf-8")
    suite = ET.Element("testsuite", name="mbskills-claims", tests=str(len(results)), failures=str(sum(r.status == FAILED for r in results)), errors=str(sum(r.status in (ERROR, MISSING) for r in results)), time=f"{seconds:.3f}")
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=r.skill, name=r.claim, time=f"{r.seconds:.3f}")
        if r.status == FAILED:
            ET.SubElement(case, "failure", message=r.message).text = r.statement
        elif r.status in (ERROR, MISSING):
            ET.SubElement(case, "error", message=r.message).text = r.statement
        elif r.status == NEEDS_GPU:
            ET.SubElement(case, "skipped", message=r.message).text = r.statement
    ET.ElementTree(suite).write(junit_path, encoding="utf-8", xml_declaration=True)
    return json_path, junit_path


def write_cards(bundle: Bundle, results: list[ClaimResult], versions: dict[str, str], today: dt.date | None = None) -> list[Path]:
    """Record each CPU-tier result in its card (round-trip YAML keeps comments and layout).

    GPU-tier claims are left as they are: only `--gpu-results` records those."""
    from .cards import update_claims

    date = (today or dt.date.today()).isoformat()

    def apply(entry, result: ClaimResult) -> None:
        entry["status"] = cpu_card_status(result.status)
        record = {"tier": "cpu", "date": date, **versions}
        if result.status != PASSED:
            record["message"] = result.message
        entry["checked"] = record

    cpu = ((r.skill, r.claim, r) for r in results if r.tier != "gpu" and r.status != NEEDS_GPU)
    return update_claims(bundle.skills_dir, CARD_FILE, cpu, apply)
