"""The GPU checks of this skill (gpu/validate.sh runs them under torchrun, runner/claims/gpu.py
`run_check` calls them): the enablement block fitted to the GPUs present trains with DP
overlap, and with TP overlap where 2 or more GPUs and Transformer Engine are there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.claims.kit import check_losses, collect_warnings, ddp_of, expect, gpu_check, pretrain, qualname, smoke_base, te_available

ENABLE = "overlap-enable-override"
OVERLAP_ITERS = 6
DISABLING_TP_OVERLAP = "Disabling tensor parallel communication overlap"


def tp_size_for(world_size: int) -> int | None:
    """The tensor-parallel size the TP-overlap check uses on `world_size` GPUs (None: none fits)."""
    for tp in (4, 2):
        if world_size >= tp and world_size % tp == 0:
            return tp
    return None


def overlap_config(ctx: Any, world_size: int, *, tp: int = 1, te: bool | None = None, train_iters: int = OVERLAP_ITERS) -> Any:
    """The overlap skill's enablement block on the tiny GPT. The block's layout (TP=4, SP,
    PP=4, VPP=2) is for 64 GPUs; it is fitted to `world_size` (TP=`tp`, SP when TP > 1, no
    pipeline) and everything else the block sets is kept as it is."""
    cfg = ctx.sibling(ENABLE).apply(smoke_base(world_size, train_iters=train_iters, tp=tp, te=te))
    cfg.model.tensor_model_parallel_size = tp
    cfg.model.sequence_parallel = tp > 1
    cfg.model.pipeline_model_parallel_size = 1
    cfg.model.virtual_pipeline_model_parallel_size = None
    return cfg



@gpu_check("overlap-dp", "overlap-gpu-dp-overlap-trains")
def check_overlap_dp(ctx: Any, world_size: int, workdir: Path) -> dict[str, Any]:
    from megatron.core.distributed import DistributedDataParallel
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    cfg = overlap_config(ctx, world_size, tp=1)
    run = pretrain(cfg)
    losses = check_losses(run, OVERLAP_ITERS, "training")
    expect(all(isinstance(m, DistributedDataParallel) for m in run.model), f"the model is wrapped by {[qualname(m) for m in run.model]}, not Megatron's DistributedDataParallel")
    optimizers = list(getattr(run.optimizer, "chained_optimizers", None) or [run.optimizer])
    expect(any(isinstance(o, DistributedOptimizer) for o in optimizers), f"the optimizer is {[qualname(o) for o in optimizers]}, not the distributed optimizer")
    ddp = ddp_of(run.model)
    data_parallel = int(run.cfg.data_parallel_size)
    details = {"world_size": world_size, "data_parallel_size": data_parallel, "ddp": ddp, "optimizer": [qualname(o) for o in optimizers]}
    if data_parallel > 1:
        expect(ddp.get("overlap_grad_reduce") is True and ddp.get("overlap_param_gather") is True, f"with data-parallel size {data_parallel} the wrapped model trained with {ddp}, not with grad-reduce and param-gather overlap")
    else:
        details["note"] = "data-parallel size 1: Bridge turns grad-reduce and param-gather overlap off (nothing to overlap); with 2 or more GPUs they train on"
        expect(ddp.get("overlap_grad_reduce") is False, f"data-parallel size 1 trained with {ddp}; the skill says Bridge turns DP overlap off there")
    return {"losses": losses, "details": details}



# CUDA_DEVICE_MAX_CONNECTIONS=1: what TP overlap on Hopper runs with
@gpu_check("overlap-tp", "overlap-gpu-tp-overlap", min_gpus=2, needs_te=True, divisible_by=2, env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"})
def check_overlap_tp(ctx: Any, world_size: int, workdir: Path) -> dict[str, Any]:
    tp = tp_size_for(world_size)
    expect(tp is not None, f"no tensor-parallel size of 2 or 4 divides {world_size} GPUs")
    expect(te_available(), "Transformer Engine is not installed")
    cfg = overlap_config(ctx, world_size, tp=tp, te=True)
    with collect_warnings() as warnings:
        run = pretrain(cfg)
    losses = check_losses(run, OVERLAP_ITERS, "training")
    disabled = [w for w in warnings if DISABLING_TP_OVERLAP in w]
    expect(not disabled, f"Bridge switched TP overlap off: {disabled[0] if disabled else ''}")
    expect(run.cfg.model.tp_comm_overlap is True and run.cfg.model.sequence_parallel is True, f"training ran with tp_comm_overlap={run.cfg.model.tp_comm_overlap}, sequence_parallel={run.cfg.model.sequence_parallel}")
    return {"losses": losses, "details": {"world_size": world_size, "tensor_parallel_size": tp, "tp_comm_overlap": True}}
