"""One GPU check, run by every rank that torchrun starts (gpu/launch.py starts it).

    torchrun --standalone --nproc_per_node=N gpu/smoke.py --check CHECK --out-dir DIR --workdir DIR

Each rank initialises NCCL on its own GPU, trains with runner.claims.gpu.run_check, and
writes DIR/<check>.rank<R>.json: one result entry (runner/core/schemas/gpu-results.schema.json,
`checks[]`). A crash becomes an entry with status "error" and the place it happened, so the
launcher can tell what went wrong even when rank 0 was killed while waiting on a peer.
Exit status: 0 the check ran (passed or failed), 1 it crashed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from runner.claims.gpu import discover  # noqa: E402 - stdlib only; the heavy imports come below

# ModelOpt (imported by Bridge's gpt_step and checkpointing) imports pulp at module level for
# a NAS searcher that pretrain() never runs; pulp is not carried (16 MiB of solver binaries).
ABSENT_OK = ("pulp",)


def _plain(value):
    """JSON-safe: non-finite floats become null, anything unknown its str()."""
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


def _write(path: Path, entry: dict) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(_plain(entry), indent=2, allow_nan=False) + "\n", "utf-8")
    os.replace(temporary, path)


def _crash_entry(name: str, bundle: Path, error: BaseException) -> dict:
    check = discover(bundle)[name]
    frames = traceback.extract_tb(error.__traceback__)
    where = f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    message = " ".join(f"{type(error).__name__}: {error}".split())
    return {
        "skill": check.skill,
        "claim": check.claim,
        "check": name,
        "status": "error",
        "reason": (message[:400] + where),
        "losses": [],
        "seconds": 0.0,
        "details": {"traceback": traceback.format_exception(error)[-12:]},
    }


def _run(name: str, bundle: Path, workdir: Path, rank: int, local_rank: int, world: int) -> dict:
    from runner.claims.environment import install_absent_placeholders, install_te_placeholders

    te_placeholders = install_te_placeholders()
    absent = install_absent_placeholders(ABSENT_OK)

    import torch
    import torch.distributed as dist

    torch.cuda.set_device(local_rank)
    # Initialised here, so pretrain() leaves the process group alone and the FSDP check can
    # call it twice (train and save, then load and resume).
    dist.init_process_group("nccl", timeout=datetime.timedelta(minutes=5), device_id=torch.device("cuda", local_rank))
    try:
        from runner.claims.gpu import run_check

        entry = run_check(name, bundle, workdir, world)
        details = entry.setdefault("details", {})
        details["placeholders"] = (["megatron.bridge TE-only modules (no Transformer Engine)"] if te_placeholders else []) + absent
        dist.barrier()
        return entry
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu/smoke.py", description=__doc__.splitlines()[0])
    parser.add_argument("--check", required=True, help="a GPU check a skill of the bundle registers")
    parser.add_argument("--out-dir", required=True, help="where each rank writes <check>.rank<R>.json")
    parser.add_argument("--workdir", required=True, help="scratch space shared by the ranks (checkpoints)")
    parser.add_argument("--bundle", default=str(REPO), help="the bundle whose SKILL.md blocks configure the run")
    args = parser.parse_args(argv)
    if args.check not in discover(Path(args.bundle)):
        parser.error(f"--check {args.check}: no skill of {args.bundle} registers it (have: {', '.join(sorted(discover(Path(args.bundle))))})")
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:
        entry = _run(args.check, Path(args.bundle), Path(args.workdir), rank, local_rank, world)
        code = 0
    except BaseException as error:  # noqa: BLE001 - SystemExit from the training loop included
        entry, code = _crash_entry(args.check, Path(args.bundle), error), 1
        traceback.print_exc()
    entry["rank"] = rank
    _write(out / f"{args.check}.rank{rank}.json", entry)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown: NCCL and dataloader threads can hang it


if __name__ == "__main__":
    main()
