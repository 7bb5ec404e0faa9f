"""Checks for skills/nemo-mbridge-perf-tp-dp-comm-overlap (claim ids match its SKILL.md markers)."""

from __future__ import annotations

import dataclasses
import os
from unittest import mock

from .environment import collect_warnings, preserved_environ, resolve, tiny_config
from .registry import Context, claim, resolve_symbol, source_of

SKILL = "nemo-mbridge-perf-tp-dp-comm-overlap"
BUCKET = 128 * 1024 * 1024


def overlap(**fields):
    from megatron.bridge.training.comm_overlap import CommOverlapConfig

    return CommOverlapConfig(**fields)


@claim(SKILL, "overlap-enable-override")
def enable_override(ctx: Context) -> None:
    cfg = ctx.apply(tiny_config(tp=1, pp=1))
    ctx.expect(cfg.model.tensor_model_parallel_size == 4 and cfg.model.pipeline_model_parallel_size == 4, "the block no longer sets TP=4 and PP=4")
    cfg.model.num_layers = 8  # the tiny model needs one layer per virtual stage
    with collect_warnings() as warnings:
        resolve(cfg, world_size=64)
    ctx.expect(cfg.data_parallel_size == 4, f"world size 64 with TP=4, PP=4 gave DP={cfg.data_parallel_size}")
    ctx.expect(cfg.model.overlap_p2p_comm is True and cfg.model.batch_p2p_comm is False, "PP overlap was not derived")
    ctx.expect(cfg.ddp.overlap_grad_reduce and cfg.ddp.overlap_param_gather and cfg.ddp.align_param_gather, "DP overlap was not derived")
    ctx.expect(cfg.ddp.bucket_size == BUCKET, f"bucket_size is {cfg.ddp.bucket_size}")
    from megatron.bridge.training import comm_overlap

    if not comm_overlap.HAVE_TE:  # what a CPU machine can show about the TP part
        ctx.expect(any("TE not detected" in w for w in warnings), "TP overlap was not switched off with the TE warning")


@claim(SKILL, "overlap-applied-at-runtime-update")
def applied_at_runtime_update(ctx: Context) -> None:
    cfg = tiny_config(distributed_optimizer=True)
    cfg.comm_overlap = overlap(tp_comm_overlap=False)
    ctx.expect(cfg.ddp.bucket_size is None and not cfg.ddp.overlap_grad_reduce, "assigning cfg.comm_overlap already changed cfg.ddp")
    resolve(cfg, world_size=8)
    ctx.expect(cfg.ddp.bucket_size == BUCKET and cfg.ddp.overlap_grad_reduce, "runtime_config_update did not apply the overlap config")
    body = source_of(resolve_symbol("megatron.bridge.training.config.runtime_config_update"))
    steps = ["apply_environment_variables(cfg)", "cfg.mixed_precision.setup(", "cfg.set_data_parallel_size()", "cfg.comm_overlap.finalize()", "cfg.comm_overlap.setup(", "cfg.validate()"]
    positions = [body.find(step) for step in steps]
    ctx.expect(all(p >= 0 for p in positions) and positions == sorted(positions), f"runtime_config_update no longer runs {' -> '.join(steps)} in that order")
    ctx.says("runtime_config_update(cfg)", "CommOverlapConfig.finalize()", "cfg.validate()")


@claim(SKILL, "overlap-tp-gates")
def tp_gates(ctx: Context) -> None:
    from megatron.bridge.training import comm_overlap

    cases = [
        ("Disabling tensor parallel communication overlap due to TP size < 2.", dict(tp=1, sp=False), True),
        ("Disabling tensor parallel communication overlap due to sequence_parallel=False.", dict(tp=2, sp=False), True),
        ("Disabling tensor parallel communication overlap due to TE not detected.", dict(tp=2, sp=True), False),
    ]
    cases.append((None, dict(tp=2, sp=True), True))  # the fix: TP >= 2, SP on, TE present
    for message, layout, te in cases:
        cfg = tiny_config(distributed_optimizer=True, **layout)
        cfg.comm_overlap = overlap(tp_comm_overlap=True)
        with mock.patch.object(comm_overlap, "HAVE_TE", te), collect_warnings() as warnings, preserved_environ():
            os.environ["WORLD_SIZE"] = "8"
            cfg.set_data_parallel_size()
            cfg.comm_overlap.finalize()
            cfg.comm_overlap.setup(cfg.model, cfg.optimizer, cfg.ddp)
        if message is None:
            ctx.expect(cfg.model.tp_comm_overlap is True and not any("Disabling" in w for w in warnings), f"TP overlap did not stay on with TP=2, SP and TE: {warnings}")
            continue
        ctx.expect(message in warnings, f"{layout} did not log {message!r}; got {warnings}")
        ctx.expect(cfg.model.tp_comm_overlap is False, f"{layout} left tp_comm_overlap on")
    ctx.says("due to TP size < 2.", "due to sequence_parallel=False.", "due to TE not detected.", "a warning, not an error")


