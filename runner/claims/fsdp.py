"""Checks for skills/nemo-mbridge-perf-megatron-fsdp (claim ids match its SKILL.md markers)."""

from __future__ import annotations

import dataclasses

from .environment import resolve, tiny_config
from .registry import Context, claim, resolve_symbol, source_of

SKILL = "nemo-mbridge-perf-megatron-fsdp"
ENABLE = "fsdp-enable-override"


def fsdp_config(ctx: Context, **layout):
    """A tiny config with the skill's own enablement block applied."""
    return ctx.sibling(ENABLE).apply(tiny_config(**layout))


@claim(SKILL, ENABLE)
def enable_override(ctx: Context) -> None:
    cfg = ctx.apply(tiny_config())
    cfg.checkpoint.save = "/tmp/mbskills-claim-check"  # the override must hold with saving on
    resolve(cfg)
    ctx.expect(cfg.ddp.use_megatron_fsdp is True, "the override does not enable cfg.ddp.use_megatron_fsdp")
    ctx.expect(cfg.ddp.data_parallel_sharding_strategy == "optim_grads_params", f"sharding strategy is {cfg.ddp.data_parallel_sharding_strategy!r}, not optim_grads_params")
    ctx.says("no_shard", "optim", "optim_grads", "optim_grads_params")
    documented = source_of(resolve_symbol("megatron.core.distributed.DistributedDataParallelConfig"))
    ctx.expect("'no_shard', 'optim', 'optim_grads', 'optim_grads_params'" in documented, "megatron-core no longer documents the four sharding strategies")


@claim(SKILL, "fsdp-validate-side-effects")
def validate_side_effects(ctx: Context) -> None:
    cfg = fsdp_config(ctx)
    ctx.expect(not cfg.dist.use_megatron_fsdp and not cfg.optimizer.use_distributed_optimizer, "the tiny config already had the fields set")
    resolve(cfg)
    for field in ("dist.use_megatron_fsdp", "ddp.use_megatron_fsdp", "ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer"):
        section, name = field.split(".")
        ctx.expect(getattr(getattr(cfg, section), name) is True, f"validate() left cfg.{field} unset")
    ctx.says("cfg.dist.use_megatron_fsdp", "cfg.ddp.use_distributed_optimizer", "cfg.optimizer.use_distributed_optimizer")


@claim(SKILL, "fsdp-dist-flag-exists")
def dist_flag_exists(ctx: Context) -> None:
    from megatron.bridge.training.config import DistributedInitConfig
    from megatron.training.config import DistributedInitConfig as CoreDistributedInitConfig

    ctx.expect("use_megatron_fsdp" in {f.name for f in dataclasses.fields(DistributedInitConfig)}, "DistributedInitConfig has no use_megatron_fsdp")
    ctx.expect(issubclass(DistributedInitConfig, CoreDistributedInitConfig), "Bridge's DistributedInitConfig no longer inherits megatron-core's")
    ctx.expect("use_megatron_fsdp" in {f.name for f in dataclasses.fields(CoreDistributedInitConfig)}, "the field is no longer inherited from megatron-core")
    builder = source_of(resolve_symbol("megatron.bridge.training.setup._build_distributed_model"))
    ctx.expect("use_megatron_fsdp=cfg.dist.use_megatron_fsdp" in builder, "the model builder no longer reads cfg.dist.use_megatron_fsdp")
    cfg = tiny_config()
    cfg.dist.use_megatron_fsdp = True  # the older spelling alone still reaches the FSDP path
    resolve(cfg)
    ctx.expect(cfg.ddp.use_megatron_fsdp is True, "cfg.dist.use_megatron_fsdp alone does not enable FSDP")
    ctx.says("megatron.bridge.training.config.DistributedInitConfig", "megatron.training.config")


