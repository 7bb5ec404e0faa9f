"""`mbskills grade` and `mbskills calibrate` as one call each: load what they need, open
the judge (when asked for), grade, and close the judge's client and cache again."""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

from ..core import HarnessError, LoadError, UsageError, defaults, write_atomic
from ..execute import ExecutePool
from ..load import DEV, HELD_OUT, ROUNDS, TRAINING, Bundle, Case, Check, bundle_cases, bundle_files, changed_files, fingerprint, load_admissions, load_checks, load_skill, require_labels, resolve_bundle
from ..providers import NoCache, ProviderError, Settings, Transport, open_cache, open_provider
from ..run import RunStatus, load_run, run_status
from .calibrate import calibrate
from .judge import Judge
from .records import grade_records
from .transcript import process_behaviour
from .types import RecordGrade

@dataclass(frozen=True)
class JudgeOptions:
    """--judge and its options; `model` None means no judge (transcript and checks only)."""

    model: str | None = None
    api: str | None = None
    base_url: str | None = None
    temperature: str = defaults.JUDGE_TEMPERATURE  # a number, or "omit" for models that refuse one
    max_tokens: int = defaults.JUDGE_MAX_TOKENS
    timeout_s: float = defaults.TIMEOUT_S
    max_retries: int = defaults.MAX_RETRIES
    cache: str | None = None
    no_cache: bool = False
    jobs: int = defaults.JOBS
    calibration: str | None = None  # --calibration FILE; else the cache calibrate writes
    min_kappa: float = defaults.MIN_KAPPA


def _temperature(text: str) -> float | None:
    if text == "omit":
        return None
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"--judge-temperature: expected a number or 'omit', got {text!r}") from None


def _open_judge(options: JudgeOptions) -> tuple[Judge | None, Any]:
    if not options.model:
        return None, NoCache()
    settings = Settings(_temperature(options.temperature), options.max_tokens)
    provider = open_provider(options.model, settings, Transport(options.timeout_s, options.max_retries), api=options.api, base_url=options.base_url, flag="--judge")
    cache = open_cache(options.cache, options.no_cache, provider)
    return Judge(provider, cache), cache


def _with_judge(options: JudgeOptions, work: Callable[[Judge | None], Awaitable[Any]], opened: tuple[Judge | None, Any] | None = None) -> tuple[Judge | None, Any]:
    """Run `work(judge)`, then close the judge's client and the cache; a fatal judge error
    (bad key, unknown model) is unusable input."""
    judge, cache = opened or _open_judge(options)

    async def go() -> Any:
        try:
            return await work(judge)
        finally:
            if judge:
                await judge.provider.aclose()

    try:
        return judge, asyncio.run(go())
    except ProviderError as fatal:
        raise UsageError(f"judge {options.model}: {fatal}") from None
    finally:
        cache.close()


class _Executor:
    """The execute grader's worker pool for one grading run, started only when some check
    executes and some answer reaches it; `observe` is None when no check executes."""

    def __init__(self, checks: dict[str, list[Check]]) -> None:
        self.pool = ExecutePool() if any(c.grader == "execute" for found in checks.values() for c in found) else None

    async def _observe(self, request: dict) -> dict:
        assert self.pool is not None
        return await asyncio.to_thread(self.pool.observe, request)

    @property
    def observe(self):
        return self._observe if self.pool is not None else None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


def _cases_and_checks(bundle: Bundle, *, all_graders: bool = False) -> tuple[list[Case], dict[str, list[Check]]]:
    """The cases and the graders that decide: pattern checks, field and execute graders
    alike, only where a fresh held-out round admitted them (all of them with `all_graders`,
    to measure them)."""
    cases = bundle_cases(bundle)
    checks = load_checks(cases)  # a bad sidecar: LoadError, one line with file and line
    if all_graders:
        return cases, checks
    try:
        admitted = load_admissions(bundle.evals_dir).admitted
    except LoadError as error:
        raise UsageError(error.one_line()) from None
    return cases, {key: [c for c in found if c.fingerprint(key) in admitted] for key, found in checks.items()}