def p2p(pp: int, vpp: int | None) -> tuple[bool, bool]:
    cfg = tiny_config(pp=pp, vpp=vpp)
    cfg.comm_overlap = overlap(tp_comm_overlap=False)
    resolve(cfg, world_size=pp * 2)
    return cfg.model.overlap_p2p_comm, cfg.model.batch_p2p_comm


@claim(SKILL, "overlap-pp-p2p")
def pp_p2p(ctx: Context) -> None:
    ctx.expect(p2p(4, 2) == (True, False), "PP>1 with VPP>1 no longer gives overlap_p2p_comm=True, batch_p2p_comm=False")
    ctx.expect(p2p(4, None) == (False, True), "PP>1 without VPP no longer gives batch_p2p_comm=True")
    ctx.expect(p2p(1, None) == (False, False), "PP=1 no longer turns both off")
    ctx.says("`overlap_p2p_comm=True` and `batch_p2p_comm=False`", "(`overlap_p2p_comm=False`, `batch_p2p_comm=True`)", "with PP = 1, both False")


@claim(SKILL, "overlap-dp-defaults")
def dp_defaults(ctx: Context) -> None:
    stated = ctx.number_after("bucket_size =")
    cfg = tiny_config(pp=2, vpp=2, distributed_optimizer=True)
    cfg.comm_overlap = overlap(tp_comm_overlap=False)
    resolve(cfg, world_size=8)
    ctx.expect(cfg.ddp.bucket_size == stated, f"SKILL.md says bucket_size = {stated}; Bridge sets {cfg.ddp.bucket_size}")
    ctx.expect(cfg.ddp.overlap_grad_reduce and cfg.ddp.overlap_param_gather and cfg.ddp.align_param_gather, "DP overlap defaults were not set for DP>1, PP>1, VPP>1")
    ctx.expect(cfg.optimizer.overlap_param_gather is True, "the optimizer config did not get overlap_param_gather")
    no_vpp = tiny_config(pp=2, distributed_optimizer=True)
    no_vpp.comm_overlap = overlap(tp_comm_overlap=False)
    resolve(no_vpp, world_size=8)
    ctx.expect(no_vpp.ddp.overlap_grad_reduce and not no_vpp.ddp.align_param_gather, "align_param_gather was set without VPP")
    single = tiny_config(distributed_optimizer=True)
    single.comm_overlap = overlap(tp_comm_overlap=False)
    resolve(single, world_size=1)
    ctx.expect(single.ddp.bucket_size is None and not single.ddp.overlap_grad_reduce and not single.ddp.overlap_param_gather, "DP=1 did not leave DP overlap off")
    ctx.says("128 * 1024 * 1024", "`overlap_grad_reduce=True`", "`overlap_param_gather=True`", "`align_param_gather=True`")


@claim(SKILL, "overlap-dp-needs-distributed-optimizer")
def dp_needs_distributed_optimizer(ctx: Context) -> None:
    cfg = tiny_config(distributed_optimizer=False)
    cfg.comm_overlap = overlap(tp_comm_overlap=False)
    resolve(cfg, world_size=8)
    ctx.expect(cfg.ddp.bucket_size is None and cfg.ddp.overlap_grad_reduce is False and cfg.ddp.overlap_param_gather is False, "DP overlap defaults were applied without the distributed optimizer")
    mine = tiny_config(distributed_optimizer=False)
    mine.ddp.overlap_grad_reduce = True
    mine.comm_overlap = overlap(tp_comm_overlap=False)
    resolve(mine, world_size=8)
    ctx.expect(mine.ddp.overlap_grad_reduce is True and mine.ddp.bucket_size is None, "a user's own DDP value was changed without the distributed optimizer")
    ctx.says("`cfg.ddp.use_distributed_optimizer` is False", "leaves `cfg.ddp` and `cfg.optimizer` untouched")


