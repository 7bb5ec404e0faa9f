"""`mbskills check --gpu-results FILE`: merge what gpu/validate.sh measured into the cards.

Light on purpose: JSON, the schema and round-trip YAML, never torch or megatron, so the
merge runs anywhere the results file is copied to.

A results file is checked whole before anything is written: the schema
(runner/core/schemas/gpu-results.schema.json), then every entry against the bundle (the skill
exists, its card lists the claim, the claim is GPU-tier, no claim twice). Any problem is
one `UsageError` naming the file, the line and the place, and no card changes.

What a result does to its claim in card.yaml:
- passed: status `verified-gpu`, `checked` = {tier: gpu, date, gpu, gpu-count, driver,
  versions, seconds, final-loss}; a stale `gpu_skip` goes.
- failed or error: status `failed-gpu`, the same `checked` record with the reason as `message`.
- skipped: status and `checked` stay as they were; `gpu_skip` = {date, gpu, gpu-count,
  reason} says when, where and why the run could not check it.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import LoadError, UsageError, check_schema
from ..load import CARD_FILE, Bundle, Located, load_json, load_yaml
from .status import ERROR, FAILED, PASSED, SKIPPED, gpu_card_status
VERSION_KEYS = ("megatron-bridge", "megatron-core", "torch", "transformers", "transformer-engine", "python")


@dataclass(frozen=True)
class GpuResult:
    skill: str
    claim: str
    status: str  # passed | failed | skipped | error
    reason: str
    losses: tuple[float | None, ...]
    seconds: float

    @property
    def final_loss(self) -> float | None:
        return self.losses[-1] if self.losses else None

    @property
    def card_status(self) -> str | None:
        """The status this result gives its claim; None: the claim keeps its own (a skip)."""
        return gpu_card_status(self.status)


@dataclass(frozen=True)
class GpuRun:
    path: Path
    date: str
    gpu_model: str
    gpu_count: int
    driver: str
    versions: dict[str, str | None]
    results: tuple[GpuResult, ...]


def _fail(path: Path, located: Located | None, where: tuple, message: str) -> UsageError:
    line = located.line(where) if located is not None else 1
    shown = "$" + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in where)
    return UsageError(f"{path}:{line}: gpu-results: {shown}: {message}")


def load_results(path: Path, bundle: Bundle) -> GpuRun:
    """Read, schema-check and cross-check a results file; UsageError (one line) on any problem."""
    if not path.is_file():
        raise UsageError(f"{path}: no such results file (gpu/validate.sh writes out/gpu/gpu-results.json)")
    try:
        located = load_json(path)
    except LoadError as error:
        raise UsageError(error.one_line()) from None
    for key, line in located.duplicates:
        raise UsageError(f"{path}:{line}: gpu-results: key {key!r} appears twice in one object")
    errors = check_schema("gpu-results", located.data)
    if errors:
        first = errors[0]
        raise _fail(path, located, first.path, first.message)
    data = located.data
    claims_by_skill = _gpu_claims(bundle)
    seen: dict[tuple[str, str], int] = {}
    results = []
    for index, entry in enumerate(data["checks"]):
        skill, claim = entry["skill"], entry["claim"]
        if skill not in claims_by_skill:
            raise _fail(path, located, ("checks", index, "skill"), f"no skill {skill!r} in {bundle.skills_dir}")
        tiers = claims_by_skill[skill]
        if claim not in tiers:
            raise _fail(path, located, ("checks", index, "claim"), f"skills/{skill}/{CARD_FILE} has no claim {claim!r}")
        if tiers[claim] != "gpu":
            raise _fail(path, located, ("checks", index, "claim"), f"claim {claim!r} is a {tiers[claim]}-tier claim; only GPU-tier claims (tier: gpu) take GPU results")
        if (skill, claim) in seen:
            raise _fail(path, located, ("checks", index, "claim"), f"claim {claim!r} appears twice (first at checks[{seen[(skill, claim)]}])")
        seen[(skill, claim)] = index
        if entry["status"] == PASSED and not (entry["losses"] and _finite(entry["losses"][-1])):
            raise _fail(path, located, ("checks", index, "losses"), "a passed check must end with a finite loss")
        results.append(GpuResult(skill, claim, entry["status"], entry["reason"], tuple(entry["losses"]), float(entry["seconds"])))
    host = data["host"]
    used = data.get("nproc", host["gpu_count"])  # the GPUs the checks ran on, which a card records
    return GpuRun(path, data["date"], host["gpu_model"], used, host["driver"], dict(data["versions"]), tuple(results))


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _gpu_claims(bundle: Bundle) -> dict[str, dict[str, str]]:
    """skill -> {claim id -> tier} from every card (a card that cannot be read is unusable input)."""
    out: dict[str, dict[str, str]] = {}
    for root in bundle.skill_dirs():
        path = root / CARD_FILE
        if not path.is_file():
            continue
        try:
            located = load_yaml(path)
        except LoadError as error:
            raise UsageError(error.one_line()) from None
        claims = located.data.get("claims") if isinstance(located.data, dict) else None
        if not isinstance(claims, list):
            raise UsageError(f"{path}:{located.line()}: card/schema: expected a mapping with a 'claims' list (run `mbskills validate`)")
        tiers = {}
        for entry in claims:
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                tiers[entry["id"]] = entry.get("tier", "cpu")
        out[root.name] = tiers
    return out


def select(run: GpuRun, skills: list[str] | None, pattern: str) -> list[GpuResult]:
    return [r for r in run.results if (not skills or r.skill in skills) and fnmatch.fnmatchcase(r.claim, pattern)]


def _record(run: GpuRun, result: GpuResult) -> dict[str, Any]:
    record: dict[str, Any] = {"tier": "gpu", "date": run.date, "gpu": run.gpu_model, "gpu-count": run.gpu_count, "driver": run.driver}
    for key in VERSION_KEYS:
        value = run.versions.get(key)
        record[key] = "absent" if value is None else value
    record["seconds"] = round(result.seconds, 1)
    if _finite(result.final_loss):
        record["final-loss"] = round(float(result.final_loss), 4)
    if result.status != PASSED:
        record["message"] = f"{result.status}: {result.reason}"
    return record


def merge_cards(bundle: Bundle, run: GpuRun, results: list[GpuResult]) -> list[Path]:
    """Write each result into its claim's card; returns the cards written."""
    from .cards import update_claims

    def apply(entry, result: GpuResult) -> None:
        if result.card_status is None:  # skipped: keep the status, say why
            entry["gpu_skip"] = {"date": run.date, "gpu": run.gpu_model, "gpu-count": run.gpu_count, "reason": result.reason}
            return
        entry["status"] = result.card_status
        entry["checked"] = _record(run, result)
        if "gpu_skip" in entry:
            del entry["gpu_skip"]

    return update_claims(bundle.skills_dir, CARD_FILE, ((r.skill, r.claim, r) for r in results), apply)


def format_table(run: GpuRun, results: list[GpuResult]) -> str:
    rows = [("claim", "skill", "result", "card status", "final loss", "seconds")]
    for r in results:
        loss = f"{r.final_loss:.4f}" if _finite(r.final_loss) else "-"
        rows.append((r.claim, r.skill, r.status, r.card_status or "(kept; skip recorded)", loss, f"{r.seconds:.1f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.rjust(widths[i]) if i >= 4 else cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in results:
        if r.status != PASSED:
            lines.append(f"{r.skill}/{r.claim}: {r.status}: {r.reason}")
    count = {s: sum(r.status == s for r in results) for s in (PASSED, FAILED, SKIPPED, ERROR)}
    lines.append(f"GPU run of {run.date} on {run.gpu_count} x {run.gpu_model} (driver {run.driver}): "
                 f"{count[PASSED]} passed, {count[FAILED] + count[ERROR]} failed, {count[SKIPPED]} skipped")
    return "\n".join(lines)


def any_failed(results: list[GpuResult]) -> bool:
    return any(r.status in (FAILED, ERROR) for r in results)
