"""The GPU check of this skill (gpu/validate.sh runs it under torchrun, runner/claims/gpu.py
`run_check` calls it): Megatron FSDP trains a tiny GPT with the skill's enablement block,
saves a checkpoint mid-run and resumes from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.claims.kit import check_losses, close, ddp_of, expect, finite, fingerprint, gpu_check, pretrain, qualname, recorder, smoke_base

ENABLE = "fsdp-enable-override"
FSDP_SAVE_AT, FSDP_ITERS = 4, 8  # train 8 saving at 4, then resume from 4 and train to 8 again
# A resumed run must start from the saved weights: their fingerprint (sum and sum of squares
# of every parameter, gathered in full) equals the first run's at the save, and differs
# from the initial weights'; and its first loss matches the first run's loss at that
# iteration, the same batch on the same weights, within this much.
FINGERPRINT_RTOL = 1e-5
RESUME_LOSS_ATOL = 0.02


def fsdp_configs(ctx: Any, world_size: int, checkpoints: Path, *, te: bool | None = None) -> tuple[Any, Any]:
    """Two runs with the FSDP skill's enablement block: train to FSDP_ITERS saving every
    FSDP_SAVE_AT iterations, then load iteration FSDP_SAVE_AT and train to FSDP_ITERS again."""
    enable = ctx.sibling(ENABLE)
    first = enable.apply(smoke_base(world_size, train_iters=FSDP_ITERS, te=te))
    first.checkpoint.save = str(checkpoints)
    first.checkpoint.save_interval = FSDP_SAVE_AT
    second = enable.apply(smoke_base(world_size, train_iters=FSDP_ITERS, te=te))
    second.checkpoint.load = str(checkpoints)
    second.checkpoint.ckpt_step = FSDP_SAVE_AT
    return first, second



@gpu_check("fsdp", "fsdp-gpu-train-save-resume")
def check_fsdp(ctx: Any, world_size: int, workdir: Path) -> dict[str, Any]:
    import torch.distributed as dist
    from megatron.core.distributed.fsdp.mcore_fsdp_adapter import FullyShardedDataParallel

    checkpoints = workdir / "fsdp-checkpoints"
    first, second = fsdp_configs(ctx, world_size, checkpoints)
    trained = pretrain(first, recorder(fingerprint_at=(FSDP_SAVE_AT,), fingerprint_start=True))
    wrappers = [qualname(m) for m in trained.model]
    expect(all(isinstance(m, FullyShardedDataParallel) for m in trained.model), f"the model is wrapped by {wrappers}, not megatron.core.distributed.fsdp.mcore_fsdp_adapter.FullyShardedDataParallel")
    expect(trained.cfg.checkpoint.ckpt_format == "fsdp_dtensor", f"training ran with ckpt_format {trained.cfg.checkpoint.ckpt_format!r}")
    before = check_losses(trained, FSDP_ITERS, "first run")

    saved = checkpoints / f"iter_{FSDP_SAVE_AT:07d}"
    dist.barrier()
    expect(saved.is_dir(), f"no checkpoint at {saved}")
    expect((saved / ".metadata").is_file(), f"{saved} is not in fsdp_dtensor (PyTorch DCP) format: no .metadata file")
    from megatron.bridge.training.checkpointing import _get_checkpoint_format

    found_format = _get_checkpoint_format(str(saved))
    expect(found_format == "fsdp_dtensor", f"Bridge reads the saved checkpoint as {found_format!r}, not fsdp_dtensor")

    resumed = pretrain(second, recorder(fingerprint_start=True))
    expect(resumed.start_step == FSDP_SAVE_AT, f"the resumed run started at iteration {resumed.start_step}, not {FSDP_SAVE_AT}: the checkpoint was not loaded")
    expect(all(isinstance(m, FullyShardedDataParallel) for m in resumed.model), "the resumed model is not wrapped by FullyShardedDataParallel")
    after = resumed.ordered()
    expect(len(after) == FSDP_ITERS - FSDP_SAVE_AT, f"the resumed run logged {len(after)} iterations, expected {FSDP_ITERS - FSDP_SAVE_AT}")
    expect(finite(after[-1]), f"the resumed run's last loss is not finite ({after[-1]})")

    initial, at_save, loaded = trained.fingerprints[0], trained.fingerprints[FSDP_SAVE_AT], resumed.fingerprints[FSDP_SAVE_AT]
    stopped, again = before[FSDP_SAVE_AT], after[0]  # iteration SAVE_AT + 1 in each run: the same batch
    details = {
        "world_size": world_size,
        "wrapper": wrappers[0],
        "ckpt_format": found_format,
        "checkpoint": saved.name,
        "resumed_at_iteration": resumed.start_step,
        "first_run_losses": before,
        "resumed_losses": after,
        "weights_fingerprint": {"initial": initial, "saved": at_save, "loaded": loaded},
        "ddp": ddp_of(trained.model),
    }
    expect(not close(initial, at_save, FINGERPRINT_RTOL), f"the weights did not change in {FSDP_SAVE_AT} iterations (fingerprint {initial})")
    expect(close(at_save, loaded, FINGERPRINT_RTOL), f"the resumed run's weights {loaded} are not the ones saved at iteration {FSDP_SAVE_AT} {at_save} (initial weights: {initial})")
    expect(finite(stopped) and finite(again), f"non-finite loss at iteration {FSDP_SAVE_AT + 1}: {stopped} in the first run, {again} resumed")
    gap = abs(again - stopped)
    details["resume_loss_gap"] = gap
    expect(gap <= RESUME_LOSS_ATOL, f"iteration {FSDP_SAVE_AT + 1} had loss {stopped:.4f} in the first run and {again:.4f} after resuming from iteration {FSDP_SAVE_AT}: off by {gap:.4f} (more than {RESUME_LOSS_ATOL})")
    return {"losses": before + after, "details": details}