@claim(SKILL, "overlap-user-values-win")
def user_values_win(ctx: Context) -> None:
    cfg = tiny_config(pp=2, vpp=2, distributed_optimizer=True)
    cfg.comm_overlap = overlap(tp_comm_overlap=False, overlap_p2p_comm=False, bucket_size=1000)
    resolve(cfg, world_size=8)
    ctx.expect(cfg.model.overlap_p2p_comm is False, "an explicit overlap_p2p_comm=False was replaced")
    ctx.expect(cfg.ddp.bucket_size == 1000, f"an explicit bucket_size=1000 became {cfg.ddp.bucket_size}")
    ctx.says("not None", "`overlap_p2p_comm=False`", "`bucket_size=...`")


@claim(SKILL, "overlap-bucket-size-units")
def bucket_size_units(ctx: Context) -> None:
    phrase = "Maximum number of parameters in each bucket"
    source = source_of(resolve_symbol("megatron.core.distributed.DistributedDataParallelConfig"))
    index = source.find("bucket_size: Optional[int] = None")
    ctx.expect(index >= 0 and source.find(phrase, index) == source.find('"""', index) + 3, "megatron-core's bucket_size docstring no longer says it counts parameters")
    ctx.says(phrase, "counts parameters, not bytes")


@claim(SKILL, "overlap-tp-preset")
def tp_preset(ctx: Context) -> None:
    from megatron.bridge.training import comm_overlap

    name = "userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048"
    preset = getattr(comm_overlap, name, None)
    ctx.expect(isinstance(preset, comm_overlap.TransformerLayerTPOverlapCfg), f"{name} is not a TransformerLayerTPOverlapCfg")
    presets = [n for n in dir(comm_overlap) if n.startswith("userbuffers_")]
    ctx.expect(all(isinstance(getattr(comm_overlap, n), comm_overlap.TransformerLayerTPOverlapCfg) for n in presets), "a userbuffers_* name is not a preset")
    cfg = tiny_config(tp=4, sp=True)
    cfg.comm_overlap = overlap(tp_comm_overlap=True)
    cfg = ctx.apply(cfg, index=0)  # the section's own snippet attaches the preset
    with mock.patch.object(comm_overlap, "HAVE_TE", True):  # the TE-on branch is pure Python
        cfg.comm_overlap.data_parallel_size = 1
        cfg.comm_overlap.finalize()
        cfg.comm_overlap.setup(cfg.model, cfg.optimizer, cfg.ddp)
    converted = cfg.model.tp_comm_overlap_cfg
    ctx.expect(isinstance(converted, dict) and converted, "setup() did not turn the preset into a dict")
    ctx.expect(None not in converted.values(), "setup() kept None values")
    expected = {k: v for k, v in dataclasses.asdict(preset).items() if v is not None}
    ctx.expect(converted == expected, "the dict differs from the preset's non-None fields")
    bare = tiny_config(tp=4, sp=True)
    bare.comm_overlap = overlap(tp_comm_overlap=True)
    with mock.patch.object(comm_overlap, "HAVE_TE", True), collect_warnings() as warnings:
        bare.comm_overlap.data_parallel_size = 1
        bare.comm_overlap.finalize()
        bare.comm_overlap.setup(bare.model, bare.optimizer, bare.ddp)
    message = "Tensor parallel overlap: No overlap config provided. Initializing TP comm overlap with the default config."
    ctx.expect(message in warnings, f"no-preset warning changed: {warnings}")
    ctx.says(name, message, "fields left None are dropped")


