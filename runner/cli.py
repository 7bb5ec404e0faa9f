"""The `mbskills` command. It only wires: parse the arguments, call one library function
per stage, print what comes back, and turn the package's errors into exit codes here, in
`main`. Exit codes: 0 clean, 1 findings, differences or a failed gate, 2 unusable input,
3 the harness failed. Each stage is imported only when its command runs, so `--help`
loads neither torch, megatron nor the model SDKs."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from pathlib import Path

from . import __version__
from .core import EXIT_FINDINGS, EXIT_HARNESS, EXIT_OK, EXIT_USAGE, KEY_VARIABLES, MbskillsError, UsageError, defaults, redact_standard_streams, register_secret, write_all_atomic, write_atomic


def say(line: str) -> None:
    print(line, file=sys.stderr)


def _bundle(args: argparse.Namespace):
    from .load import resolve_bundle

    return resolve_bundle(args.bundle)


def cmd_validate(args: argparse.Namespace) -> int:
    from .validate import validate_path

    findings = validate_path(Path(args.path))
    if args.format == "json":
        print(json.dumps({"path": args.path, "findings": [f.to_dict() for f in findings], "count": len(findings)}, indent=2))
    else:
        for finding in findings:
            print(finding.format(Path.cwd()))
        say(f"{len(findings)} finding{'s' if len(findings) != 1 else ''} in {args.path}")
    return EXIT_FINDINGS if findings else EXIT_OK


def _skills_folder(args: argparse.Namespace) -> Path:
    from .install import destination

    if args.dest is not None:
        if args.client is not None or args.user:
            raise UsageError(f"give a folder ({args.dest}) or --client/--user, not both")
        return Path(args.dest)
    return destination(args.client or defaults.SKILLS_CLIENT, user=args.user, project=Path.cwd(), home=Path.home())


def cmd_install(args: argparse.Namespace) -> int:
    from .install import duplicates, install

    dest = _skills_folder(args)
    result = install(_bundle(args), dest, link=args.link, force=args.force)
    if args.link:
        print(f"linked {len(result.installed)} skill folders ({', '.join(result.installed)}) into {result.dest}; manifest {result.manifest}")
        say("mbskills: note: a linked skill folder shows its evals/ (the eval cases' answers) to the agent; install a copy to evaluate with it")
    else:
        print(f"copied {len(result.installed)} skills ({', '.join(result.installed)}) into {result.dest}; {result.files} files recorded in {result.manifest}")
    for line in duplicates(dest, result.installed, cwd=Path.cwd(), home=Path.home()):
        say(f"mbskills: warning: {line}")
    return EXIT_OK


def cmd_plan(args: argparse.Namespace) -> int:
    from .stats import plan

    try:
        sized = plan(args.baseline_rate, args.effect, trials=args.trials, icc=args.icc, alpha=args.alpha, power=args.power)
    except ValueError as error:  # say it in the options' names
        message = str(error)
        for name in ("baseline_rate", "effect", "trials", "icc", "alpha", "power"):
            message = re.sub(rf"\b{name}\b", "--" + name.replace("_", "-"), message)
        raise UsageError(message) from None
    print(sized.table())
    return EXIT_OK


def cmd_uninstall(args: argparse.Namespace) -> int:
    from .install import uninstall

    dest = _skills_folder(args)
    removed = uninstall(dest, force=args.force)
    print(f"removed {len(removed)} skills ({', '.join(removed) or 'none left'}) and the manifest from {dest}")
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from .install import verify

    dest = _skills_folder(args)
    differences = verify(dest)
    for difference in differences:
        print(difference.format())
    say(f"{dest}: {'clean' if not differences else f'{len(differences)} difference(s)'}")
    return EXIT_FINDINGS if differences else EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    from .claims import check_claims, merge_gpu_results

    bundle = _bundle(args)
    if args.gpu_results:
        merged = merge_gpu_results(bundle, Path(args.gpu_results), skills=args.skill, pattern=args.claim, write_cards=args.write_cards)
        print(merged.table)
        for path in merged.cards_written:
            say(f"updated {path}")
        return EXIT_FINDINGS if merged.failed else EXIT_OK
    checked = check_claims(bundle, skills=args.skill, pattern=args.claim, out=Path(args.out), write_cards=args.write_cards)
    print(checked.table)
    say(checked.summary)
    for path in checked.cards_written:
        say(f"updated {path}")
    return EXIT_OK if checked.ok else EXIT_FINDINGS


def cmd_mutate(args: argparse.Namespace) -> int:
    from .claims import mutate_claims

    mutated = mutate_claims(_bundle(args), skills=args.skill, pattern=args.claim, out=Path(args.out), min_kill=args.min_kill, allow_list=Path(args.allow_list) if args.allow_list else None)
    print(mutated.report)
    say(f"wrote {mutated.json_path}")
    return EXIT_OK if mutated.ok else EXIT_FINDINGS


def cmd_drift(args: argparse.Namespace) -> int:
    from .claims import run_drift

    releases = [r.strip() for r in args.releases.split(",") if r.strip()]
    drift = run_drift(_bundle(args).root, releases, out=Path(args.out), cache=Path(args.cache) if args.cache else None, timeout=args.timeout, progress=say)
    print(drift.table)
    say(f"wrote {drift.json_path} and {drift.md_path}")
    return EXIT_OK if drift.ok and not drift.unexplained and not drift.stale_notes else EXIT_FINDINGS


def cmd_eval(args: argparse.Namespace) -> int:
    from .providers import Settings, Transport
    from .run import EvalRequest, run_eval

    request = EvalRequest(
        model=args.model,
        out=Path(args.out),
        conditions=tuple(c.strip() for c in args.conditions.split(",") if c.strip()),
        trials=args.trials,
        jobs=args.jobs,
        max_turns=args.max_turns,
        skills=tuple(args.skill or ()),
        cases=tuple(args.case or ()),
        limit=args.limit,
        api=args.api,
        base_url=args.base_url,
        settings=Settings(args.temperature, args.max_tokens, args.reasoning_effort, args.seed),
        transport=Transport(args.timeout, args.max_retries, args.rate_limit_rounds, args.rate_limit_deadline),
        cache=args.cache,
        no_cache=args.no_cache,
        pricing=Path(args.pricing) if args.pricing else None,
        progress=args.progress,
        command=args.command_line,
        agent=args.agent,
        agent_bin=args.agent_bin,
        isolate_network=args.isolate_network,
        agent_timeout=args.agent_timeout,
    )
    summary = run_eval(_bundle(args), request)
    say(summary.line(args.out))
    return EXIT_FINDINGS if summary.errors else EXIT_OK


def _judge_options(args: argparse.Namespace, **extra):
    from .grade import JudgeOptions

    return JudgeOptions(
        model=args.judge,
        api=args.judge_api,
        base_url=args.judge_base_url,
        temperature=args.judge_temperature,
        max_tokens=args.judge_max_tokens,
        timeout_s=args.timeout,
        max_retries=args.max_retries,
        cache=args.cache,
        no_cache=args.no_cache,
        jobs=args.jobs,
        **extra,
    )


def cmd_grade(args: argparse.Namespace) -> int:
    from .grade import grade_run
    from .report import Gates, publish

    gate = Gates(args.fail_under_uplift, args.fail_under_pass, args.fail_on_regression, args.min_coverage, args.min_cases)  # range-checked before any grading
    # the calibration that lets the judge's verdicts decide a gate
    judge = _judge_options(args, calibration=args.calibration, min_kappa=args.min_kappa)
    graded = grade_run(Path(args.run), judge, bundle=args.bundle, allow_incomplete=args.allow_incomplete, allow_changed_bundle=args.allow_changed_bundle)
    for warning in graded.warnings:
        say(f"mbskills: warning: {warning}")
    published = publish(graded, gate, resamples=args.resamples, seed=args.seed, allow_incomplete=args.allow_incomplete)
    for line in published.banner:
        say(f"mbskills: {line}")
    say(published.summary)
    say("wrote " + ", ".join(str(p) for p in published.paths))
    if published.harness:
        say(f"mbskills: {published.harness}")
        return EXIT_HARNESS
    for line in published.failed_gates:
        say(f"gate failed: {line}")
    return EXIT_FINDINGS if published.failed_gates else EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    from .grade import grade_run
    from .report import comparison, comparison_markdown, publish

    judge = _judge_options(args, calibration=args.calibration, min_kappa=args.min_kappa)
    runs, harness = [], []
    for run in args.runs:
        graded = grade_run(Path(run), judge, allow_incomplete=args.allow_incomplete)
        published = publish(graded, resamples=args.resamples, seed=args.seed, allow_incomplete=args.allow_incomplete)
        if published.harness:
            harness.append(f"{run}: {published.harness}")
        runs.append((run, graded.info, published.report))
    table = comparison(runs)
    text = comparison_markdown(table)
    if args.out:
        out = Path(args.out)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"{out}: cannot create the folder ({exc.strerror or exc})") from None
        write_all_atomic({out / "comparison.json": json.dumps(table, indent=2) + "\n", out / "comparison.md": text})
        say(f"wrote {out / 'comparison.json'}, {out / 'comparison.md'}")
    print(json.dumps(table, indent=2) if args.json else text, end="" if not args.json else "\n")
    for line in harness:
        say(f"mbskills: {line}")
    return EXIT_HARNESS if harness else EXIT_OK


def cmd_calibrate(args: argparse.Namespace) -> int:
    from .grade import calibrate_bundle, calibration_lines

    if args.admit and args.answers:
        raise UsageError("--admit measures the round BUNDLE/evals/rounds/ROUND; it takes no --answers")
    result = calibrate_bundle(_bundle(args), _judge_options(args), answers=Path(args.answers) if args.answers else None, admit=args.admit, all_graders=args.all_graders or bool(args.answers))
    for line in calibration_lines(result):
        print(line)
    if not args.all_graders and not args.answers and not args.admit and not any(g["items"] for entry in result["sets"] for g in entry.get("graders", {}).values()):
        say("no grader decides: none is admitted in the bundle's evals/admissions.yaml (measure every written one with --all-graders; admit with --admit ROUND on a fresh round)")
    if result.get("admission"):
        admission = result["admission"]
        kinds = ", ".join(f"{kind} {'admitted' if ok else 'not admitted'}" for kind, ok in admission["kinds"].items())
        say(f"round {admission['round']}: {kinds}; {admission['admitted']} graders admitted, {admission['not_admitted']} not ({admission['path']})")
    for error in result["judge_errors"]:
        say(f"judge error: {error}")
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out, json.dumps(result, indent=2) + "\n")
        say(f"wrote {out}")
    if result["judge_errors"]:
        return EXIT_HARNESS
    if args.min_kappa is not None:
        headline = result["sets"][0]  # the held-out set when there is one
        score = headline["policy_with_judge"] if args.judge else headline["policy_checks_only"]
        if score["kappa"] is None or score["kappa"] < args.min_kappa:
            say(f"gate failed: kappa on the {headline['name']} set {'n/a' if score['kappa'] is None else format(score['kappa'], '.3f')} < {args.min_kappa}")
            return EXIT_FINDINGS
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    from .run import load_run, records_json, records_table, select_records, transcript

    info, records = load_run(Path(args.run))
    chosen = select_records(records, pattern=args.case, condition=args.condition, trial=args.trial)
    if not chosen:
        raise UsageError(f"{args.run}: no record matches")
    if args.json:
        print(records_json(chosen))
    elif args.case or args.condition or args.trial is not None:
        print("\n\n".join(transcript(r, full_tools=args.full) for r in chosen))
    else:
        print(records_table(info, chosen))
    return EXIT_OK


# --- arguments ------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse with whole option names only, and a bad argument as one line on stderr."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)  # `--for` must not silently mean `--force`
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        self.exit(EXIT_USAGE, f"mbskills: error: {self.prog}: {message} (see {self.prog} --help)\n")


def _number(kind: type, *, low: float | None = None, high: float | None = None, above: float | None = None):
    """An option's value as `kind`, finite and in range, checked before any work; the
    message says which bound it broke."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'a whole number' if kind is int else 'a number'}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise argparse.ArgumentTypeError(f"{text} is not a finite number")
        if low is not None and high is not None and not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is outside {low:g}..{high:g}")
        if low is not None and value < low:
            raise argparse.ArgumentTypeError(f"{value} is under {low:g}")
        if above is not None and value <= above:
            raise argparse.ArgumentTypeError(f"{text} must be above {above:g}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


_fraction = _number(float, low=0.0, high=1.0)


def _at_least(low: int):
    return _number(int, low=low)


def _finite(positive: bool):
    return _number(float, above=0.0 if positive else None)


def _parent(build) -> argparse.ArgumentParser:
    """Options shared by several commands, declared once."""
    parent = _Parser(add_help=False)
    build(parent)
    return parent


def _skills_folder_options(p: argparse.ArgumentParser, dest_help: str) -> None:
    from .install import CLIENTS

    p.add_argument("dest", nargs="?", help=dest_help)
    p.add_argument("--client", choices=list(CLIENTS), help=f"the agent client whose folder to use (default: {defaults.SKILLS_CLIENT}); " + "; ".join(f"{c.name}: {c.project}" for c in CLIENTS.values()))
    p.add_argument("--user", action="store_true", help="the client's folder in your home instead (" + "; ".join(f"{c.name}: {c.user}" for c in CLIENTS.values()) + ")")


def _bundle_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bundle", help="the bundle (default: the bundle around the working directory, else this package's checkout)")


def _transport_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=_finite(True), default=defaults.TIMEOUT_S, help="seconds per request (default: %(default)s)")
    p.add_argument("--max-retries", type=_at_least(0), default=defaults.MAX_RETRIES, help="the SDK's own retries per request (default: %(default)s)")
    p.add_argument("--cache", help="response cache file (default: $MBSKILLS_CACHE or ~/.cache/mbskills/responses.sqlite)")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the response cache")


def _judge_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--judge", help="the judge model: openai:MODEL or anthropic:MODEL (default: no judge; transcript and checks only)")
    p.add_argument("--judge-api", choices=("chat", "responses"), help="OpenAI API for the judge")
    p.add_argument("--judge-base-url", help="an OpenAI-compatible server or proxy for the judge")
    p.add_argument("--judge-temperature", default=defaults.JUDGE_TEMPERATURE, help="judge temperature (default: %(default)s; 'omit' for models that refuse one)")
    p.add_argument("--judge-max-tokens", type=_at_least(1), default=defaults.JUDGE_MAX_TOKENS, help="judge output token limit (default: %(default)s)")
    p.add_argument("-j", "--jobs", type=_at_least(1), default=defaults.JOBS, help="judge requests in flight (default: %(default)s)")


def _report_options(p: argparse.ArgumentParser) -> None:
    """What grade and compare both take: the judge's calibration and the bootstrap."""
    p.add_argument("--calibration", metavar="FILE", help="the judge's calibration (`mbskills calibrate --judge ... --out FILE`); default: the one calibrate cached for this judge and bundle. Without one, no gate passes on judge verdicts")
    p.add_argument("--min-kappa", type=_fraction, default=defaults.MIN_KAPPA, help="gate: the judge's kappa on the held-out set its calibration needs before its verdicts decide a gate (default: %(default)s)")
    p.add_argument("--resamples", type=_at_least(100), default=defaults.RESAMPLES, help="bootstrap resamples (default: %(default)s)")
    p.add_argument("--seed", type=int, default=defaults.SEED, help="bootstrap seed (default: %(default)s)")


def build_parser() -> argparse.ArgumentParser:
    bundle = _parent(_bundle_option)
    transport = _parent(_transport_options)
    judge = _parent(_judge_arguments)
    skill = _parent(lambda p: p.add_argument("--skill", action="append", help="only this skill (repeatable)"))

    parser = _Parser(prog="mbskills", description="Agent skills for Megatron-Bridge: validate them, check their claims against the pinned release, install them, and evaluate models with and without them.")
    parser.add_argument("--version", action="version", version=f"mbskills {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("validate", help="check a bundle, a skill or an evals file", description="Findings print as path:line: rule-id: message. Exit 0 clean, 1 findings, 2 unusable input.")
    p.add_argument("path", nargs="?", default=".", help="bundle folder, skill folder, SKILL.md, card.yaml or evals .json (default: %(default)s)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser(
        "check",
        parents=[skill, bundle],
        help="run every SKILL.md claim against the installed Megatron-Bridge",
        description="Runs each claim's check in one process; GPU-tier claims are built and validated here and reported as needs-gpu (gpu/validate.sh trains them). Exit 0 all passed (or need a GPU), 1 a claim failed, 2 unusable input or no Megatron-Bridge.",
    )
    p.add_argument("--claim", default="*", help="only claims whose id matches this glob")
    p.add_argument("--out", default=defaults.CLAIMS_OUT, help="folder for claims.json and junit.xml (default: %(default)s)")
    p.add_argument("--write-cards", action="store_true", help="record status, versions and date in each skill's card.yaml")
    p.add_argument("--gpu-results", metavar="FILE", help="instead of running claims, merge the GPU tier's results (gpu/validate.sh writes them) into the table and, with --write-cards, the cards")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser(
        "mutate",
        parents=[skill, bundle],
        help="mutate each fact of the skills' claim sections and count the mutants their checks kill",
        description="Generates single-fact mutants of every claim section (booleans, numbers, backticked names, quoted messages, exception types, negations, comparisons, deleted sentences) and reruns the checks that read it, in one process. Exit 0 every skill at or above --min-kill with no stale allow-list entry, 1 otherwise, 2 unusable input or a failing claim before mutation.",
    )
    p.add_argument("--claim", default="*", help="only mutate claims whose id matches this glob")
    p.add_argument("--min-kill", type=_fraction, default=defaults.MIN_KILL, help="gate: the share of non-equivalent mutants each skill must kill (default: %(default)s)")
    p.add_argument("--allow-list", help=f"reviewed equivalent mutants (default: {defaults.MUTANTS_ALLOW} in the bundle)")
    p.add_argument("--out", default=defaults.MUTATE_OUT, help="folder for mutate.json (default: %(default)s)")
    p.set_defaults(func=cmd_mutate)

    p = sub.add_parser(
        "drift",
        parents=[bundle],
        help="run every claim against other Megatron-Bridge releases and table where they stop holding",
        description="For each release, layers that megatron-bridge wheel (pip install --no-deps, cached) over the pinned environment and runs every claim there in a subprocess; prints a claim x release table and writes drift.json and drift.md. A claim that fails on another release must be explained in its skill's checks/drift-notes.yaml. Exit 0 the pinned release passes and every drift is explained, 1 otherwise, 2 unusable input.",
    )
    p.add_argument("--releases", default=defaults.DRIFT_RELEASES, help="comma-separated megatron-bridge releases; the pinned one always runs first (default: %(default)s)")
    p.add_argument("--out", default=defaults.DRIFT_OUT, help="folder for drift.json and drift.md (default: %(default)s)")
    p.add_argument("--cache", help="folder for the release layers (default: ~/.cache/mbskills/drift, under $XDG_CACHE_HOME when set)")
    p.add_argument("--timeout", type=_finite(True), default=600.0, help="seconds for each release's install and each claim run (default: %(default)s)")
    p.set_defaults(func=cmd_drift)

    p = sub.add_parser(
        "install",
        parents=[bundle],
        help="copy (or link) the skills into an agent client's skills folder, without their evals/",
        description="Copies each skill (without evals/) into the folder the client reads, in the working directory's project or, with --user, in your home; "
        "records every file's hash in a manifest beside that folder for `mbskills verify`, and warns when the client also finds a skill in another of its folders.",
    )
    _skills_folder_options(p, "destination folder, instead of --client (default: the client's project folder)")
    p.add_argument("--link", action="store_true", help="symlink each skill folder instead of copying it (edits in the bundle show through; evals/ too)")
    p.add_argument("--force", action="store_true", help="overwrite installed copies that were changed since install")
    p.set_defaults(func=cmd_install)

    p = sub.add_parser(
        "eval",
        parents=[skill, transport, bundle],
        help="put the bundle's eval cases to a model, with and without the skills",
        description="Runs every case x condition x trial and writes one record each to OUT/records.jsonl as it completes. "
        "Rerunning the same command resumes: finished records are kept, failed ones retried, answered requests come from the cache. "
        "Exit 0 all records complete, 1 some ended in an error (see the summary), 2 unusable input, bad key or unknown model.",
    )
    p.add_argument("--model", required=True, help="openai:MODEL, anthropic:MODEL, or replay:DIR (recorded answers); with --agent gemini-cli, gemini:MODEL")
    p.add_argument("--agent", choices=defaults.AGENTS, default="api", help="api: the project's own tool loop (default); or each record one headless session of that agent client: codex (openai:, Responses), claude-code (anthropic:), gemini-cli (gemini:), qwen-code and opencode (openai:, Chat Completions)")
    p.add_argument("--agent-bin", help="the client's executable (default: the pinned one `bash run.sh test` installs in tests/clients, else the one on PATH)")
    p.add_argument("--agent-timeout", type=_finite(True), default=defaults.AGENT_TIMEOUT_S, help="seconds for one client session; past it its process group is killed and the record is an error (default: %(default)s)")
    p.add_argument("--isolate-network", action="store_true", help="run each client in its own network namespace (Linux, unshare) that reaches only --base-url (an http:// endpoint), relayed")
    p.add_argument("--conditions", default=defaults.CONDITIONS, help="comma list of baseline, skills, inline, placebo (a decoy skill beside the real ones), inline-placebo (a decoy body where inline puts the skill), and NAME@2, NAME@3, ... (an A/A arm repeating NAME) (default: %(default)s)")
    p.add_argument("--out", required=True, help="run directory (created; reused to resume)")
    p.add_argument("-j", "--jobs", type=_at_least(1), default=defaults.JOBS, help="records (so requests) in flight at once (default: %(default)s)")
    p.add_argument("--trials", type=_at_least(1), default=defaults.TRIALS, help="independent samples per case and condition (default: %(default)s)")
    p.add_argument("--case", action="append", help="only cases whose owner/id or id matches this glob (repeatable: any may match)")
    p.add_argument("--limit", type=_at_least(1), help="only the first N selected cases")
    p.add_argument("--api", choices=("chat", "responses"), help="OpenAI API: chat (default) or responses")
    p.add_argument("--base-url", help="an OpenAI-compatible server (vLLM, Ollama, llama.cpp, NIM) or a proxy")
    p.add_argument("--temperature", type=_finite(False))
    p.add_argument("--max-tokens", type=_at_least(1), help="output token limit per request")
    p.add_argument("--reasoning-effort", help="e.g. low, medium, high (models that take it)")
    p.add_argument("--seed", type=int, help="sampling seed (OpenAI Chat Completions and compatible servers)")
    p.add_argument("--max-turns", type=_at_least(1), default=defaults.MAX_TURNS, help="requests per record before the tool loop stops (default: %(default)s)")
    p.add_argument("--rate-limit-rounds", type=_at_least(0), default=defaults.RATE_LIMIT_ROUNDS, help="further waits on HTTP 429 after the SDK's retries, honouring Retry-After (default: %(default)s)")
    p.add_argument("--rate-limit-deadline", type=_finite(True), default=defaults.RATE_LIMIT_DEADLINE_S, help="seconds all those waits of one request may take together; past it the record ends in a rate_limit error (default: %(default)s)")
    p.add_argument("--pricing", help="YAML price table whose entries override the shipped one")
    p.add_argument("--progress", choices=("auto", "rich", "plain"), default="auto", help="progress display (default: a bar on a terminal, lines otherwise)")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser(
        "grade",
        parents=[judge, transport],
        help="grade a run's transcripts and write report.json, BENCHMARK.md, report.html, junit.xml",
        description="Grades stored records without asking the model again: transcript (routing, scripts, process behaviours), "
        "deterministic checks (evals/checks.yaml sidecars) and, with --judge, an LLM judge. "
        "Exit 0 gates hold, 1 a gate failed, 2 unusable input, 3 the run is incomplete (records missing, failed or still being written) or the judge could not grade some answers; "
        "with --allow-incomplete the gates decide instead.",
    )
    p.add_argument("run", help="run directory written by `mbskills eval`")
    p.add_argument("--bundle", help="the bundle whose eval files grade the run (default: the one recorded in run.json)")
    p.add_argument("--fail-under-uplift", type=float, help="gate: overall skills-minus-baseline uplift (0..1) below this fails")
    p.add_argument("--fail-under-pass", type=float, help="gate: overall pass rate under skills (0..1) below this fails")
    p.add_argument("--fail-on-regression", action="store_true", help="gate: any case whose pass rate under skills is below baseline fails")
    p.add_argument("--min-coverage", type=float, help="gate: every condition must count at least this fraction of its records (default: 1.0 whenever a gate is given)")
    p.add_argument("--allow-incomplete", action="store_true", help="grade a run with records missing, failed or still being written (the reports say so); the gates decide the exit")
    p.add_argument("--allow-changed-bundle", action="store_true", help="grade although the bundle's files changed since the run (every report says which, first); without it that is exit 2")
    p.add_argument("--min-cases", type=_at_least(1), default=defaults.MIN_CASES, help="gate: a pass-rate or uplift gate over fewer counted cases fails as underpowered (default: %(default)s)")
    _report_options(p)
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser(
        "compare",
        parents=[judge, transport],
        help="grade runs of the same cases (the API loop, agent clients) and print them side by side",
        description="Grades each run as `mbskills grade` does (writing its reports into its folder) and prints one row per run and condition: "
        "pass rate with coverage, how often the skill was read where it was offered, tokens and turns per record. Exit 0, 2 unusable input (runs of different cases), "
        "3 a run is incomplete (see --allow-incomplete) or the judge could not grade some answers.",
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories written by `mbskills eval` (with or without --agent)")
    p.add_argument("--out", help="also write comparison.json and comparison.md into this folder")
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    p.add_argument("--allow-incomplete", action="store_true", help="compare runs with records missing or failed (their coverage shows it)")
    _report_options(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser(
        "calibrate",
        parents=[judge, transport, bundle],
        help="measure the judge and the deterministic checks against hand-labelled answers",
        description="Exit 0 done, 1 kappa under --min-kappa, 2 unusable input, 3 the judge failed.",
    )
    p.add_argument("--answers", help="a folder of labelled answers to measure every written grader on, admitted or not (default: the held-out set and rounds, then dev and training, with the graders that decide)")
    p.add_argument("--out", help="also write the full result as JSON here")
    p.add_argument("--min-kappa", type=float, help="gate: Cohen's kappa of the judge (or of the checks without a judge) below this fails")
    p.add_argument("--admit", metavar="ROUND", help="measure every grader (check, field, execute) once on the fresh held-out round BUNDLE/evals/rounds/ROUND and admit the kinds that meet the bar (precision 98%% on pass and on fail) in BUNDLE/evals/admissions.yaml; a round already measured is refused")
    p.add_argument("--all-graders", action="store_true", help="on the default sets too, measure every written grader, admitted or not (never admits anything)")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser(
        "plan",
        help="size an eval before running it: the cases a paired uplift needs",
        description="The cases a paired eval (baseline against skills, case by case) needs to detect an uplift of --effect over --baseline-rate with the given power, at --trials per case and beside it at 1, 2, 3, 5 and 10, when a share --icc of a record's variance lies between cases. Normal approximation; see docs/evaluating.md. Exit 0, 2 unusable input.",
    )
    p.add_argument("--baseline-rate", type=_number(float, above=0.0), required=True, help="the pass rate expected without the skill, in (0, 1)")
    p.add_argument("--effect", type=_number(float), required=True, help="the uplift to detect, as a difference of rates (0.15 for +15 pts)")
    p.add_argument("--trials", type=_at_least(1), default=1, help="trials per case and condition (default: 1)")
    p.add_argument("--icc", type=_fraction, default=0.0, help="share of a record's variance between cases, 0..1 (default: 0)")
    p.add_argument("--alpha", type=_number(float, above=0.0), default=0.05, help="two-sided significance level (default: 0.05)")
    p.add_argument("--power", type=_number(float, above=0.0), default=0.8, help="probability of detecting the effect (default: 0.8)")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("show", help="print a run's records, or the transcripts of some")
    p.add_argument("run", help="run directory")
    p.add_argument("--case", help="glob over owner/id or id: print these transcripts")
    p.add_argument("--condition", help="only this condition")
    p.add_argument("--trial", type=_at_least(0), help="only this trial")
    p.add_argument("--full", action="store_true", help="tool results and system prompt in full")
    p.add_argument("--json", action="store_true", help="the records as JSON lines")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("uninstall", help="remove the skills mbskills installed in a folder, and its manifest")
    _skills_folder_options(p, "installed skills folder, instead of --client (default: the client's project folder)")
    p.add_argument("--force", action="store_true", help="remove copies that were changed since install too")
    p.set_defaults(func=cmd_uninstall)

    p = sub.add_parser("verify", help="report files added, changed or missing since install")
    _skills_folder_options(p, "installed skills folder, instead of --client (default: the client's project folder)")
    p.set_defaults(func=cmd_verify)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # The keys in the environment are secrets wherever they turn up: stdout and stderr
    # redact them (files redact them where they are written).
    for variable in KEY_VARIABLES.values():
        register_secret(os.environ.get(variable))
    streams = sys.stdout, sys.stderr
    redact_standard_streams()
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = streams


def _main(argv: list[str]) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as done:  # --help, --version, or a bad argument (already reported)
        return int(done.code or 0)
    args.command_line = "mbskills " + shlex.join(argv)
    try:
        return args.func(args)
    except MbskillsError as error:  # the one place errors become exit codes
        say(f"mbskills: error: {error.one_line()}")
        return error.exit_code
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
