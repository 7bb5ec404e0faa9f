"""The front-matter description is a claim too (metadata.description-claim): every sentence
is read here, every name it gives is looked up in the installed library, every error it
quotes is found among the messages Bridge and megatron-core raise, and every behaviour it
names is the one a checked section of this skill states."""

from __future__ import annotations

import dataclasses
import typing

from runner.claims.kit import Context, claim, quote_not_raised, raised_messages, resolve_symbol, tiny_config

from .fsdp import shipped_by
from .fsdp_topics import strategies

PACKAGES = ("megatron.bridge.training", "megatron.core.distributed", "megatron.core.transformer")



@claim("fsdp-description")
def description(ctx: Context) -> None:
    from megatron.bridge.training.config import CheckpointConfig
    from megatron.core.distributed import DistributedDataParallelConfig

    cfg = tiny_config()
    ddp_fields = {f.name for f in dataclasses.fields(DistributedDataParallelConfig)}
    formats = typing.get_args(typing.get_type_hints(CheckpointConfig)["ckpt_format"])

    a = ctx.read(
        "Enable, configure and debug Megatron FSDP (Megatron-Core's fully sharded data parallel) in NVIDIA Megatron-Bridge:"
        " the {override:word} override, {strategy:word}, HSDP, NCCL user buffers, {fmt:word} checkpoints and the errors they raise."
    )
    wrapper = resolve_symbol("megatron.core.distributed.fsdp.mcore_fsdp_adapter.FullyShardedDataParallel")
    ctx.expect(shipped_by(wrapper, "megatron-core"), "Megatron FSDP's wrapper is not megatron-core's")
    ctx.expect(a.override == "cfg.ddp" and isinstance(cfg.ddp, DistributedDataParallelConfig), f"{a.override} is not the DDP config")
    ctx.expect(a.strategy in ddp_fields and a.strategy.endswith("sharding_strategy"), f"{a.strategy} is not the DDP config's sharding strategy")
    ctx.expect(a.fmt in formats and "fsdp" in a.fmt, f"{a.fmt} is not the Megatron FSDP checkpoint format among {formats}")
    # HSDP and NCCL user buffers: the fields the skill's sections on them are about
    ctx.expect({"num_distributed_optimizer_instances", "outer_dp_sharding_strategy", "nccl_ub"} <= ddp_fields, "the DDP config lacks the HSDP or user-buffer fields")

    b = ctx.read(
        "Use when a user asks how to turn on Megatron FSDP ({flag:word}), wants to shard optimizer state, gradients and"
        " parameters across data-parallel ranks, moves from DDP to FSDP, sees {oom:word} run out"
        " of memory, sets {f1:word}, {f2:word} or {f3:word}, exports an {fmt:word} checkpoint to Hugging Face, or hits errors"
        " such as \"{e1:quote}\", \"{e2:quote}\", \"{e3:quote}\" or \"{e4:quote}\"."
    )
    ctx.expect(b.flag == "use_megatron_fsdp" and b.flag in ddp_fields, f"{b.flag} is not the switch")
    # optimizer state, gradients, parameters: the three sharding levels megatron-core offers
    ctx.expect({"optim", "optim_grads", "optim_grads_params"} <= set(strategies()), f"megatron-core's strategies are {strategies()}")
    memory = ctx.sibling("fsdp-optim-grads-memory").section.text
    ctx.expect(b.oom in strategies() and f'data_parallel_sharding_strategy="{b.oom}"` can run out of memory' in memory, f"the memory section is not about {b.oom} running out of memory")
    for field in (b.f1, b.f2, b.f3):
        ctx.expect(field in ddp_fields, f"{field} is not a DDP config field")
    ctx.expect(len({b.f1, b.f2, b.f3}) == 3, "the description names a field twice")
    ctx.expect(b.fmt == a.fmt, f"the export names {b.fmt}, the checkpoints {a.fmt}")
    export = ctx.sibling("fsdp-checkpoint-hf-export").section.text
    ctx.expect(f"`{b.fmt}` checkpoint" in export, "the export section is not about that format")
    for quoted in (b.e1, b.e2, b.e3, b.e4):
        problem = quote_not_raised(quoted, *PACKAGES)
        ctx.expect(problem is None, problem or "")
    ctx.expect(len({b.e1, b.e2, b.e3, b.e4}) == 4, "the description quotes an error twice")

    c = ctx.read("Not for PyTorch FSDP2 ({fsdp2:word}) on its own, nor for TP/PP/DP or MoE expert-parallel communication overlap.")
    ctx.expect(c.fsdp2 in {f.name for f in dataclasses.fields(type(cfg.dist))} and "torch_fsdp2" in c.fsdp2, f"{c.fsdp2} is not the PyTorch FSDP2 switch of cfg.dist")