@claim(SKILL, "overlap-precision-knobs")
def precision_knobs(ctx: Context) -> None:
    from megatron.bridge.training.mixed_precision import MixedPrecisionConfig, bf16_mixed

    names = {f.name for f in dataclasses.fields(MixedPrecisionConfig)}
    ctx.expect({"grad_reduce_in_fp32", "fp8_param_gather"} <= names, "MixedPrecisionConfig lost grad_reduce_in_fp32 or fp8_param_gather")
    ctx.expect(bf16_mixed().grad_reduce_in_fp32 is True, "bf16_mixed no longer reduces grads in fp32")
    cfg = tiny_config(distributed_optimizer=True)
    cfg.mixed_precision = "bf16_mixed"
    cfg.ddp.grad_reduce_in_fp32 = False
    resolve(cfg)
    ctx.expect(cfg.ddp.grad_reduce_in_fp32 is True, "a value set only on cfg.ddp survived the mixed-precision recipe")
    fixed = tiny_config(distributed_optimizer=True)
    fixed.mixed_precision = bf16_mixed()
    fixed.mixed_precision.grad_reduce_in_fp32 = False
    resolve(fixed)
    ctx.expect(fixed.ddp.grad_reduce_in_fp32 is False, "cfg.mixed_precision.grad_reduce_in_fp32 did not reach cfg.ddp")
    ctx.says("`grad_reduce_in_fp32`", "`fp8_param_gather`", "Set them on `cfg.mixed_precision`", "`_pretrain_common()`", "`\"bf16_mixed\"`", "raises `AttributeError`")
    # Recipes hand over the preset by name; the skill's two lines make it settable.
    from megatron.bridge.recipes.common import _pretrain_common

    recipe = _pretrain_common()
    ctx.expect(recipe.mixed_precision == "bf16_mixed", f"_pretrain_common() now sets mixed_precision to {recipe.mixed_precision!r}, not the name 'bf16_mixed'")
    ctx.expect_raises(lambda: setattr(recipe.mixed_precision, "grad_reduce_in_fp32", False), AttributeError, "grad_reduce_in_fp32")
    recipe = ctx.apply(recipe)
    ctx.expect(isinstance(recipe.mixed_precision, MixedPrecisionConfig) and recipe.mixed_precision.grad_reduce_in_fp32 is False, "the skill's snippet did not leave a MixedPrecisionConfig with grad_reduce_in_fp32 False")


@claim(SKILL, "overlap-env-vars")
def env_vars(ctx: Context) -> None:
    from megatron.bridge.recipes import run_plugins
    from megatron.bridge.training.comm_overlap import CommOverlapConfig

    knobs = {"CUDA_DEVICE_MAX_CONNECTIONS", "NVTE_FWD_LAYERNORM_SM_MARGIN", "NVTE_BWD_LAYERNORM_SM_MARGIN"}
    fields = {name.lower() for name in CommOverlapConfig.__annotations__}
    ctx.expect(not ({k.lower() for k in knobs} & fields) and "layernorm_sm_margin" not in " ".join(fields), "CommOverlapConfig gained a launch-environment field")
    ctx.expect(not hasattr(run_plugins, "PerfEnvPlugin"), "megatron.bridge.recipes.run_plugins has a PerfEnvPlugin again")
    ctx.expect("os.environ.setdefault(name, str(value))" in source_of(resolve_symbol("megatron.bridge.training.config.apply_environment_variables")), "cfg.env_vars is no longer applied with setdefault")
    cfg = tiny_config()
    cfg.env_vars = {"NVTE_FWD_LAYERNORM_SM_MARGIN": 16}
    seen = {}
    with preserved_environ():
        os.environ["NVTE_FWD_LAYERNORM_SM_MARGIN"] = "8"
        resolve_symbol("megatron.bridge.training.config.apply_environment_variables")(cfg)
        seen["shell"] = os.environ["NVTE_FWD_LAYERNORM_SM_MARGIN"]
        del os.environ["NVTE_FWD_LAYERNORM_SM_MARGIN"]
        resolve_symbol("megatron.bridge.training.config.apply_environment_variables")(cfg)
        seen["recipe"] = os.environ["NVTE_FWD_LAYERNORM_SM_MARGIN"]
    ctx.expect(seen == {"shell": "8", "recipe": "16"}, f"env_vars precedence changed: {seen}")
    ctx.says("`cfg.env_vars`", "os.environ.setdefault", "`PerfEnvPlugin`", "does not exist in 0.6.2")


@claim(SKILL, "overlap-code-anchors")
def code_anchors(ctx: Context) -> None:
    ctx.resolve_symbols(minimum=5)
    from megatron.bridge.training.comm_overlap import CommOverlapConfig

    for method in ("finalize", "setup", "_get_model_comm_overlap_cfgs", "_get_optimizer_overlap_cfgs", "_override_user_cfgs"):
        ctx.expect(callable(getattr(CommOverlapConfig, method, None)), f"CommOverlapConfig.{method} is gone")
        ctx.says(method)
    ctx.expect(isinstance(resolve_symbol("megatron.bridge.training.comm_overlap.HAVE_TE"), bool), "HAVE_TE is not a flag any more")


