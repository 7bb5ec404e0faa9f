"""`mbskills check` as one call each for its two modes: run the claims (CPU tier) or merge
a GPU run's results; both can record the outcome in the cards."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ..core import UsageError, defaults
from ..load import CARD_FILE, Bundle, load_yaml


def cards_writable(bundle: Bundle, skills: list[str] | None) -> None:
    """Before half a minute of claim checks: every card to update must be a mapping with a
    `claims` list of mappings that carry an `id`."""
    for root in bundle.skill_dirs():
        if skills and root.name not in skills:
            continue
        path = root / CARD_FILE
        if not path.is_file():
            raise UsageError(f"{path}: no card to write the results into")
        located = load_yaml(path)  # LoadError: one line with file and line
        for key, line in located.duplicates:
            raise UsageError(f"{path}:{line}: yaml/duplicate-key: key {key!r} appears twice; the rewrite would drop one")
        claims = located.data.get("claims") if isinstance(located.data, dict) else None
        if not isinstance(claims, list):
            raise UsageError(f"{path}:{located.line()}: card/schema: expected a mapping with a 'claims' list (run `mbskills validate`)")
        for index, entry in enumerate(claims):
            if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
                raise UsageError(f"{path}:{located.line(('claims', index))}: card/schema: claims[{index}] needs an 'id' (run `mbskills validate`)")


@dataclass
class ClaimsRun:
    results: list  # of run.ClaimResult
    table: str
    summary: str
    ok: bool  # every result passed or needs a GPU
    cards_written: list[Path] = field(default_factory=list)


def check_claims(bundle: Bundle, *, skills: list[str] | None = None, pattern: str = "*", out: Path = Path(defaults.CLAIMS_OUT), write_cards: bool = False) -> ClaimsRun:
    """Run every matching claim against the installed Megatron-Bridge (imported here, once),
    write claims.json and junit.xml into `out`, and with `write_cards` the cards."""
    bundle.require_skills(skills)
    if write_cards:
        cards_writable(bundle, skills)
    start = time.perf_counter()
    from . import run
    from .environment import versions
    from .status import OK_RESULTS

    results = run.run_checks(bundle, skills=skills, pattern=pattern)
    if not results:
        raise UsageError(f"no claim matches --claim {pattern!r}")
    seconds = time.perf_counter() - start
    found = versions()
    json_path, junit_path = run.write_reports(results, out, found, seconds)
    summary = f"{len(results)} claims in {seconds:.1f} s against megatron-bridge {found['megatron-bridge']}, megatron-core {found['megatron-core']}; wrote {json_path} and {junit_path}"
    written = run.write_cards(bundle, results, found) if write_cards else []
    return ClaimsRun(results, run.format_table(results), summary, all(r.status in OK_RESULTS for r in results), written)


@dataclass
class GpuMerge:
    table: str
    failed: bool  # a check failed or errored on the GPU
    cards_written: list[Path] = field(default_factory=list)


def merge_gpu_results(bundle: Bundle, path: Path, *, skills: list[str] | None = None, pattern: str = "*", write_cards: bool = False) -> GpuMerge:
    """No claim runs and megatron is never imported: the results file is checked whole,
    then tabled, then (with `write_cards`) recorded in the cards."""
    from .gpu_results import any_failed, format_table, load_results, merge_cards, select

    bundle.require_skills(skills)
    if write_cards:
        cards_writable(bundle, skills)
    gpu_run = load_results(path, bundle)
    results = select(gpu_run, skills, pattern)
    if not results:
        raise UsageError(f"{path}: no result matches --skill/--claim")
    written = merge_cards(bundle, gpu_run, results) if write_cards else []
    return GpuMerge(format_table(gpu_run, results), any_failed(results), written)



@dataclass
class MutationRun:
    report: str
    ok: bool  # every skill at or above min_kill and no stale allow-list entry
    json_path: Path
    run: object  # mutate.MutateRun


def mutate_claims(bundle: Bundle, *, skills: list[str] | None = None, pattern: str = "*", out: Path = Path(defaults.MUTATE_OUT), min_kill: float = defaults.MIN_KILL, allow_list: Path | None = None) -> MutationRun:
    """Mutate every claim section, rerun the checks that read it, write mutate.json."""
    from . import mutate

    run = mutate.mutate_bundle(bundle, skills=skills, pattern=pattern, min_kill=min_kill, allow_path=allow_list)
    return MutationRun(mutate.format_report(run), run.ok, mutate.write_report(run, out), run)