@dataclass
class GradedRun:
    """A run directory's records, graded; what the report stage needs to build its files."""

    path: Path
    info: dict[str, Any]
    grades: list[RecordGrade]
    skill_names: list[str]
    judge: dict[str, Any] | None  # the judge's identity
    fingerprint_now: str  # of the bundle as it is now, over the cases the run holds
    checks_cases: int
    status: RunStatus  # how complete the run is
    content_cases: list[str] = field(default_factory=list)  # cases with a content behaviour: the ones a pass rate counts
    bundle_changes: list[str] = field(default_factory=list)  # files changed since the run (graded anyway with --allow-changed-bundle)
    needs_judge: list[dict] = field(default_factory=list)  # behaviours no check can settle
    warnings: list[str] = field(default_factory=list)
    judge_trust: "JudgeTrust | None" = None  # whether the judge's verdicts may decide a gate


def _bundle_changes(info: dict, now: dict[str, str]) -> list[str]:
    if isinstance(info.get("bundle_files"), dict):
        return changed_files(info["bundle_files"], now)
    # runs written before run.json listed the files: only the whole can be compared
    return [] if info.get("bundle_fingerprint") == fingerprint(now) else ["the bundle (this run lists no files to name)"]


def grade_run(run: Path, options: JudgeOptions, *, bundle: str | Path | None = None, allow_incomplete: bool = False, allow_changed_bundle: bool = False) -> GradedRun:
    """Grade every record of the run directory `run` against the bundle (--bundle, else the
    one its run.json names). A bundle whose files changed since the run is unusable input
    (the grades would not be the run's), unless `allow_changed_bundle`. A run with records
    missing, failed or still being written is a HarnessError (exit 3) before anything is
    graded, unless `allow_incomplete`."""
    info, records = load_run(run)
    found = resolve_bundle(bundle, recorded=info.get("bundle"))
    cases, checks = _cases_and_checks(found)
    by_key = {c.key: c for c in cases}
    missing = [k for k in info["cases"] if k not in by_key]
    if missing:
        raise UsageError(f"{run}: records for cases the bundle no longer has: {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
    if not records:
        raise UsageError(f"{run}: no records to grade")
    skills = [load_skill(d) for d in found.skill_dirs()]
    names = [s.name for s in skills]
    planned = [by_key[k] for k in info["cases"]]
    files_now = bundle_files(found.root, skills, planned)
    changes = _bundle_changes(info, files_now)
    if changes and not allow_changed_bundle:
        more = f" and {len(changes) - 3} more" if len(changes) > 3 else ""
        raise UsageError(f"{run}: the bundle changed since this run ({'; '.join(changes[:3])}{more}), so its grades would not be this run's; grade with the bundle it ran on, or pass --allow-changed-bundle")
    opened = _open_judge(options)  # unusable judge options (exit 2) come before an incomplete run (exit 3)
    status = run_status(run, info, records)
    if not status.complete and not allow_incomplete:
        opened[1].close()
        raise HarnessError(status.line(run))

    executor = _Executor(checks)
    try:
        judge, grades = _with_judge(options, lambda judge: grade_records(records, by_key, names, checks, judge, jobs=options.jobs, observe=executor.observe), opened)
    finally:
        executor.close()
    warnings = []
    model = info["model"]
    if judge and judge.identity["provider"] == model["provider"] and judge.identity["model"] == model["model"]:
        warnings.append(f"the judge {options.model} is the model under test; its verdicts may favour its own answers")
    content = [c.key for c in planned if any(not process_behaviour(b.text, names) for b in c.behaviours)]
    needs = [] if judge else _needs_judge(planned, names, checks)
    trust = judge_trust(judge.describe(), bundle_fingerprint(found, skills, cases), options.model, explicit=Path(options.calibration) if options.calibration else None, min_kappa=options.min_kappa) if judge else None
    return GradedRun(run, info, grades, names, judge.describe() if judge else None, fingerprint(files_now), len(checks), status, content, changes, needs, warnings, trust)


def _needs_judge(cases: list[Case], skill_names: list[str], checks: dict[str, list[Check]]) -> list[dict]:
    """Content behaviours with no check: without a judge they stay ungraded."""
    out = []
    for case in cases:
        checked = {c.behaviour for c in checks.get(case.key, [])}
        for index, behaviour in enumerate(case.behaviours):
            if behaviour.text not in checked and not process_behaviour(behaviour.text, skill_names):
                out.append({"case": case.key, "index": index, "text": behaviour.text})
    return out


def calibrate_bundle(bundle: Bundle, options: JudgeOptions, *, answers: Path | None = None, admit: str | None = None, all_graders: bool = False) -> dict[str, Any]:
    """Grade labelled answers with the graders that decide (every written one with
    `all_graders`) and the judge, and score them against the labels: `answers` alone, else
    the held-out set (BUNDLE/evals/heldout) and the fresh rounds (BUNDLE/evals/rounds/*)
    first, then the tuning sets (BUNDLE/evals/dev, BUNDLE/evals/calibration). With `admit`,
    the one round BUNDLE/evals/rounds/ADMIT measures every written grader once and admits
    those of each kind that met the bar there (runner/load/admissions.py)."""
    admissions = None
    if admit is not None:
        try:
            admissions = load_admissions(bundle.evals_dir)
        except LoadError as error:
            raise UsageError(error.one_line()) from None
        if admit in admissions.rounds:
            raise UsageError(f"{admissions.path}: round {admit!r} was measured on {admissions.rounds[admit].get('measured', '?')}; a round is measured once: write a fresh one")
        all_graders = True
    cases, checks = _cases_and_checks(bundle, all_graders=all_graders)
    if admit is not None:
        sets = [(f"round {admit}", bundle.evals_dir / ROUNDS / admit)]
    elif answers is not None:
        sets = [("answers", answers)]
    else:
        rounds = sorted(p for p in (bundle.evals_dir / ROUNDS).glob("*") if p.is_dir()) if (bundle.evals_dir / ROUNDS).is_dir() else []
        sets = [(name, bundle.evals_dir / folder) for name, folder in (("held-out", HELD_OUT),) if (bundle.evals_dir / folder).is_dir()]
        sets += [(f"round {p.name}", p) for p in rounds]
        sets += [(name, bundle.evals_dir / folder) for name, folder in (("dev", DEV), ("training", TRAINING)) if (bundle.evals_dir / folder).is_dir()]
        if not sets:
            raise UsageError(f"{bundle.evals_dir}: no {HELD_OUT}/ or {TRAINING}/ folder of labelled answers; pass --answers DIR")
    labelled = [(name, path, require_labels(path, cases)) for name, path in sets]
    loaded = [load_skill(d) for d in bundle.skill_dirs()]
    skills = [s.name for s in loaded]
    executor = _Executor(checks)

    async def work(judge):
        return [await calibrate(entries, skills, checks, judge, jobs=options.jobs, observe=executor.observe) for _, _, entries in labelled]

    try:
        judge, results = _with_judge(options, work)
    finally:
        executor.close()
    out = [{"name": name, "path": str(path), **result} for (name, path, _), result in zip(labelled, results)]
    result = {"judge": judge.describe() if judge else None, "bundle_fingerprint": bundle_fingerprint(bundle, loaded, cases), "sets": out, "judge_errors": [e for r in out for e in r["judge_errors"]]}
    if admissions is not None:
        result["admission"] = _admit(admissions, admit, bundle, labelled[0][2], checks, out[0])
    if judge and not result["judge_errors"]:
        store_calibration(result)  # what a gate over this judge's verdicts will ask for
    return result


def _admit(admissions, name: str, bundle: Bundle, labelled: list, checks: dict[str, list[Check]], measured: dict) -> dict:
    """Record a round's measurement: every grader (check, field, execute) of a case the round
    answers is measured; those of a kind that met the bar on pass and on fail are admitted."""
    import datetime

    import yaml

    answered = {entry.case.key for entry in labelled}
    graders = [(key, c) for key, found in checks.items() if key in answered for c in found]
    kinds_ok = {grader: figures["admissible"] for grader, figures in measured["graders"].items() if figures["items"]}
    admitted = sorted(c.fingerprint(key) for key, c in graders if kinds_ok.get(c.grader))
    refused = sorted(c.fingerprint(key) for key, c in graders if not kinds_ok.get(c.grader))
    figures = {grader: {k: measured["graders"][grader][k] for k in ("items", "decided", "passes", "pass_precision", "fails", "fail_precision", "admissible")} for grader in kinds_ok}
    entry = {
        "answers": (bundle.evals_dir / ROUNDS / name).relative_to(bundle.root).as_posix(),
        "measured": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "figures": figures,
        "admitted_kinds": sorted(kind for kind, ok in kinds_ok.items() if ok),
        "admitted": admitted,
        "not_admitted": refused,
    }
    rounds = dict(admissions.rounds)
    rounds[name] = entry
    text = "# Written by `mbskills calibrate --admit ROUND` (runner/load/admissions.py); a round is measured once.\n" + yaml.safe_dump({"rounds": rounds}, sort_keys=False, width=120)
    write_atomic(admissions.path, text)
    return {"round": name, "admitted": len(admitted), "not_admitted": len(refused), "kinds": kinds_ok, "path": str(admissions.path)}


# -- how far a judge may be trusted -------------------------------------------------------

TUNING_SETS = ("dev", "training")  # sets the checks were tuned on: no evidence about a judge's trust


def bundle_fingerprint(bundle: Bundle, skills: list, cases: list[Case]) -> str:
    """Of every file that decides grading in the bundle (all its cases): a calibration holds
    for the bundle it was measured on."""
    return fingerprint(bundle_files(bundle.root, skills, cases))


def calibrations_dir() -> Path:
    return defaults.cache_home() / "calibrations"


def _calibration_name(judge: dict, fingerprint_: str) -> str:
    return hashlib.sha256(json.dumps([judge, fingerprint_], sort_keys=True).encode()).hexdigest()[:20] + ".json"


def store_calibration(result: dict) -> Path:
    path = calibrations_dir() / _calibration_name(result["judge"], result["bundle_fingerprint"])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(result, indent=2) + "\n")
    except (OSError, UsageError):
        pass  # a cache that cannot be written costs a rerun of calibrate, nothing else
    return path


