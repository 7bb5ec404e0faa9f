"""The `mbskills` command. Exit codes: 0 clean, 1 findings or differences, 2 unusable input."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from . import __version__
from .findings import LoadError, UsageError

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_HARNESS = 0, 1, 2, 3


def _bundle(args: argparse.Namespace):
    """--bundle, else the bundle around the working directory, else the one this package ships in."""
    from .skills import Bundle, find_bundle, is_bundle

    if args.bundle:
        source = Path(args.bundle)
    else:
        found = find_bundle(Path.cwd())
        source = found.root if found else Path(__file__).resolve().parent.parent
    if not is_bundle(source):
        raise UsageError(f"{source}: not a bundle (no skills/ folder)")
    return Bundle(source.resolve())


def cmd_validate(args: argparse.Namespace) -> int:
    from .validate import validate_path

    findings = validate_path(Path(args.path))
    if args.format == "json":
        print(json.dumps({"path": args.path, "findings": [f.to_dict() for f in findings], "count": len(findings)}, indent=2))
    else:
        for finding in findings:
            print(finding.format(Path.cwd()))
        print(f"{len(findings)} finding{'s' if len(findings) != 1 else ''} in {args.path}", file=sys.stderr)
    return EXIT_FINDINGS if findings else EXIT_OK


def cmd_install(args: argparse.Namespace) -> int:
    from .install import install

    result = install(_bundle(args), Path(args.dest), link=args.link, force=args.force)
    mode = "linked" if args.link else "copied"
    print(f"{mode} {len(result.installed)} skills ({', '.join(result.installed)}) into {result.dest}; {result.files} entries recorded in the manifest")
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from .install import verify

    differences = verify(Path(args.dest))
    for difference in differences:
        print(difference.format())
    print(f"{args.dest}: {'clean' if not differences else f'{len(differences)} difference(s)'}", file=sys.stderr)
    return EXIT_FINDINGS if differences else EXIT_OK


def _cards_writable(bundle, skills: list[str] | None) -> None:
    """Before half a minute of claim checks: every card to update must be a mapping with a
    `claims` list of mappings that carry an `id`."""
    from .parsing import load_yaml
    from .skills import CARD_FILE

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


def cmd_check(args: argparse.Namespace) -> int:
    import time

    bundle = _bundle(args)
    unknown = set(args.skill or ()) - bundle.skill_names()
    if unknown:
        raise UsageError(f"no such skill in {bundle.root}: {', '.join(sorted(unknown))}")
    if args.write_cards:
        _cards_writable(bundle, args.skill)
    if args.gpu_results:
        return _merge_gpu_results(args, bundle)
    start = time.perf_counter()
    from .claims.run import OK_STATUSES, format_table, run_checks, write_cards, write_reports
    from .claims.environment import versions

    results = run_checks(bundle, skills=args.skill, pattern=args.claim)
    if not results:
        raise UsageError(f"no claim matches --claim {args.claim!r}")
    seconds = time.perf_counter() - start
    found = versions()
    print(format_table(results))
    json_path, junit_path = write_reports(results, Path(args.out), found, seconds)
    print(f"{len(results)} claims in {seconds:.1f} s against megatron-bridge {found['megatron-bridge']}, megatron-core {found['megatron-core']}; wrote {json_path} and {junit_path}", file=sys.stderr)
    if args.write_cards:
        for path in write_cards(bundle, results, found):
            print(f"updated {path}", file=sys.stderr)
    return EXIT_OK if all(r.status in OK_STATUSES for r in results) else EXIT_FINDINGS


def _merge_gpu_results(args: argparse.Namespace, bundle) -> int:
    """`check --gpu-results FILE`: no claim runs here and megatron is never imported; the file
    is checked whole, then printed, then (with --write-cards) recorded in the cards."""
    from .gpu_results import any_failed, format_table, load_results, merge_cards, select

    run = load_results(Path(args.gpu_results), bundle)
    results = select(run, args.skill, args.claim)
    if not results:
        raise UsageError(f"{args.gpu_results}: no result matches --skill/--claim")
    print(format_table(run, results))
    if args.write_cards:
        for path in merge_cards(bundle, run, results):
            print(f"updated {path}", file=sys.stderr)
    return EXIT_FINDINGS if any_failed(results) else EXIT_OK


def cmd_eval(args: argparse.Namespace) -> int:
    import asyncio

    from .cache import open_cache
    from .evaluate import Plan, bundle_cases, run_plan, select_cases
    from .pricing import PriceTable
    from .progress import make_progress
    from .providers import Settings, Transport, open_provider
    from .rundir import RunDir

    bundle = _bundle(args)
    unknown = set(args.skill or ()) - bundle.skill_names()
    if unknown:
        raise UsageError(f"--skill: no such skill in {bundle.root}: {', '.join(sorted(unknown))}")
    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be at least 1")
    if args.reasoning_effort is not None and not args.reasoning_effort:
        raise UsageError("--reasoning-effort needs a value")
    cases = select_cases(bundle_cases(bundle), skills=args.skill, pattern=args.case, limit=args.limit)
    conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
    plan = Plan(bundle, cases, conditions, args.trials, max_turns=args.max_turns, jobs=args.jobs)
    settings = Settings(args.temperature, args.max_tokens, args.reasoning_effort, args.seed)
    transport = Transport(args.timeout, args.max_retries, args.rate_limit_rounds)
    prices = PriceTable(Path(args.pricing) if args.pricing else None)
    provider = open_provider(args.model, settings, transport, api=args.api, base_url=args.base_url)
    identity = provider.identity()
    price = prices.lookup("openai-compatible" if identity["provider"] == "openai" and identity["base_url"] else identity["provider"], provider.model)
    cache = open_cache(args.cache, args.no_cache, provider)
    out = RunDir(Path(args.out))

    async def go():
        try:
            return await run_plan(plan, provider, cache, out, lambda total: make_progress(total, mode=args.progress), price)
        finally:
            await provider.aclose()

    try:
        summary = asyncio.run(go())
    finally:
        out.close()
        cache.close()
    cost = "unknown (no price for this model; see --pricing)" if summary.live_cost_usd is None else f"${summary.live_cost_usd:.4f}"
    print(
        f"{summary.total} records in {args.out}: {summary.written} written now, {summary.skipped} already there, {summary.errors} errors"
        + (f" ({', '.join(f'{k} {v}' for k, v in sorted(summary.error_kinds.items()))})" if summary.errors else "")
        + f"; {summary.requests} requests, {summary.cached_responses} from cache; {summary.input_tokens} input + {summary.output_tokens} output tokens; cost of this invocation {cost}",
        file=sys.stderr,
    )
    return EXIT_FINDINGS if summary.errors else EXIT_OK


def _judge(args: argparse.Namespace):
    """(Judge or None, cache) from --judge and its options."""
    from .cache import NoCache, open_cache
    from .grading.judge import Judge
    from .providers import Settings, Transport, open_provider

    if not args.judge:
        return None, NoCache()
    temperature = None if args.judge_temperature == "omit" else _number(args.judge_temperature, "--judge-temperature")
    provider = open_provider(args.judge, Settings(temperature, args.judge_max_tokens), Transport(args.timeout, args.max_retries), api=args.judge_api, base_url=args.judge_base_url)
    cache = open_cache(args.cache, args.no_cache, provider)
    return Judge(provider, cache), cache


def _with_judge(args: argparse.Namespace, judge, cache, work):
    """Run the coroutine `work()` makes, then close the judge's client and the cache; a
    fatal judge error (bad key, unknown model) is unusable input."""
    import asyncio

    from .providers import ProviderError

    async def go():
        try:
            return await work()
        finally:
            if judge:
                await judge.provider.aclose()

    try:
        return asyncio.run(go())
    except ProviderError as fatal:
        raise UsageError(f"judge {args.judge}: {fatal}") from None
    finally:
        cache.close()


def _number(text: str, option: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"{option}: expected a number or 'omit', got {text!r}") from None


def _bundle_at(path: str | None, fallback: str | None):
    from .skills import Bundle, is_bundle

    source = Path(path or fallback or ".")
    if not is_bundle(source):
        raise UsageError(f"{source}: not a bundle (no skills/ folder); pass --bundle")
    return Bundle(source.resolve())


def _cases_and_checks(bundle):
    from .evaluate import bundle_cases
    from .grading.checks import load_checks

    cases = bundle_cases(bundle)
    try:
        checks = load_checks(cases)
    except LoadError as error:
        raise UsageError(error.finding.format()) from None
    return cases, checks


def cmd_grade(args: argparse.Namespace) -> int:
    from . import aggregate
    from .evaluate import fingerprint
    from .grading import grade_records
    from .report import gates, write_all
    from .rundir import load_run
    from .skills import load_skill

    run = Path(args.run)
    info, records = load_run(run)
    bundle = _bundle_at(args.bundle, info.get("bundle"))
    cases, checks = _cases_and_checks(bundle)
    by_key = {c.key: c for c in cases}
    missing = sorted({r["case"] for r in records} - set(by_key))
    if missing:
        raise UsageError(f"{run}: records for cases the bundle no longer has: {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
    if not records:
        raise UsageError(f"{run}: no records to grade")
    skills = [load_skill(d) for d in bundle.skill_dirs()]
    judge, cache = _judge(args)
    model = info["model"]
    if judge and judge.identity["provider"] == model["provider"] and judge.identity["model"] == model["model"]:
        print(f"mbskills: warning: the judge {args.judge} is the model under test; its verdicts may favour its own answers", file=sys.stderr)

    grades = _with_judge(args, judge, cache, lambda: grade_records(records, by_key, [s.name for s in skills], checks, judge, jobs=args.jobs))
    ran = {r["case"] for r in records}
    now = fingerprint(skills, [c for c in cases if c.key in ran])
    report = aggregate.build(info, grades, skill_names=[s.name for s in skills], judge=judge.describe() if judge else None, fingerprint_now=now, checks_cases=len(checks), resamples=args.resamples, seed=args.seed)
    paths = write_all(run, report, grades)
    overall = report["overall"]
    parts = []
    for condition, cell in overall["conditions"].items():
        rate = cell["pass_rate"]
        parts.append(f"{condition} {'n/a' if rate is None else f'{100 * rate:.0f}%'}")
    for condition, entry in overall["uplift"].items():
        if entry["mean"] is not None:
            parts.append(f"uplift {condition} {100 * entry['mean']:+.0f} pts [{100 * entry['lo']:+.0f}, {100 * entry['hi']:+.0f}]")
    print(f"graded {len(grades)} records: " + ", ".join(parts), file=sys.stderr)
    print("wrote " + ", ".join(str(p) for p in paths), file=sys.stderr)
    health = report["health"]
    if health["record_errors"] or health["judge_errors"]:
        print(f"mbskills: harness failures: {health['record_errors']} records did not run, {health['judge_errors']} could not be graded ({', '.join(f'{k} {v}' for k, v in sorted(health['by_kind'].items()))})", file=sys.stderr)
        return EXIT_HARNESS
    failed = gates(report, fail_under_uplift=args.fail_under_uplift, fail_under_pass=args.fail_under_pass, fail_on_regression=args.fail_on_regression)
    for line in failed:
        print(f"gate failed: {line}", file=sys.stderr)
    return EXIT_FINDINGS if failed else EXIT_OK


def cmd_calibrate(args: argparse.Namespace) -> int:
    from .atomic import write_atomic
    from .calibrate import calibrate, require_labels
    from .skills import load_skill

    bundle = _bundle(args)
    cases, checks = _cases_and_checks(bundle)
    labelled = require_labels(Path(args.answers) if args.answers else bundle.evals_dir / "calibration", cases)
    skills = [load_skill(d).name for d in bundle.skill_dirs()]
    judge, cache = _judge(args)

    result = _with_judge(args, judge, cache, lambda: calibrate(labelled, skills, checks, judge, jobs=args.jobs))

    def line(name: str, score: dict | None) -> str:
        if not score or not score["items"]:
            return f"{name:<22} no items"
        kappa = "n/a" if score["kappa"] is None else f"{score['kappa']:.3f}"
        return f"{name:<22} {score['items']:>4} items  accuracy {100 * score['accuracy']:5.1f}%  kappa {kappa}  (passed but labelled failing {score['fp']}, failed but labelled passing {score['fn']})"

    print(f"{result['answers']} labelled answers ({result['good']} good, {result['bad']} bad)")
    print(line("checks", result["checks"]))
    if judge:
        print(line("judge: behaviours", result["judge_behaviours"]))
        print(line("judge: correctness", result["judge_correct"]))
    for error in result["judge_errors"]:
        print(f"judge error: {error}", file=sys.stderr)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out, json.dumps(result, indent=2) + "\n")
        print(f"wrote {out}", file=sys.stderr)
    if result["judge_errors"]:
        return EXIT_HARNESS
    if args.min_kappa is not None:
        scores = [result["judge_behaviours"]] if judge else [result["checks"]]
        if any(s["kappa"] is None or s["kappa"] < args.min_kappa for s in scores):
            print(f"gate failed: kappa below {args.min_kappa}", file=sys.stderr)
            return EXIT_FINDINGS
    return EXIT_OK


def _judge_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--judge", help="the judge model: openai:MODEL or anthropic:MODEL (default: no judge; transcript and checks only)")
    p.add_argument("--judge-api", choices=("chat", "responses"), help="OpenAI API for the judge")
    p.add_argument("--judge-base-url", help="an OpenAI-compatible server or proxy for the judge")
    p.add_argument("--judge-temperature", default="0", help="judge temperature (default: 0; 'omit' for models that refuse one)")
    p.add_argument("--judge-max-tokens", type=int, default=2048)
    p.add_argument("-j", "--jobs", type=int, default=8, help="judge requests in flight (default: 8)")
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--max-retries", type=int, default=4)
    p.add_argument("--cache", help="response cache file (default: as for eval)")
    p.add_argument("--no-cache", action="store_true")


def cmd_show(args: argparse.Namespace) -> int:
    from .rundir import load_run
    from .show import as_json, select, table, transcript

    info, records = load_run(Path(args.run))
    chosen = select(records, pattern=args.case, condition=args.condition, trial=args.trial)
    if not chosen:
        raise UsageError(f"{args.run}: no record matches")
    if args.json:
        print(as_json(chosen))
    elif args.case or args.condition or args.trial is not None:
        print("\n\n".join(transcript(r, full_tools=args.full) for r in chosen))
    else:
        print(table(info, chosen))
    return EXIT_OK


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line on stderr (argparse adds the usage)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(EXIT_USAGE, f"mbskills: error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mbskills", description="Agent skills for Megatron-Bridge: validate them, check their claims against the pinned release, install and verify them.")
    parser.add_argument("--version", action="version", version=f"mbskills {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="check a bundle, a skill or an evals file", description="Findings print as path:line: rule-id: message. Exit 0 clean, 1 findings, 2 unusable input.")
    p.add_argument("path", nargs="?", default=".", help="bundle folder, skill folder, SKILL.md, card.yaml or evals .json (default: .)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("check", help="run every SKILL.md claim against the installed Megatron-Bridge", description="Runs each claim's check in one process; GPU-tier claims are built and validated here and reported as needs-gpu (gpu/validate.sh trains them). Exit 0 all passed (or need a GPU), 1 a claim failed, 2 unusable input or no Megatron-Bridge.")
    p.add_argument("--skill", action="append", help="only this skill (repeatable)")
    p.add_argument("--claim", default="*", help="only claims whose id matches this glob")
    p.add_argument("--out", default="out/claims", help="folder for claims.json and junit.xml (default: out/claims)")
    p.add_argument("--write-cards", action="store_true", help="record status, versions and date in each skill's card.yaml")
    p.add_argument("--gpu-results", metavar="FILE", help="instead of running claims, merge the GPU tier's results (gpu/validate.sh writes them) into the table and, with --write-cards, the cards")
    p.add_argument("--bundle", help="the bundle to check (default: the bundle around the working directory, else this package's)")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("install", help="copy (or link) the skills into an agent's skills folder, without their evals/")
    p.add_argument("dest", nargs="?", default=".agents/skills", help="destination folder (default: .agents/skills)")
    p.add_argument("--link", action="store_true", help="symlink each skill's files instead of copying them")
    p.add_argument("--force", action="store_true", help="overwrite installed copies that were changed since install")
    p.add_argument("--bundle", help="the bundle to install from (default: the bundle around the working directory, else this package's)")
    p.set_defaults(func=cmd_install)

    p = sub.add_parser(
        "eval",
        help="put the bundle's eval cases to a model, with and without the skills",
        description="Runs every case x condition x trial and writes one record each to OUT/records.jsonl as it completes. "
        "Rerunning the same command resumes: finished records are kept, failed ones retried, answered requests come from the cache. "
        "Exit 0 all records complete, 1 some ended in an error (see the summary), 2 unusable input, bad key or unknown model.",
    )
    p.add_argument("--model", required=True, help="openai:MODEL, anthropic:MODEL, or replay:DIR (recorded answers)")
    p.add_argument("--conditions", default="baseline,skills", help="comma list of baseline, skills, inline (default: baseline,skills)")
    p.add_argument("--out", required=True, help="run directory (created; reused to resume)")
    p.add_argument("-j", "--jobs", type=int, default=8, help="records (so requests) in flight at once (default: 8)")
    p.add_argument("--trials", type=int, default=1, help="independent samples per case and condition (default: 1)")
    p.add_argument("--skill", action="append", help="only cases of this skill (repeatable)")
    p.add_argument("--case", help="only cases whose owner/id or id matches this glob")
    p.add_argument("--limit", type=int, help="only the first N selected cases")
    p.add_argument("--api", choices=("chat", "responses"), help="OpenAI API: chat (default) or responses")
    p.add_argument("--base-url", help="an OpenAI-compatible server (vLLM, Ollama, llama.cpp, NIM) or a proxy")
    p.add_argument("--temperature", type=float)
    p.add_argument("--max-tokens", type=int, help="output token limit per request")
    p.add_argument("--reasoning-effort", help="e.g. low, medium, high (models that take it)")
    p.add_argument("--seed", type=int, help="sampling seed (OpenAI Chat Completions and compatible servers)")
    p.add_argument("--max-turns", type=int, default=8, help="requests per record before the tool loop stops (default: 8)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default: 120)")
    p.add_argument("--max-retries", type=int, default=4, help="the SDK's own retries per request (default: 4)")
    p.add_argument("--rate-limit-rounds", type=int, default=6, help="further waits on HTTP 429 after the SDK's retries, honouring Retry-After (default: 6)")
    p.add_argument("--cache", help="response cache file (default: $MBSKILLS_CACHE or ~/.cache/mbskills/responses.sqlite)")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the response cache")
    p.add_argument("--pricing", help="YAML price table whose entries override the shipped one")
    p.add_argument("--progress", choices=("auto", "rich", "plain"), default="auto", help="progress display (default: a bar on a terminal, lines otherwise)")
    p.add_argument("--bundle", help="the bundle to evaluate (default: the bundle around the working directory, else this package's)")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser(
        "grade",
        help="grade a run's transcripts and write report.json, BENCHMARK.md, report.html, junit.xml",
        description="Grades stored records without asking the model again: transcript (routing, scripts, process behaviours), "
        "deterministic checks (evals/checks.yaml sidecars) and, with --judge, an LLM judge. "
        "Exit 0 gates hold, 1 a gate failed, 2 unusable input, 3 the harness failed (records that did not run, answers the judge could not grade).",
    )
    p.add_argument("run", help="run directory written by `mbskills eval`")
    p.add_argument("--bundle", help="the bundle whose eval files grade the run (default: the one recorded in run.json)")
    _judge_options(p)
    p.add_argument("--fail-under-uplift", type=float, help="gate: overall skills-minus-baseline uplift (0..1) below this fails")
    p.add_argument("--fail-under-pass", type=float, help="gate: overall pass rate under skills (0..1) below this fails")
    p.add_argument("--fail-on-regression", action="store_true", help="gate: any case whose pass rate under skills is below baseline fails")
    p.add_argument("--resamples", type=int, default=10000, help="bootstrap resamples (default: 10000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: 0)")
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("calibrate", help="measure the judge and the deterministic checks against hand-labelled answers", description="Exit 0 done, 1 kappa under --min-kappa, 2 unusable input, 3 the judge failed.")
    _judge_options(p)
    p.add_argument("--answers", help="labelled answers folder (default: BUNDLE/evals/calibration)")
    p.add_argument("--out", help="also write the full result as JSON here")
    p.add_argument("--min-kappa", type=float, help="gate: Cohen's kappa of the judge (or of the checks without a judge) below this fails")
    p.add_argument("--bundle", help="the bundle (default: the bundle around the working directory, else this package's)")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("show", help="print a run's records, or the transcripts of some")
    p.add_argument("run", help="run directory")
    p.add_argument("--case", help="glob over owner/id or id: print these transcripts")
    p.add_argument("--condition", help="only this condition")
    p.add_argument("--trial", type=int, help="only this trial")
    p.add_argument("--full", action="store_true", help="tool results and system prompt in full")
    p.add_argument("--json", action="store_true", help="the records as JSON lines")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("verify", help="report files added, changed or missing since install")
    p.add_argument("dest", nargs="?", default=".agents/skills")
    p.set_defaults(func=cmd_verify)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as done:  # --help, --version, or a bad argument (already reported)
        return int(done.code or 0)
    try:
        return args.func(args)
    except UsageError as error:
        print(f"mbskills: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except LoadError as error:  # a file the command needs is malformed
        print(f"mbskills: error: {error.finding.format()}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `mbskills show RUN | head`: the reader left; say nothing more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FINDINGS


def entry() -> None:
    """Console entry point. After `check`, skip the interpreter's teardown of torch and
    megatron (about 4 s on a 2-core machine): every report is written and flushed by then."""
    code = main()
    if "torch" in sys.modules:
        import logging

        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    entry()