@claim(SKILL, "fsdp-average-in-collective")
def average_in_collective(ctx: Context) -> None:
    from megatron.core.distributed import DistributedDataParallelConfig

    ctx.expect(DistributedDataParallelConfig().disable_symmetric_registration is False, "disable_symmetric_registration no longer defaults to False")
    cfg = fsdp_config(ctx)
    cfg.ddp.average_in_collective = True
    resolve(cfg)
    ctx.expect(cfg.ddp.average_in_collective is False, "validate() kept average_in_collective=True")
    message = "average_in_collective not supported with NCCL symmetric registration. Deactivating..."
    ctx.says(message)
    ctx.expect(message in source_of(resolve_symbol("megatron.bridge.training.config.ConfigContainer._validate_and_apply_megatron_fsdp_configs")), "the deactivation message changed")


@claim(SKILL, "fsdp-ckpt-format")
def ckpt_format(ctx: Context) -> None:
    message = "Megatron-FSDP requires the fsdp_dtensor checkpointing format!"
    ctx.says(f"AssertionError: {message}", 'cfg.checkpoint.ckpt_format = "fsdp_dtensor"')
    for where in ("save", "load"):
        cfg = fsdp_config(ctx)
        cfg.checkpoint.ckpt_format = "torch_dist"
        setattr(cfg.checkpoint, where, "/tmp/mbskills-claim-check")
        ctx.expect_raises(lambda: resolve(cfg), AssertionError, message)
    fixed = fsdp_config(ctx)
    fixed.checkpoint.save = "/tmp/mbskills-claim-check"
    fixed.checkpoint.ckpt_format = "fsdp_dtensor"
    resolve(fixed)
    unsaved = fsdp_config(ctx)
    unsaved.checkpoint.ckpt_format = "torch_dist"
    resolve(unsaved)  # neither save nor load: not checked
    from megatron.bridge.training.config import CheckpointConfig

    ctx.expect(CheckpointConfig().ckpt_format == "torch_dist", "the default checkpoint format is no longer torch_dist")


@claim(SKILL, "fsdp-torch-fsdp2-late-failure")
def torch_fsdp2_late_failure(ctx: Context) -> None:
    from megatron.core.distributed import DistributedDataParallelConfig

    cfg = fsdp_config(ctx)
    cfg.dist.use_torch_fsdp2 = True
    resolve(cfg)  # passes: the exclusion check reads only cfg.dist.use_megatron_fsdp
    ctx.expect(cfg.dist.use_megatron_fsdp and cfg.dist.use_torch_fsdp2, "validation changed one of the two flags")
    wrap = resolve_symbol("megatron.training.models.dist_utils._ddp_wrap")
    late = "Using use_megatron_fsdp and use_torch_fsdp2 at the same time is not supported."
    ctx.expect_raises(
        lambda: wrap([], False, DistributedDataParallelConfig(), False, use_megatron_fsdp=True, use_torch_fsdp2=True, pg_collection=None),
        ValueError,
        late,
    )
    saving = fsdp_config(ctx)
    saving.dist.use_torch_fsdp2 = True
    saving.checkpoint.save = "/tmp/mbskills-claim-check"
    saving.checkpoint.ckpt_format = "fsdp_dtensor"
    misleading = "fsdp_dtensor checkpoint format only supports Megatron FSDP"
    ctx.expect_raises(lambda: resolve(saving), AssertionError, misleading)
    early = fsdp_config(ctx)
    early.dist.use_torch_fsdp2 = True
    early.dist.use_megatron_fsdp = True
    exclusive = "use_megatron_fsdp and use_torch_fsdp2 are mutually exclusive."
    ctx.expect_raises(lambda: resolve(early), ValueError, exclusive)
    ctx.says(f"ValueError: {late}", misleading, f"ValueError: {exclusive}", "cfg.dist.use_megatron_fsdp = True")