@dataclass(frozen=True)
class JudgeTrust:
    """Whether the judge's verdicts may decide a gate: a calibration of this judge on this
    bundle, on a set the checks were not tuned on, with kappa at least min_kappa."""

    ok: bool
    line: str  # what the reports say about it
    kappa: float | None = None
    path: str | None = None

    def to_dict(self) -> dict:
        return {"ok": self.ok, "line": self.line, "kappa": self.kappa, "path": self.path}


def judge_trust(judge: dict, now: str, model: str, *, explicit: Path | None, min_kappa: float) -> JudgeTrust:
    """`now`: bundle_fingerprint() of the bundle being graded."""
    path = explicit or calibrations_dir() / _calibration_name(judge, now)
    command = f"`mbskills calibrate --judge {model} --out FILE` and pass --calibration FILE"
    if not path.is_file():
        where = f"{path} does not exist" if explicit else f"no calibration of {model} for this bundle is cached"
        return JudgeTrust(False, f"judge {model} is not calibrated: {where}; run {command}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        sets, their_judge, their_bundle = data["sets"], data["judge"], data["bundle_fingerprint"]
        headline = sets[0]
        kappa = headline["policy_with_judge"]["kappa"]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        raise UsageError(f"{path}: not a calibration written by `mbskills calibrate --judge ... --out FILE`") from None
    if their_judge != judge:
        return JudgeTrust(False, f"{path} calibrates another judge ({their_judge.get('provider') if isinstance(their_judge, dict) else their_judge}:{their_judge.get('model') if isinstance(their_judge, dict) else ''}); run {command}", None, str(path))
    if their_bundle != now:
        return JudgeTrust(False, f"{path} was measured on another version of the bundle; run {command}", None, str(path))
    if headline["name"] in TUNING_SETS:
        return JudgeTrust(False, f"{path} measured the judge only on the {headline['name']} set, which the checks were tuned on; it needs a held-out set", kappa, str(path))
    if not isinstance(kappa, (int, float)) or kappa < min_kappa:
        shown = "n/a" if not isinstance(kappa, (int, float)) else f"{kappa:.3f}"
        return JudgeTrust(False, f"judge {model}: kappa {shown} on the {headline['name']} set ({path}) is under --min-kappa {min_kappa}", kappa if isinstance(kappa, (int, float)) else None, str(path))
    return JudgeTrust(True, f"judge {model}: kappa {kappa:.3f} on the {headline['name']} set ({path})", kappa, str(path))

