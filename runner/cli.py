"""The `mbskills` command. Exit codes: 0 clean, 1 findings or differences, 2 unusable input."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import __version__
from .findings import UsageError

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2


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


def cmd_check(args: argparse.Namespace) -> int:
    import time

    bundle = _bundle(args)
    unknown = set(args.skill or ()) - bundle.skill_names()
    if unknown:
        raise UsageError(f"no such skill in {bundle.root}: {', '.join(sorted(unknown))}")
    start = time.perf_counter()
    from .claims.run import PASSED, format_table, run_checks, write_cards, write_reports
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
    return EXIT_OK if all(r.status == PASSED for r in results) else EXIT_FINDINGS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mbskills", description="Agent skills for Megatron-Bridge: validate them, check their claims against the pinned release, install and verify them.")
    parser.add_argument("--version", action="version", version=f"mbskills {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="check a bundle, a skill or an evals file", description="Findings print as path:line: rule-id: message. Exit 0 clean, 1 findings, 2 unusable input.")
    p.add_argument("path", nargs="?", default=".", help="bundle folder, skill folder, SKILL.md, card.yaml or evals .json (default: .)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("check", help="run every SKILL.md claim against the installed Megatron-Bridge", description="Runs each claim's check in one process. Exit 0 all passed, 1 a claim failed, 2 unusable input or no Megatron-Bridge.")
    p.add_argument("--skill", action="append", help="only this skill (repeatable)")
    p.add_argument("--claim", default="*", help="only claims whose id matches this glob")
    p.add_argument("--out", default="out/claims", help="folder for claims.json and junit.xml (default: out/claims)")
    p.add_argument("--write-cards", action="store_true", help="record status, versions and date in each skill's card.yaml")
    p.add_argument("--bundle", help="the bundle to check (default: the bundle around the working directory, else this package's)")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("install", help="copy (or link) the skills into an agent's skills folder, without their evals/")
    p.add_argument("dest", nargs="?", default=".agents/skills", help="destination folder (default: .agents/skills)")
    p.add_argument("--link", action="store_true", help="symlink each skill's files instead of copying them")
    p.add_argument("--force", action="store_true", help="overwrite installed copies that were changed since install")
    p.add_argument("--bundle", help="the bundle to install from (default: the bundle around the working directory, else this package's)")
    p.set_defaults(func=cmd_install)

    p = sub.add_parser("verify", help="report files added, changed or missing since install")
    p.add_argument("dest", nargs="?", default=".agents/skills")
    p.set_defaults(func=cmd_verify)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as error:
        print(f"mbskills: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


def entry() -> None:
    """Console entry point. After `check`, skip the interpreter's teardown of torch and
    megatron (about 4 s on a 2-core machine): every report is written and flushed by then."""
    code = main()
    if "torch" in sys.modules:
        import logging
        import os

        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    entry()