@claim(SKILL, "overlap-report-script")
def report_script(ctx: Context) -> None:
    from megatron.bridge.training import comm_overlap

    script = ctx.load_script("scripts/overlap_report.py")
    ctx.says("python scripts/overlap_report.py --tp 4 --sp --pp 4 --vpp 2 --world-size 64")
    with preserved_environ():
        report = script.resolve(script.build_config(4, True, 4, 2, True, True), 64)
    ctx.expect(report["error"] is None, f"Bridge rejected the report's config: {report['error']}")
    model, ddp = report["model"], report["ddp"]
    ctx.expect(model["overlap_p2p_comm"] is True and model["batch_p2p_comm"] is False, f"the report shows p2p {model}")
    stated = ctx.number_after("bucket_size =")
    ctx.expect(ddp["bucket_size"] == stated, f"the report shows bucket_size {ddp['bucket_size']}, the skill says {stated}")
    ctx.says("`overlap_p2p_comm = True`", "`batch_p2p_comm = False`")
    if not comm_overlap.HAVE_TE:
        ctx.expect(model["tp_comm_overlap"] is False and any("TE not detected" in w for w in report["warnings"]), "the report does not show TP overlap disabled without TE")
    text = script.format_report(report)
    ctx.expect("bridge validation: passed" in text and "model.overlap_p2p_comm = True" in text, "the printed report lacks the resolved fields")


@claim(SKILL, "overlap-gpu-dp-overlap-trains", tier="gpu")
def gpu_dp_overlap_trains(ctx: Context) -> None:
    """CPU side of the GPU run (runner/claims/gpu.py check_overlap_dp): the block, fitted to
    1 and 2 GPUs, resolves as the GPU run expects: DP overlap off at one rank, on at two."""
    from .gpu import overlap_config

    ctx.says("`DistributedDataParallel`", "distributed optimizer", "finite loss at its last iteration", "2 or more data-parallel ranks", "nothing to overlap")
    for world_size, expected in ((1, False), (2, True)):
        cfg = overlap_config(ctx, world_size, tp=1, te=False)
        ctx.expect(cfg.ddp.use_distributed_optimizer and cfg.ddp.overlap_grad_reduce and cfg.ddp.overlap_param_gather, "the enablement block no longer turns on the distributed optimizer with grad-reduce and param-gather overlap")
        resolve(cfg, world_size=world_size)
        ctx.expect(cfg.data_parallel_size == world_size, f"world size {world_size} with TP=1 gave DP={cfg.data_parallel_size}")
        got = (cfg.ddp.overlap_grad_reduce, cfg.ddp.overlap_param_gather)
        ctx.expect(got == (expected, expected), f"at data-parallel size {world_size} Bridge resolves (overlap_grad_reduce, overlap_param_gather) to {got}, the GPU run expects {(expected, expected)}")


@claim(SKILL, "overlap-gpu-tp-overlap", tier="gpu")
def gpu_tp_overlap(ctx: Context) -> None:
    """CPU side of the GPU run (runner/claims/gpu.py check_overlap_tp): the block at TP=2 with
    sequence parallelism keeps TP overlap on once TE is there (HAVE_TE patched: CPU has none)."""
    from megatron.bridge.training import comm_overlap

    from .gpu import DISABLING_TP_OVERLAP, overlap_config, tp_size_for

    ctx.says("at least 2 GPUs", "Transformer Engine", DISABLING_TP_OVERLAP, "`tp_comm_overlap`", "finite loss")
    ctx.expect(tp_size_for(1) is None and tp_size_for(2) == 2 and tp_size_for(8) == 4, "the GPU run's choice of TP size changed")
    cfg = overlap_config(ctx, 2, tp=2, te=False)
    ctx.expect(isinstance(cfg.comm_overlap, comm_overlap.CommOverlapConfig) and cfg.comm_overlap.tp_comm_overlap, "the enablement block no longer asks for TP overlap")
    with mock.patch.object(comm_overlap, "HAVE_TE", True), collect_warnings() as warnings:
        resolve(cfg, world_size=2)
    disabled = [w for w in warnings if DISABLING_TP_OVERLAP in w]
    ctx.expect(not disabled and cfg.model.tp_comm_overlap is True and cfg.model.sequence_parallel is True, f"at TP=2 with SP and TE, Bridge resolves tp_comm_overlap={cfg.model.tp_comm_overlap}: {disabled}")
