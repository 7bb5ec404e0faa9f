"""The front-matter description is a claim too (metadata.description-claim): every sentence
is read here, every name it gives is looked up in the installed library and every assertion
it quotes is found among the messages Bridge and megatron-core raise."""

from __future__ import annotations

import dataclasses

from runner.claims.kit import Context, claim, quote_not_raised, raised_messages, resolve_symbol, source_of

from .moe import comm_overlap_module

PACKAGES = ("megatron.bridge.training", "megatron.core.distributed", "megatron.core.transformer")



@claim("moe-description")
def description(ctx: Context) -> None:
    module = comm_overlap_module()
    overlap_fields = {f.name for f in dataclasses.fields(module.CommOverlapConfig)}

    a = ctx.read(
        "Enable and debug MoE expert-parallel (EP) all-to-all overlap in NVIDIA Megatron-Bridge: {f1:word} and {f2:word} set"
        " through {cls:word}, the {d1:word} or {d2:word} token dispatcher, and the DeepEP and HybridEP backends ({fn:word})."
    )
    ctx.expect(a.cls == "CommOverlapConfig" and {a.f1, a.f2} <= overlap_fields, f"{a.f1}/{a.f2} are not fields of {a.cls}")
    ctx.expect("moe" in a.f1 and "expert_parallel" in a.f1, f"{a.f1} is not the EP overlap switch")
    accepted = [m for m in raised_messages(*PACKAGES) if m.startswith(f"{a.f1} is only supported when moe_token_dispatcher_type")]
    ctx.expect(len(accepted) == 1 and f"'{a.d1}' or '{a.d2}'" in accepted[0], f"Bridge's dispatcher assertion does not accept exactly {a.d1} or {a.d2}: {accepted}")
    backend = resolve_symbol(f"megatron.bridge.training.flex_dispatcher_backend.{a.fn}")
    text = source_of(backend)
    ctx.expect("deepep" in text and "hybridep" in text, f"{a.fn} does not set up the DeepEP and HybridEP backends")

    b = ctx.read(
        "Use when a user wants to hide the MoE dispatch/combine all-to-all behind compute, asks why the flags came out"
        " {value:bool}, which GPUs DeepEP or HybridEP run on, or hits an assertion such as \"{e1:quote}\", \"{e2:quote}\","
        " \"{e3:quote}\", \"{e4:quote}\", \"{e5:quote}\" or \"{e6:quote}\"."
    )
    derive = source_of(module.CommOverlapConfig._get_model_comm_overlap_cfgs)
    ctx.expect(f"comm_overlap_cfg.{a.f1} = {b.value}" in derive and f"comm_overlap_cfg.{a.f2} = {b.value}" in derive, f"setup() does not start both flags at {b.value}")
    ctx.expect("DeepEP is only applicable to" in text and "HybridEP is only applicable for" in text, f"{a.fn} does not check the GPU")
    quotes = [b.e1, b.e2, b.e3, b.e4, b.e5, b.e6]
    for quoted in quotes:
        problem = quote_not_raised(quoted, *PACKAGES)
        ctx.expect(problem is None, problem or "")
    ctx.expect(len(set(quotes)) == len(quotes), "the description quotes an assertion twice")

    c = ctx.read("Not for tensor-, data- or pipeline-parallel overlap ({o1:word}, {o2:word}, {o3:word}), nor for Megatron FSDP.")
    for field, kind in ((c.o1, "tp_"), (c.o2, "grad"), (c.o3, "p2p")):
        ctx.expect(field in overlap_fields and kind in field, f"{field} is not the {kind} overlap field of {a.cls}")
