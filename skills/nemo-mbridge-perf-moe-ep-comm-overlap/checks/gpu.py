"""The GPU check of this skill (gpu/validate.sh runs it under torchrun, runner/claims/gpu.py
`run_check` calls it): the enablement block, fitted to the GPUs present, trains a tiny MoE
GPT with the EP all-to-all overlap on. Its CPU side is the claim moe-gpu-overlap-trains."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.claims.kit import Context, check_losses, claim, expect, gpu_check, pretrain, resolve, smoke_base, source_of

ENABLE = "moe-enable-override"
FLAG = "overlap_moe_expert_parallel_comm"
ITERS = 6


def moe_config(ctx: Any, world_size: int, ep: int, *, te: bool | None = None) -> Any:
    """The skill's enablement block on the tiny GPT, with EP fitted to the GPUs present (the
    block's EP=4 is for 8 GPUs); everything else the block sets is kept."""
    cfg = ctx.sibling(ENABLE).apply(smoke_base(world_size, train_iters=ITERS, te=te))
    cfg.model.expert_model_parallel_size = ep
    return cfg


@gpu_check("moe-ep-overlap", "moe-gpu-overlap-trains", min_gpus=2, divisible_by=2)
def check_moe_overlap(ctx: Any, world_size: int, workdir: Path) -> dict[str, Any]:
    cfg = moe_config(ctx, world_size, 2)
    run = pretrain(cfg)
    losses = check_losses(run, ITERS, "training")
    expect(getattr(run.cfg.model, FLAG) is True, f"training ran with {FLAG}={getattr(run.cfg.model, FLAG)}")
    return {"losses": losses, "details": {"world_size": world_size, "expert_model_parallel_size": 2, FLAG: True, "dispatcher": run.cfg.model.moe_token_dispatcher_type}}


@claim("moe-gpu-overlap-trains", tier="gpu")
def gpu_overlap_trains(ctx: Context) -> None:
    """CPU side of the GPU run: the config it trains, built from the skill's block, passes
    Bridge's validation with the overlap on, and the GPU check asserts what the sentence says."""
    from runner.claims import kit

    r = ctx.read("On GPUs, the block trains: on {gpus:int} GPUs with EP={ep:int}, a short `{entry:code}` run logs a finite loss at its last iteration with `{flag:code}` on.")
    check = kit.registered_gpu_checks().get("moe-ep-overlap")
    ctx.expect(check is not None and check.min_gpus == r.gpus and check.claim == ctx.section.claim_id, f"the GPU check does not start at {r.gpus} GPUs")
    body = source_of(check_moe_overlap)
    ctx.expect(f"moe_config(ctx, world_size, {r.ep})" in body and f"FLAG) is True" in body and r.flag == FLAG, f"the GPU check does not train EP={r.ep} and assert {r.flag}")
    ctx.expect(r.entry == "pretrain()" and "bridge_pretrain(cfg, forward_step" in source_of(kit.pretrain), f"the GPU check does not run Bridge's {r.entry}")
    ctx.expect("finite(losses[-1])" in source_of(kit.check_losses), "the GPU check does not check the last loss is finite")
    cfg = moe_config(ctx, r.gpus, r.ep, te=False)
    resolve(cfg, world_size=r.gpus)
    ctx.expect(getattr(cfg.model, FLAG) is True, f"the GPU run's config resolves {FLAG}={getattr(cfg.model, FLAG)}")
    ctx.expect(cfg.train.micro_batch_size * cfg.data_parallel_size == cfg.train.global_batch_size, "the GPU run's batch does not fit its data-parallel size")
