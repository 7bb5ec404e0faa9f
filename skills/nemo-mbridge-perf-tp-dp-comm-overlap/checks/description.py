"""The front-matter description is a claim too (metadata.description-claim): every sentence
is read here, every name it gives is looked up in the installed library, every message it
quotes is found among those Bridge and megatron-core raise or log, and every behaviour it
names is the one a checked section of this skill states."""

from __future__ import annotations

import dataclasses
import inspect

from runner.claims.kit import Context, claim, quote_not_raised, raised_messages

from .overlap import comm_overlap_module

PACKAGES = ("megatron.bridge.training", "megatron.core.distributed", "megatron.core.pipeline_parallel")


@claim("overlap-description")
def description(ctx: Context) -> None:
    from megatron.core.transformer import TransformerConfig

    module = comm_overlap_module()
    fields = {f.name for f in dataclasses.fields(module.CommOverlapConfig)}
    model_fields = {f.name for f in dataclasses.fields(TransformerConfig)}

    a = ctx.read(
        "Enable and debug tensor-parallel (TP), data-parallel (DP) and pipeline-parallel (PP) communication overlap in NVIDIA"
        " Megatron-Bridge through {cls:word}: {tp:word} with sequence parallelism and userbuffers presets, {g1:word}, {g2:word}"
        " and {bs:word} with the distributed optimizer, {p1:word} and {p2:word} with virtual pipeline stages."
    )
    ctx.expect(a.cls == "CommOverlapConfig", f"{a.cls} is not Bridge's overlap config")
    for name in (a.tp, a.g1, a.g2, a.bs, a.p1, a.p2):
        ctx.expect(name in fields, f"{name} is not a field of {a.cls}")
    derive = " ".join(inspect.getsource(module.CommOverlapConfig).split())
    ctx.expect("elif not model_cfg.sequence_parallel:" in derive and "TransformerLayerTPOverlapCfg" in derive, "TP overlap does not go with sequence parallelism and userbuffers presets")
    ctx.expect("and ddp_config.use_distributed_optimizer" in derive and all(f"comm_overlap_cfg.{n} = " in derive for n in (a.g1, a.g2, a.bs)), f"{a.g1}/{a.g2}/{a.bs} are not derived with the distributed optimizer")
    ctx.expect(all(f"comm_overlap_cfg.{n} = " in derive for n in (a.p1, a.p2)) and "virtual_pipeline_model_parallel_size" in derive, f"{a.p1}/{a.p2} are not derived with virtual pipeline stages")

    b = ctx.read(
        "Use when a user wants to hide communication behind compute, asks why TP comm overlap was disabled (\"{warning:quote}\"),"
        " why DP overlap settings did not apply or overlap nothing ({env:word}), why {bs:word} is ignored, why {p3:word} fails at"
        " the first step without VPP, why TP overlap start-up fails in MPI ({boot:word}), what Bridge sets for PP/VPP p2p overlap,"
        " or where {env2:word} and LayerNorm SM margin belong."
    )
    problem = quote_not_raised(b.warning, *PACKAGES)
    ctx.expect(b.warning.endswith("...") and problem is None, problem or f'"{b.warning}" is a whole message, not the start the description quotes')
    name, _, value = b.env.partition("=")
    ctx.expect(f"`{name}={value}`" in ctx.sibling("overlap-max-connections-mcore").section.text, f"the DP overlap section is not about {b.env}")
    ctx.expect(b.bs == a.bs and f"`{b.bs}` only counts with" in ctx.sibling("overlap-bucket-size-default").section.text, f"no section says when {b.bs} is ignored")
    without_vpp = ctx.sibling("overlap-p2p-without-vpp").section.text
    ctx.expect(b.p3 == a.p1 and f"`{b.p3}=True` without virtual pipeline stages fails at the first step" in without_vpp, f"no section says {b.p3} fails at the first step without VPP")
    ctx.expect(any("Non-interleaved pipeline parallelism does not support overlapping p2p communication" in m for m in raised_messages(*PACKAGES)), "megatron-core no longer refuses p2p overlap without interleaving")
    ctx.expect(b.boot in fields and "bootstrap" in b.boot and f".{b.boot}`" in ctx.sibling("overlap-tp-bootstrap-backend").section.text, f"{b.boot} is not the bootstrap backend the start-up section names")
    ctx.expect(b.env2 == name and f"`{name}`" in ctx.sibling("overlap-env-vars").section.text and "LAYERNORM_SM_MARGIN" in ctx.sibling("overlap-env-vars").section.text, f"the launch section does not place {b.env2} and the LayerNorm SM margins")

    c = ctx.read("Not for MoE expert-parallel all-to-all overlap ({moe:word}: the MoE EP skill), nor for Megatron FSDP.")
    ctx.expect(c.moe in fields and c.moe in model_fields and "moe" in c.moe, f"{c.moe} is not the MoE EP overlap switch")