@claim(SKILL, "fsdp-tp-pp-dp-mapping")
def tp_pp_dp_mapping(ctx: Context) -> None:
    message = "use_tp_pp_dp_mapping is not supported with Megatron FSDP"
    ctx.says(f"AssertionError: {message}")
    cfg = fsdp_config(ctx)
    cfg.dist.use_tp_pp_dp_mapping = True
    ctx.expect_raises(lambda: resolve(cfg), AssertionError, message)
    ctx.expect(tiny_config().dist.use_tp_pp_dp_mapping is False, "use_tp_pp_dp_mapping no longer defaults to False")


@claim(SKILL, "fsdp-cuda-device-max-connections")
def cuda_device_max_connections(ctx: Context) -> None:
    message = "FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset."
    ctx.says(f"AssertionError: {message}", "cfg.env_vars", "a value already in the shell wins")
    shell = fsdp_config(ctx)
    ctx.expect_raises(lambda: resolve(shell, environ={"CUDA_DEVICE_MAX_CONNECTIONS": "1"}), AssertionError, message)
    recipe = fsdp_config(ctx)
    recipe.env_vars = {"CUDA_DEVICE_MAX_CONNECTIONS": 1}
    ctx.expect_raises(lambda: resolve(recipe), AssertionError, message)
    shell_wins = fsdp_config(ctx)
    shell_wins.env_vars = {"CUDA_DEVICE_MAX_CONNECTIONS": 1}
    resolve(shell_wins, environ={"CUDA_DEVICE_MAX_CONNECTIONS": "8"})
    resolve(fsdp_config(ctx), environ={"CUDA_DEVICE_MAX_CONNECTIONS": "32"})


@claim(SKILL, "fsdp-weight-hash-check")
def weight_hash_check(ctx: Context) -> None:
    fragment = "is not supported with the Megatron-FSDP optim_grads_params sharding strategy"
    ctx.says(fragment, "cfg.train.check_weight_hash_across_dp_replicas_interval")
    cfg = fsdp_config(ctx)
    cfg.train.check_weight_hash_across_dp_replicas_interval = 10
    ctx.expect_raises(lambda: resolve(cfg), AssertionError, fragment)
    cfg = fsdp_config(ctx)
    cfg.train.check_weight_hash_across_dp_replicas_interval = None  # the skill's fix
    resolve(cfg)
    ctx.says("Fix: set it to None")


@claim(SKILL, "fsdp-cpu-offloading")
def cpu_offloading(ctx: Context) -> None:
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    base = dict(num_layers=2, hidden_size=64, num_attention_heads=4, cpu_offloading=True, cpu_offloading_num_layers=1)
    pipeline = "Currently there is no support for Pipeline parallelism with CPU offloading"
    recompute = "CPU offloading does not work when activation recomputation is enabled"
    ctx.says(pipeline, recompute, "cfg.model.cpu_offloading")
    ctx.expect_raises(lambda: TransformerConfig(**base, pipeline_model_parallel_size=2, pipeline_dtype=torch.float32), ValueError, pipeline)
    ctx.expect_raises(lambda: TransformerConfig(**base, recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1), ValueError, recompute)
    TransformerConfig(**base)  # PP=1, no recompute: accepted


@claim(SKILL, "fsdp-code-anchors")
def code_anchors(ctx: Context) -> None:
    ctx.resolve_symbols(minimum=6)
    wrap = resolve_symbol("megatron.training.models.dist_utils._ddp_wrap")
    ctx.expect(resolve_symbol("megatron.bridge.models.common.unimodal._ddp_wrap") is wrap, "Bridge no longer re-exports megatron-core's _ddp_wrap")
    wrap_source = source_of(wrap)
    for wrapper in ("FullyShardedDataParallel", "TorchFullyShardedDataParallel", "DistributedDataParallel"):
        ctx.expect(f"DP = {wrapper}" in wrap_source, f"_ddp_wrap no longer selects {wrapper}")
    validate = source_of(resolve_symbol("megatron.bridge.training.config.ConfigContainer.validate"))
    ctx.expect("self._validate_and_apply_megatron_fsdp_configs()" in validate, "validate() no longer calls _validate_and_apply_megatron_fsdp_configs")


