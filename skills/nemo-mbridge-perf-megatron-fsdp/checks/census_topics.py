"""Checks for the reference sections that answer the user-reported problems of the census
(validation side effects, precision, checkpoint saving, known issues of the pinned release).
Same rule as the other modules: each value is read from the sentence and compared with the
installed library (a real config run through Bridge's validation, dataclass defaults, the
source of the named functions read with inspect/ast); what only a GPU shows is checked as
the code path the source takes."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib
import importlib.util
import inspect
import os
import sys
import textwrap
import types
from pathlib import Path
from typing import Any
from unittest import mock

from runner.claims.kit import ClaimFailed, Context, assignment, claim, get_field, literal, raised, resolve, resolve_symbol, set_field, source_of, tiny_config
from .fsdp import printed, raises_exactly

BRIDGE_CONFIG = "megatron.bridge.training.config"


def _squash(text: Any) -> str:
    return " ".join(str(text).split())


def module_of(dotted: str) -> types.ModuleType:
    """The module `dotted` names (a package attribute may shadow a submodule of that name)."""
    importlib.import_module(dotted)
    return sys.modules[dotted]


def dataclass_default(cls: type, name: str) -> Any:
    for f in dataclasses.fields(cls):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                return f.default_factory()  # type: ignore[misc]
    raise ClaimFailed(f"{cls.__name__} has no field {name}")


def ddp_default(name: str) -> Any:
    from megatron.core.distributed import DistributedDataParallelConfig

    return dataclass_default(DistributedDataParallelConfig, name)


def ddp_name(ctx: Context, dotted: str) -> str:
    parts = dotted.strip().split(".")
    if parts[0] == "cfg":
        parts = parts[1:]
    ctx.expect(len(parts) == 1 or parts[:-1] == ["ddp"], f"{dotted} is not a cfg.ddp field")
    ddp_default(parts[-1])
    return parts[-1]


def ddp_defaults_names() -> set[str]:
    from megatron.core.distributed import DistributedDataParallelConfig

    return {f.name for f in dataclasses.fields(DistributedDataParallelConfig)}


def typed(text: str) -> Any:
    """`True`, `None`, `torch.float32` as the skill writes a value."""
    import torch

    text = text.strip()
    if text.startswith("torch."):
        return getattr(torch, text.split(".", 1)[1])
    return literal(text)


def function_def(obj: Any) -> ast.FunctionDef:
    return ast.parse(textwrap.dedent(inspect.getsource(obj))).body[0]


def attributes_read(tree: ast.AST) -> set[str]:
    return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}


# --- what-validation-changes.md -----------------------------------------------------------


@claim("fsdp-silent-settings")
def silent_settings(ctx: Context) -> None:
    r = ctx.read(
        "With either FSDP flag set, `{method:code}` changes more than the two flags, and says so only on stdout."
        ' It prints "{dist_msg:quote}" as it turns the distributed optimizer on.'
    )
    p = ctx.read(
        'With `{pao:code}` it prints "{pao_msg:quote}" and sets `{decoupled:code}` to {set_to:bool} (its default is {default:bool}),'
        " so a precision-aware FusedAdam reads the gradients Megatron FSDP writes."
    )
    m = ctx.read(
        "With `{reuse:code}` {reuse_on:bool} on `{sec_a:code}` or on `{sec_b:code}` it prints"
        ' "{reuse_msg:quote}" and sets the field to {reuse_to:bool} on both.'
    )
    ctx.says("When an FSDP run's loss differs from a DDP run's, compare the resolved configs and this log, not the overrides you wrote.")
    from megatron.bridge.training.config import ConfigContainer

    ctx.expect(r.method.removesuffix("()") == "ConfigContainer._validate_and_apply_megatron_fsdp_configs", f"SKILL.md names {r.method}")
    method = getattr(ConfigContainer, "_validate_and_apply_megatron_fsdp_configs")
    ctx.expect("self._validate_and_apply_megatron_fsdp_configs()" in source_of(ConfigContainer.validate), "validate() does not call it")

    def run(**fields: Any) -> tuple[Any, list[str]]:
        cfg = tiny_config()
        cfg.ddp.use_megatron_fsdp = True
        for name, value in fields.items():
            set_field(cfg, name, value)
        with contextlib.ExitStack() as stack:
            stack.enter_context(mock.patch.dict(os.environ, {}, clear=False))
            os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
            lines = printed(lambda: method(cfg))
        return cfg, lines

    cfg, lines = run()
    ctx.expect(_squash(r.dist_msg) in lines, f"the method prints {lines}, not {r.dist_msg!r}")
    ctx.expect(cfg.ddp.use_distributed_optimizer and cfg.optimizer.use_distributed_optimizer, "it does not turn the distributed optimizer on")
    _, lines = run(**{"ddp.use_distributed_optimizer": True, "optimizer.use_distributed_optimizer": True})
    ctx.expect(_squash(r.dist_msg) not in lines, "it prints the distributed-optimizer line even when it is on already")

    field, value = assignment(p.pao)
    ctx.expect(".".join(field.split(".")[-2:]) == "optimizer.use_precision_aware_optimizer", f"SKILL.md sets {field}")
    name = ddp_name(ctx, p.decoupled)
    ctx.expect(ddp_default(name) == p.default, f"{name} defaults to {ddp_default(name)!r}")
    cfg, lines = run(**{field: value})
    ctx.expect(_squash(p.pao_msg) in lines, f"with {p.pao} it prints {lines}, not {p.pao_msg!r}")
    ctx.expect(getattr(cfg.ddp, name) == p.set_to, f"with {p.pao}, {name} is {getattr(cfg.ddp, name)!r}")
    cfg, lines = run(**{field: not value})
    ctx.expect(_squash(p.pao_msg) not in lines and getattr(cfg.ddp, name) == p.default, f"without {p.pao} it still changes {name}")

    ctx.expect({p_.strip() for p_ in (m.sec_a, m.sec_b)} == {"cfg.ddp", "cfg.optimizer"}, f"SKILL.md names {m.sec_a} and {m.sec_b}")
    for section in (m.sec_a, m.sec_b):
        dotted = f"{section}.{m.reuse}"
        cfg, lines = run(**{dotted: m.reuse_on})
        ctx.expect(_squash(m.reuse_msg) in lines, f"with {dotted}={m.reuse_on} it prints {lines}, not {m.reuse_msg!r}")
        got = (get_field(cfg, f"cfg.ddp.{m.reuse}"), get_field(cfg, f"cfg.optimizer.{m.reuse}"))
        ctx.expect(got == (m.reuse_to, m.reuse_to), f"with {dotted}={m.reuse_on} the fields end as {got}")
    _, lines = run()
    ctx.expect(_squash(m.reuse_msg) not in lines, "it prints the MXFP8 line with the field off")


@claim("fsdp-strategy-needs-fsdp")
def strategy_needs_fsdp(ctx: Context) -> None:
    r = ctx.read(
        "`{field:code}` does nothing without `{flag:code}`: the model is then wrapped by `{wrapper:code}`, and neither that"
        " wrapper, nor its buffers in `{buffers:code}`, nor the distributed optimizer in `{optim:code}` reads the field."
    )
    ctx.says(
        "The distributed optimizer alone shards the optimizer state whatever the field says; to shard gradients and parameters as well, turn Megatron FSDP on."
    )
    import torch

    field = ddp_name(ctx, r.field).strip()
    flag = ddp_name(ctx, r.flag)
    ctx.expect(flag == "use_megatron_fsdp", f"SKILL.md names {r.flag}")
    wrapper = resolve_symbol(r.wrapper)
    ctx.expect(inspect.isclass(wrapper) and issubclass(wrapper, torch.nn.Module) and wrapper.__name__ == "DistributedDataParallel", f"{r.wrapper} is not the DDP wrapper")
    wrap = source_of(resolve_symbol("megatron.training.models.dist_utils._ddp_wrap"))
    ctx.expect("DistributedDataParallel" in wrap and "use_megatron_fsdp" in wrap, "_ddp_wrap does not pick DistributedDataParallel without Megatron FSDP")
    buffers, optim = module_of(r.buffers), module_of(r.optim)
    ctx.expect(getattr(getattr(buffers, "_ParamAndGradBuffer", None), "__module__", None) == buffers.__name__, f"{r.buffers} defines no DDP gradient buffer")
    ctx.expect(getattr(getattr(optim, "DistributedOptimizer", None), "__module__", None) == optim.__name__, f"{r.optim} defines no DistributedOptimizer")
    for module in (inspect.getmodule(wrapper), buffers, optim):
        ctx.expect(field not in inspect.getsource(module), f"{module.__name__} reads {field}")
    fsdp = module_of("megatron.core.distributed.fsdp.mcore_fsdp_adapter")
    ctx.expect(field in inspect.getsource(fsdp), "the Megatron FSDP adapter does not read the field either")


# --- precision.md ---------------------------------------------------------------------------


@claim("fsdp-main-grads-dtype")
def main_grads_dtype(ctx: Context) -> None:
    r = ctx.read("Megatron FSDP takes its precisions from three DDP fields, not from `{ignored:code}`:")
    fields = ctx.read(
        "`{f1:code}` (default `{d1:code}`), `{f2:code}` (default {d2:word}, which keeps the gradients in the dtype of the compute"
        " parameters) and `{f3:code}` (default {d3:word}, which communicates in the main-gradient dtype)."
    )
    m = ctx.read(
        "Neither the Megatron FSDP adapter (`{adapter:code}`) nor its buffers (`{buffers:code}`) read `{ignored2:code}`, so a BF16"
        " mixed-precision recipe that sets it still accumulates and reduces BF16 gradients under Megatron FSDP. For FP32 main gradients:"
    )
    names = [ddp_name(ctx, f) for f in (fields.f1, fields.f2, fields.f3)]
    ctx.expect(names == ["megatron_fsdp_main_params_dtype", "megatron_fsdp_main_grads_dtype", "megatron_fsdp_grad_comm_dtype"], f"SKILL.md names {names}")
    for name, default in zip(names, (fields.d1, fields.d2, fields.d3)):
        ctx.expect(ddp_default(name) == typed(default), f"{name} defaults to {ddp_default(name)!r}, not {default}")
    from megatron.core.distributed import DistributedDataParallelConfig

    doc = _squash(inspect.getsource(DistributedDataParallelConfig))
    ctx.expect("match the dtype of the model compute parameters" in doc, "the main-grads default no longer keeps the compute dtype")
    ctx.expect(r.ignored == m.ignored2 and r.ignored in {f.name for f in dataclasses.fields(DistributedDataParallelConfig)}, f"{r.ignored} is not a DDP field")
    adapter, buffers = module_of(m.adapter), module_of(m.buffers)
    ctx.expect(hasattr(adapter, "FullyShardedDataParallel") and hasattr(buffers, "ParamAndGradBuffer"), "SKILL.md names the wrong modules")
    for module in (adapter, buffers):
        ctx.expect(r.ignored not in inspect.getsource(module), f"{module.__name__} reads {r.ignored}")
    # the buffer's gradient dtype: main_grads_dtype if set, else the parameter dtype
    resolve_dtype = inspect.getsource(buffers.ParamAndGradBuffer._resolve_group_grad_dtype)
    ctx.expect("main_grads_dtype" in resolve_dtype, "the buffer does not take the gradient dtype from main_grads_dtype")
    from megatron.bridge.training.mixed_precision import bf16_mixed

    ctx.expect(getattr(bf16_mixed(), r.ignored) is True, f"Bridge's bf16_mixed does not set {r.ignored}")
    cfg = tiny_config()
    cfg.ddp.use_megatron_fsdp = True
    ctx.apply(cfg)
    resolve(cfg)
    import torch

    ctx.expect(cfg.ddp.megatron_fsdp_main_grads_dtype is torch.float32, "the block does not leave FP32 main gradients on the resolved config")


@claim("fsdp-wgrad-gemm")
def wgrad_gemm(ctx: Context) -> None:
    r = ctx.read(
        "With gradient accumulation fusion on, megatron-core's `{backward:code}` writes the weight gradient of a Megatron FSDP parameter"
        " (one marked `{marker:code}`) into its `{main:code}` with Transformer Engine's `{gemm:code}`, which takes any output dtype, and falls"
        " back to `{fallback:code}` with `{out:code}` only where Transformer Engine is absent; that fallback needs the main gradient in the compute dtype."
    )
    backward = resolve_symbol(r.backward)
    tree = function_def(backward)
    fusion = [n for n in ast.walk(tree) if isinstance(n, ast.If) and "gradient_accumulation_fusion" in ast.unparse(n.test)]
    ctx.expect(fusion, "backward has no gradient accumulation fusion branch")
    marker = [n for branch in fusion for n in ast.walk(branch) if isinstance(n, ast.If) and ast.unparse(n.test) == f"hasattr(weight, {r.marker!r})"]
    marker = list({id(n): n for n in marker}.values())
    ctx.expect(len(marker) == 1, f"the fusion branch does not test hasattr(weight, {r.marker!r})")
    te_branch = [n for n in ast.walk(marker[0]) if isinstance(n, ast.If) and ast.unparse(n.test) == f"{r.gemm} is not None"]
    ctx.expect(len(te_branch) == 1, f"the FSDP branch does not test {r.gemm}")
    body, orelse = ast.unparse(te_branch[0].body), ast.unparse(te_branch[0].orelse)
    ctx.expect(f"{r.gemm}(" in body and f"out_dtype=weight.{r.main}.dtype" in body, f"{r.gemm} is not called with the {r.main} dtype")
    ctx.expect(orelse.startswith(f"{r.fallback}(") and f"{r.out}weight.{r.main}" in orelse, f"the fallback is not {r.fallback}(..., {r.out}weight.{r.main})")
    importer = ast.unparse(marker[0])
    ctx.expect(f"from megatron.core.extensions.transformer_engine import {r.gemm}" in importer, f"{r.gemm} is not Transformer Engine's")


# --- checkpoint-saving.md ------------------------------------------------------------------


@claim("fsdp-async-save")
def async_save(ctx: Context) -> None:
    r = ctx.read("Validation accepts `{setting:code}` with Megatron FSDP: its format check reads \"{msg:quote}\". Two more conditions apply.")
    s = ctx.read("Without `{save:code}`, validation fails with `{no_save:code}`, and with `{worker:code}` it fails with `{no_worker:code}` (the field defaults to {default:bool}).")
    field, value = assignment(r.setting)

    def cfg_with(**ckpt: Any) -> Any:
        cfg = tiny_config()
        cfg.ddp.use_megatron_fsdp = True
        cfg.checkpoint.ckpt_format = "fsdp_dtensor"
        cfg.checkpoint.save = "/tmp/mbskills-claim-check/async"
        set_field(cfg, field, value)
        for name, v in ckpt.items():
            set_field(cfg, name, v)
        return cfg

    resolve(cfg_with())
    ctx.expect(r.msg in source_of(resolve_symbol(f"{BRIDGE_CONFIG}.ConfigContainer.validate")) or r.msg in inspect.getsource(module_of(BRIDGE_CONFIG)), "no such message in Bridge's config")
    plain = tiny_config()
    plain.checkpoint.save, plain.checkpoint.ckpt_format = "/tmp/mbskills-claim-check/async", "torch_dcp"
    set_field(plain, field, value)
    raises_exactly(ctx, lambda: resolve(plain), AssertionError, r.msg)
    kind, message = raised(s.no_save)
    raises_exactly(ctx, lambda: resolve(cfg_with(**{s.save: None})), kind, message)
    wfield, wvalue = assignment(s.worker)
    kind, message = raised(s.no_worker)
    raises_exactly(ctx, lambda: resolve(cfg_with(**{wfield: wvalue})), kind, message)
    from megatron.bridge.training.config import CheckpointConfig

    ctx.expect(dataclass_default(CheckpointConfig, wfield.split(".")[-1]) == s.default, f"{wfield} defaults otherwise")


@claim("fsdp-swiglu-optimizer-save")
def swiglu_optimizer_save(ctx: Context) -> None:
    r = ctx.read(
        "For a model with `{glu:code}` {glu_on:bool} and `{act:code}` `{silu:code}` (SwiGLU, e.g. Qwen3), `{pre:code}` runs megatron-core's"
        " `{handle:code}` on the model weights and, when the state dict holds an `{key:code}` entry, on the optimizer state too."
    )
    s = ctx.read(
        'Its `{split:code}` asserts an even size along the shard axis ("{msg:quote}") and calls `{to_local:code}` on every tensor it splits,'
        " which a plain local optimizer tensor does not have, so an optimizer save can fail on a SwiGLU model where a weights-only save works."
    )
    w = ctx.read("A workaround read from the source: `{fix:code}` (default {default:bool}) leaves the optimizer state out of saved checkpoints, at the cost of resuming without it.")
    import torch

    pre = resolve_symbol(r.pre)
    src = ast.unparse(function_def(pre))
    ctx.expect(f'getattr(model_config, {r.glu!r}, False)' in src and f"getattr(model_config, {r.act!r}, None) is {r.silu}" in src, f"{r.pre} does not test {r.glu} and {r.act}")
    ctx.expect(r.glu_on is True, "the SwiGLU branch needs the gated linear unit on")
    ctx.expect(f"if {literal(r.key)!r} in state_dict" in src.replace('"', "'") or f"if '{literal(r.key)}' in state_dict" in src.replace('"', "'"), f"{r.pre} does not look for {r.key}")
    ctx.expect(f"{r.handle}(model, state_dict['model'], state_dict['optimizer'])" in src.replace('"', "'"), f"{r.pre} does not hand the optimizer state to {r.handle}")
    handle = resolve_symbol(f"megatron.core.transformer.fsdp_dtensor_checkpoint.{r.handle}")
    ctx.expect(getattr(sys.modules[pre.__module__], r.handle, None) is handle, f"{r.pre} does not use megatron-core's {r.handle}")
    tree = function_def(handle)
    inner = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == s.split]
    ctx.expect(len(inner) == 1, f"{r.handle} has no {s.split}")
    body = ast.unparse(inner[0])
    asserts = [n for n in ast.walk(inner[0]) if isinstance(n, ast.Assert)]
    ctx.expect(bool(asserts) and "% 2 == 0" in ast.unparse(asserts[0].test), f"{s.split} does not assert an even size")
    node = asserts[0].msg
    parts = node.values if isinstance(node, ast.JoinedStr) else [node]
    text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in parts)
    ctx.expect(text.startswith(s.msg + " {}"), f"{s.split} asserts {text!r}, not {s.msg!r} followed by the axis")
    ctx.expect(f"= {s.to_local}" in body and "isinstance(data" not in body, f"{s.split} does not call {s.to_local} unconditionally")
    ctx.expect(not hasattr(torch.zeros(1), "to_local"), "a plain tensor has to_local")
    ctx.expect(s.split in ast.unparse(tree).split(f"def {s.split}", 1)[1].split("\n", 1)[1], f"{r.handle} never calls {s.split}")
    field, value = assignment(w.fix)
    from megatron.bridge.training.config import CheckpointConfig

    ctx.expect(dataclass_default(CheckpointConfig, field.split(".")[-1]) == w.default and value != w.default, f"{field} defaults otherwise")
    state = source_of(resolve_symbol("megatron.bridge.training.checkpointing.generate_state_dict"))
    ctx.expect(f"include_optimizer_state = ckpt_cfg.{field.split('.')[-1]} or is_loading" in state, "generate_state_dict does not leave the optimizer out with save_optim False")


@claim("fsdp-tp-metadata-ckpt")
def tp_metadata_ckpt(ctx: Context) -> None:
    r = ctx.read(
        "megatron-core's `{func:code}` finds a parameter's tensor-parallel dimension from `{mode:code}` (`{col:code}` is {col_dim:int}, `{row:code}` is {row_dim:int})"
        " and otherwise from the older attributes `{tmp:code}` and `{pdim:code}`, so weights split at save time (such as the gated delta net's in Qwen3.5) keep their tensor-parallel placement."
    )
    import torch

    func = resolve_symbol(r.func)

    def param(**attrs: Any) -> Any:
        p = torch.nn.Parameter(torch.zeros(2, 2))
        for k, v in attrs.items():
            setattr(p, k, v)
        return p

    ctx.expect(func(param(**{r.mode: literal(r.col)})) == r.col_dim, f"{r.col} is not dimension {r.col_dim}")
    ctx.expect(func(param(**{r.mode: literal(r.row)})) == r.row_dim, f"{r.row} is not dimension {r.row_dim}")
    for dim in (0, 1):
        ctx.expect(func(param(**{r.tmp: True, r.pdim: dim})) == dim, f"the legacy attributes do not give dimension {dim}")
    ctx.expect(func(param()) is None and func(param(**{r.pdim: 0})) is None, "a plain parameter gets a dimension")
    ctx.expect("tensor_model_parallel" in source_of(resolve_symbol("megatron.core.transformer.fsdp_dtensor_checkpoint.handle_gdn_in_state_dict")), "handle_gdn_in_state_dict sets no legacy TP attributes")


# --- known-issues.md ------------------------------------------------------------------------


@claim("fsdp-single-rank-grad-doubling")
def single_rank_grad_doubling(ctx: Context) -> None:
    r = ctx.read("megatron-core's `{func:code}` takes `{params:code}`, with no group size: the pinned release has no special case for a gradient buffer whose reduction group has one rank")
    ctx.says(
        "(a data-parallel size of one, or expert parallelism equal to data parallelism for the expert gradients).",
        "If gradient norms grow with the number of micro-batches in such a layout under",
        "change the layout so that group has more than one rank, and watch the gradient norm.",
    )
    s = ctx.read("micro-batches in such a layout under `{strategy:code}`,")
    func = resolve_symbol(r.func)
    got = tuple(inspect.signature(func).parameters)
    ctx.expect(got == tuple(p.strip() for p in r.params.strip().strip("()").split(",")), f"{r.func} takes {got}, not {r.params}")
    ctx.expect(not any("group" in p or "size" in p for p in got), f"{r.func} takes a group size")
    from megatron.core.distributed.fsdp.src.megatron_fsdp.fully_shard import ShardingStrategy

    ctx.expect(s.strategy.upper() in ShardingStrategy.__members__ and s.strategy == "optim_grads_params", f"{s.strategy} is not the full-sharding strategy")


@claim("fsdp-fully-shard-optimizer")
def fully_shard_optimizer(ctx: Context) -> None:
    r = ctx.read(
        "`{func:code}` (the standalone API, used outside Bridge) initialises optimizer state by giving every parameter a zero gradient and calling"
        " `{step:code}`, with the learning rate and weight decay untouched, so that step counts as a real one."
    )
    s = ctx.read("Bridge's training does not go through it: no module of `{pkg:code}` calls `{name:code}`, and Bridge builds its optimizer with `{builder:code}`.")
    func = resolve_symbol(r.func)
    tree = function_def(func)
    body = ast.unparse(tree)
    ctx.expect("param.grad = torch.zeros_like(param)" in body, f"{r.func} does not give parameters zero gradients")
    ctx.expect(f"{r.step}" in body and body.index("torch.zeros_like(param)") < body.index(r.step), f"{r.func} does not call {r.step} after that")
    ctx.expect("weight_decay" not in body and "'lr'" not in body and '"lr"' not in body, f"{r.func} touches the learning rate or weight decay")
    ctx.expect(s.name == func.__name__, f"SKILL.md names {s.name}")
    import megatron.bridge as bridge_pkg

    ctx.expect(s.pkg == bridge_pkg.__name__, f"SKILL.md names {s.pkg}")
    root = Path(bridge_pkg.__file__).parent
    users = [p for p in root.rglob("*.py") if s.name in p.read_text(errors="ignore")]
    ctx.expect(not users, f"{[str(u) for u in users]} use {s.name}")
    builder = resolve_symbol(s.builder)
    optim = module_of("megatron.bridge.training.optim")
    ctx.expect(getattr(optim, builder.__name__, None) is builder and f"{builder.__name__}(" in inspect.getsource(optim.setup_optimizer), f"Bridge's setup_optimizer does not call {s.builder}")


@claim("fsdp-moe-ep-mesh")
def moe_ep_mesh(ctx: Context) -> None:
    r = ctx.read(
        "Megatron FSDP in megatron-core supports expert parallelism: `{method:code}` builds a separate expert device mesh (`{mesh:code}`,"
        " over the expert data-parallel and expert tensor-parallel groups) whenever the model config sets `{field:code}`."
    )
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.distributed.fsdp import mcore_fsdp_adapter as adapter
    from megatron.core.transformer import TransformerConfig

    ctx.expect(r.method == "FullyShardedDataParallel._init_dist_index", f"SKILL.md names {r.method}")
    ctx.expect(r.field in {f.name for f in dataclasses.fields(TransformerConfig)}, f"the model config has no {r.field}")

    def index_for(experts: Any) -> dict[str, Any]:
        names = ("tp", "expt_tp", "dp_cp", "intra_dp_cp", "inter_dist_opt", "expt_dp", "intra_expt_dp", "ep")
        pg = types.SimpleNamespace(**{n: types.SimpleNamespace(name=n, size=lambda: 1, rank=lambda: 0) for n in names})
        owner = types.SimpleNamespace(ddp_config=DistributedDataParallelConfig(), **{r.field: experts})
        mesh = types.SimpleNamespace(tolist=lambda: [[0]])
        index: dict[str, Any] = {}
        with contextlib.ExitStack() as stack:
            stack.enter_context(mock.patch.object(adapter, "_get_hsdp_tp_mesh", lambda *a, **k: mesh))
            stack.enter_context(mock.patch.object(adapter, "_get_dp_tp_mesh", lambda *a, **k: mesh))
            stack.enter_context(mock.patch.object(adapter, "DeviceMesh", types.SimpleNamespace(from_group=lambda groups, **k: tuple(g.name for g in groups))))
            stack.enter_context(mock.patch.object(adapter, "FSDPDistributedIndex", lambda **kwargs: index.update(kwargs) or index))
            adapter.FullyShardedDataParallel._init_dist_index(owner, pg)
        return index

    with_experts, without = index_for(4), index_for(None)
    ctx.expect(without.get(r.mesh, "absent") is None, f"without experts {r.mesh} is {without.get(r.mesh, 'absent')!r}")
    ctx.expect(with_experts.get(r.mesh) == ("expt_dp", "expt_tp"), f"with experts {r.mesh} is {with_experts.get(r.mesh)!r}")


@claim("fsdp-cuda-graphs-compile")
def cuda_graphs_compile(ctx: Context) -> None:
    r = ctx.read(
        "The forward and backward hooks of `{cls:code}` (among them `{h1:code}`, `{h2:code}` and `{h3:code}`) are decorated with `{deco:code}`,"
        " so `{compile:code}` breaks the graph around Megatron FSDP's communication."
    )
    d = ctx.read("For full-iteration CUDA graphs the DDP config has `{f1:code}` (default {d1:bool}) and `{f2:code}` (default {d2:bool}).")
    s = ctx.read(
        "`{method:code}` all-gathers the first bucket without waiting for it whenever `{o1:code}` and `{o2:code}` are on, whatever `{o3:code}` says,"
        ' so with `{impl:code}` set it off yourself:'
    )
    from megatron.core.distributed.fsdp.src.megatron_fsdp.megatron_fsdp import MegatronFSDP

    ctx.expect(r.cls == MegatronFSDP.__name__, f"SKILL.md names {r.cls}")
    tree = ast.parse(textwrap.dedent(inspect.getsource(MegatronFSDP)))
    decorated = {n.name: [ast.unparse(x) for x in n.decorator_list] for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    ctx.expect(len({r.h1, r.h2, r.h3}) == 3 and "forward" in r.h1 and "backward" in r.h2, f"SKILL.md names {r.h1}, {r.h2}, {r.h3}")
    for hook in (r.h1, r.h2, r.h3):
        ctx.expect(r.deco in decorated.get(hook, []), f"{hook} is not decorated with {r.deco}")
    import torch

    ctx.expect(resolve_symbol(r.deco) is torch.compiler.disable, f"{r.deco} is not torch's compiler.disable")
    ctx.expect(resolve_symbol(r.compile) is torch.compile, f"{r.compile} is not torch.compile")
    for field, default in ((d.f1, d.d1), (d.f2, d.d2)):
        name = ddp_name(ctx, field)
        ctx.expect(ddp_default(name) == default, f"{name} defaults to {ddp_default(name)!r}")
    method = resolve_symbol(f"megatron.core.distributed.fsdp.src.megatron_fsdp.megatron_fsdp.{s.method}")
    body = ast.unparse(function_def(method))
    ctx.expect(s.o1 != s.o2 and s.o2 == ddp_name(ctx, d.f2) and s.o1 in ddp_defaults_names(), f"SKILL.md names {s.o1} and {s.o2}")
    for flag in (s.o1, s.o2):
        ctx.expect(f"self.ddp_config.{flag}" in body, f"{s.method} does not read {flag}")
    ctx.expect("wait_bucket_ready=False" in body and "list(self.module.parameters())[0]" in body, f"{s.method} does not gather the first bucket unawaited")
    ctx.expect(s.o3 not in body and s.o3 == ddp_name(ctx, d.f1), f"{s.method} reads {s.o3}")
    from megatron.core.transformer import TransformerConfig

    field, value = assignment(s.impl)
    ctx.expect(field in {f.name for f in dataclasses.fields(TransformerConfig)}, f"the model config has no {field}")
    ctx.expect(value in inspect.getsource(TransformerConfig), f"{value} is no cuda_graph_impl value")
    cfg = tiny_config()
    cfg.ddp.use_megatron_fsdp = True
    ctx.apply(cfg)
    values = {ddp_name(ctx, t): v for t, v in (assignment(line) for line in ctx.code().strip().splitlines())}
    ctx.expect(values == {ddp_name(ctx, d.f1): not d.d1, ddp_name(ctx, d.f2): not d.d2}, f"the block sets {values}")
    resolve(cfg)
    ctx.expect(all(getattr(cfg.ddp, k) == v for k, v in values.items()), "validation changes the block's values")


@claim("fsdp-double-buffer-fallback")
def double_buffer_fallback(ctx: Context) -> None:
    r = ctx.read(
        'With the double buffer, a bucket of an FSDP unit that does not fit the fixed pool is logged as "{msg:quote}" and loses user-buffer registration,'
        " unless `{persist:code}` (default {default:bool}) is {persist_on:bool}, which allocates it persistently instead."
    )
    m = ctx.read("`{maxpool:code}` turns `{db:code}` on in the DDP config's `{post:code}`.")
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.distributed.fsdp.src.megatron_fsdp import param_and_grad_buffer as pgb

    name = ddp_name(ctx, r.persist)
    ctx.expect(ddp_default(name) == r.default, f"{name} defaults to {ddp_default(name)!r}")
    ctx.expect(r.persist_on is not r.default, "SKILL.md turns the option to its default")
    init = ast.unparse(function_def(pgb.FixedPoolAllocator.__init__))
    logged = {n.value for n in ast.walk(function_def(pgb.FixedPoolAllocator.__init__)) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    ctx.expect(r.msg in logged, f"FixedPoolAllocator does not log {r.msg!r}")
    ctx.expect("fallback_to_persistent_buffer is False" in init, "the fallback does not depend on the persistent-buffer option")
    ctx.expect(f"fallback_to_persistent_buffer=self.ddp_config.{name}" in _squash(inspect.getsource(pgb)).replace("( ", "(").replace(" )", ")").replace("=(", "="), f"the buffers do not pass {name} as the fallback")
    field, value = assignment(m.maxpool)
    db = ddp_name(ctx, m.db)
    ctx.expect(m.post == "__post_init__", f"SKILL.md names {m.post}")
    on = DistributedDataParallelConfig(**{ddp_name(ctx, field): value})
    off = DistributedDataParallelConfig(**{ddp_name(ctx, field): not value})
    ctx.expect(getattr(on, db) is True and getattr(off, db) is False, f"{m.maxpool} leaves {db} {getattr(on, db)!r}")


@claim("fsdp-torch-fsdp2-unguarded")
def torch_fsdp2_unguarded(ctx: Context) -> None:
    r = ctx.read("`{flag:code}` (default {default:bool}) selects megatron-core's `{cls:code}`, a different wrapper from Megatron FSDP.")
    ctx.says("Bridge's validation does not carry Megatron-LM's FSDP2 argument checks:")
    v = ctx.read(
        "it accepts `{flag2:code}` with pipeline parallelism and with the distributed optimizer on, so those combinations fail, if at all, only at run time."
    )
    w = ctx.read("The wrapper accepts `{arg:code}` like the others. For sharded data parallelism in Bridge, use Megatron FSDP.")
    from megatron.bridge.training.config import DistributedInitConfig

    name = r.flag.split(".")[-1]
    ctx.expect(r.flag == f"cfg.dist.{name}" and v.flag2 == name, f"SKILL.md names {r.flag} / {v.flag2}")
    ctx.expect(dataclass_default(DistributedInitConfig, name) == r.default, f"{name} defaults otherwise")
    cls = resolve_symbol(f"megatron.core.distributed.{r.cls}")
    wrap = source_of(resolve_symbol("megatron.training.models.dist_utils._ddp_wrap"))
    ctx.expect(r.cls in wrap and name in wrap, f"_ddp_wrap does not pick {r.cls} for {name}")
    for layout in ({"pp": 2}, {}):
        cfg = tiny_config(distributed_optimizer=True, **layout)
        set_field(cfg, r.flag, True)
        resolve(cfg)
        ctx.expect(cfg.ddp.use_distributed_optimizer and cfg.model.pipeline_model_parallel_size == layout.get("pp", 1), "validation changed the layout")
    ctx.expect(w.arg in inspect.signature(cls.__init__).parameters, f"{r.cls} does not take {w.arg}")
    ctx.expect(f"{w.arg}=" in wrap, f"_ddp_wrap does not pass {w.arg}")


# --- launch-and-optimizers.md ---------------------------------------------------------------


def built_recipe(name: str) -> Any:
    """A recipe that reads a Hugging Face config, built offline around the tiny GPT."""
    from megatron.bridge.models.conversion.auto_bridge import AutoBridge
    from runner.claims.kit import collect_warnings

    class StandIn:
        def to_megatron_provider(self, load_weights: bool = False) -> Any:
            model = tiny_config().model
            model.num_layers = 80
            return model

    factory = resolve_symbol(name.strip().removesuffix("()"))
    with mock.patch.object(AutoBridge, "from_hf_pretrained", lambda *args, **kwargs: StandIn()), collect_warnings():
        return factory()


@claim("fsdp-nccl-ub-env-vars")
def nccl_ub_env_vars(ctx: Context) -> None:
    from runner.claims.kit import preserved_environ

    r = ctx.read("The launch variables of Bridge's hardware recipes, `{common:code}`, set `{nvls:code}` to {nvls_off:int}, since recipe baselines leave NCCL user buffers off.")
    f = ctx.read(
        "The Megatron FSDP reference recipe `{recipe:code}`, which sets `{ub:code}`, sets `{v1:code}` and `{v2:code}` to {on:int} in its `{env:code}`."
        " Bridge does not derive them from `{ub2:code}`: no module of `{pkg:code}` names them, so a config of your own that turns user buffers on sets them too:"
    )
    a = ctx.read(
        "`{apply:code}` applies `{env2:code}` with `{setdef:code}`, so a value the launcher exported wins, and Bridge's `{overlap:code}` does not set"
        " `{cdmc:code}` in the process at all: export launch variables from the launcher or put them in `{env3:code}`."
    )
    common = resolve_symbol(r.common)
    ctx.expect(isinstance(common, dict) and common.get(r.nvls) == r.nvls_off, f"{r.common}[{r.nvls}] is {common.get(r.nvls)!r}")
    ctx.expect("PYTORCH_CUDA_ALLOC_CONF" in common, f"{r.common} is not the recipes' launch variables")
    cfg = built_recipe(f.recipe)
    field, value = assignment(f.ub)
    ctx.expect(get_field(cfg, field) == value and f.ub2 == field.split(".")[-1], f"the recipe leaves {field} at {get_field(cfg, field)!r}")
    env = get_field(cfg, f.env)
    ctx.expect(f.v1 == r.nvls and f.v1 != f.v2, f"SKILL.md names {f.v1} and {f.v2}")
    ctx.expect(env.get(f.v1) == f.on and env.get(f.v2) == f.on, f"the recipe's env_vars hold {f.v1}={env.get(f.v1)!r}, {f.v2}={env.get(f.v2)!r}")
    import megatron.bridge.training as training_pkg

    ctx.expect(f.pkg == training_pkg.__name__, f"SKILL.md names {f.pkg}")
    root = Path(training_pkg.__file__).parent
    for var in (f.v1, f.v2):
        users = [str(p) for p in root.rglob("*.py") if var in p.read_text(errors="ignore")]
        ctx.expect(not users, f"{users} name {var}")
    own = tiny_config()
    ctx.apply(own)
    values = {k: v for k, v in own.env_vars.items()}
    ctx.expect(values == {f.v1: f.on, f.v2: f.on} and own.ddp.nccl_ub is True, f"the block leaves env_vars {values}")
    apply = resolve_symbol(a.apply.removesuffix("()"))
    ctx.expect(a.env2 == a.env3 == f.env and a.setdef == "os.environ.setdefault", f"SKILL.md names {a.env2} / {a.setdef}")
    ctx.expect(f"{a.setdef}(" in source_of(apply), f"{a.apply} does not use {a.setdef}")
    with preserved_environ():
        os.environ[f.v1] = "7"
        os.environ.pop(f.v2, None)
        apply(own)
        ctx.expect(os.environ[f.v1] == "7" and os.environ[f.v2] == str(f.on), "the launcher's value does not win, or the recipe's is not applied")
    update = source_of(resolve_symbol("megatron.bridge.training.config.runtime_config_update"))
    ctx.expect(apply.__name__ + "(" in update, "runtime_config_update does not apply env_vars")
    ctx.expect(a.cdmc not in inspect.getsource(module_of(a.overlap)), f"{a.overlap} sets {a.cdmc}")
    ctx.expect(module_of(a.overlap).__name__ == "megatron.bridge.training.comm_overlap", f"SKILL.md names {a.overlap}")


@claim("fsdp-emerging-optimizer")
def emerging_optimizer(ctx: Context) -> None:
    r = ctx.read(
        "Megatron-LM's own argument checks reject an optimizer other than `{sgd:code}` and `{adam:code}` with Megatron FSDP (\"{msg:quote}\"). Bridge has no such check:"
        " `{setup:code}` sends an optimizer whose name contains `{muon:code}` or `{soap:code}` to `{muon_fn:code}`, and a config with `{setting:code}`"
        " and Megatron FSDP passes validation, with the distributed optimizer turned on."
    )
    ctx.says("The combination is untested upstream: avoid it rather than wait for a clean error.")
    spec = importlib.util.find_spec("megatron.training.arguments")
    tree = ast.parse(Path(spec.origin).read_text())
    guard = [n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == f"args.optimizer not in ({r.sgd!r}, {r.adam!r})"]
    ctx.expect(len(guard) == 1, f"Megatron-LM's arguments do not test the optimizer against {r.sgd} and {r.adam}")
    asserts = {ast.unparse(n.test): n.msg.value for n in ast.walk(guard[0]) if isinstance(n, ast.Assert) and isinstance(n.msg, ast.Constant)}
    ctx.expect(asserts.get("not args.use_megatron_fsdp") == r.msg, f"the guard asserts {asserts}")
    setup = source_of(resolve_symbol(r.setup))
    ctx.expect(f'"{r.muon}" not in optimizer_config.optimizer and "{r.soap}" not in optimizer_config.optimizer' in setup, f"{r.setup} does not route {r.muon}/{r.soap}")
    ctx.expect(f"{r.muon_fn}(" in setup, f"{r.setup} does not call {r.muon_fn}")
    fsdp = source_of(resolve_symbol("megatron.bridge.training.config.ConfigContainer._validate_and_apply_megatron_fsdp_configs"))
    ctx.expect("optimizer.optimizer" not in fsdp, "Bridge's FSDP validation reads the optimizer name")
    field, value = assignment(r.setting)
    ctx.expect(value == r.muon, f"SKILL.md's example {r.setting} is not the {r.muon} optimizer")
    cfg = tiny_config()
    cfg.ddp.use_megatron_fsdp = True
    set_field(cfg, field, value)
    resolve(cfg)
    ctx.expect(cfg.ddp.use_distributed_optimizer and cfg.optimizer.use_distributed_optimizer and get_field(cfg, field) == value, "validation does not keep the optimizer with the distributed optimizer on")