@claim(SKILL, "fsdp-preflight-script")
def preflight_script(ctx: Context) -> None:
    from .environment import preserved_environ

    script = ctx.load_script("scripts/fsdp_preflight.py")
    ctx.says("python scripts/fsdp_preflight.py --config my_pkg.my_recipes:my_config --world-size 8 --validate", "--validate")
    clean = fsdp_config(ctx)
    clean.checkpoint.save = "/tmp/mbskills-claim-check"
    clean.checkpoint.ckpt_format = "fsdp_dtensor"  # the subject here is the script, not the block
    ctx.expect(script.preflight(clean, environ={}) == [], "the preflight reports a problem on the skill's own override")
    pitfalls = {
        "checkpoint.ckpt_format": lambda c: setattr(c.checkpoint, "ckpt_format", "torch_dist"),
        "dist.use_torch_fsdp2": lambda c: setattr(c.dist, "use_torch_fsdp2", True),
        "dist.use_tp_pp_dp_mapping": lambda c: setattr(c.dist, "use_tp_pp_dp_mapping", True),
        "CUDA_DEVICE_MAX_CONNECTIONS": lambda c: c.env_vars.update(CUDA_DEVICE_MAX_CONNECTIONS=1),
        "train.check_weight_hash_across_dp_replicas_interval": lambda c: setattr(c.train, "check_weight_hash_across_dp_replicas_interval", 10),
    }
    for field, break_it in pitfalls.items():
        cfg = fsdp_config(ctx)
        cfg.checkpoint.save = "/tmp/mbskills-claim-check"
        cfg.checkpoint.ckpt_format = "fsdp_dtensor"
        break_it(cfg)
        found = [p.field for p in script.preflight(cfg, environ={})]
        ctx.expect(found == [field], f"the preflight reported {found} for a broken {field}")
        with preserved_environ():
            rejected = script.run_bridge_validation(cfg, 8)
        ctx.expect(rejected is not None, f"Bridge's validation accepted a broken {field}, so the preflight's rule is stale")
    with preserved_environ():
        ctx.expect(script.run_bridge_validation(clean, 8) is None, "Bridge's validation rejects the skill's own override")


@claim(SKILL, "fsdp-gpu-train-save-resume", tier="gpu")
def gpu_train_save_resume(ctx: Context) -> None:
    """CPU side of the GPU run (runner/claims/gpu.py check_fsdp): the two configs it trains,
    built from the skill's block, pass Bridge's validation and save, then load, fsdp_dtensor."""
    from pathlib import Path

    from .gpu import FSDP_ITERS, FSDP_SAVE_AT, fsdp_configs

    ctx.says("finite loss at its last iteration", "`fsdp_dtensor`", "`FullyShardedDataParallel`", "resumes at the saved iteration", "close to where it stopped")
    for world_size in (1, 2):
        first, second = fsdp_configs(ctx, world_size, Path("/tmp/mbskills-gpu-plan/checkpoints"), te=False)
        for cfg in (first, second):
            resolve(cfg, world_size=world_size)
            ctx.expect(cfg.ddp.use_megatron_fsdp is True and cfg.dist.use_megatron_fsdp is True, f"the GPU run at world size {world_size} would not use Megatron FSDP")
            ctx.expect(cfg.checkpoint.ckpt_format == "fsdp_dtensor", f"the GPU run would save and load {cfg.checkpoint.ckpt_format!r}, not fsdp_dtensor")
            ctx.expect(cfg.train.micro_batch_size * cfg.data_parallel_size == cfg.train.global_batch_size, "the GPU run's batch does not fit its data-parallel size")
        ctx.expect(first.checkpoint.save and first.checkpoint.save_interval == FSDP_SAVE_AT < FSDP_ITERS, "the first GPU run does not save mid-run")
        ctx.expect(second.checkpoint.load == first.checkpoint.save and second.checkpoint.ckpt_step == FSDP_SAVE_AT and not second.checkpoint.save, "the second GPU run does not load the first run's mid-run checkpoint")
