"""Checks for the sections of this skill that answer problems users reported upstream
(claim ids match the markers in its SKILL.md and references/). Same rule as the other
check modules: read each stated value from the sentence, compare it with the library.

Most of these problems surface only when the model is wrapped or a checkpoint is read, on
GPUs. What a CPU can run of that path is run here for real: the Megatron FSDP adapter's
constructor up to the point where it hands over to MegatronFSDP (process groups and the
MegatronFSDP core replaced by recorders), the parameter grouping and gradient buffers of
megatron-core's param_and_grad_buffer on a toy module, Bridge's checkpoint-format
detection and load on a folder made here, and torch's DCP partial loading. What only a
GPU run shows is checked as the code path the source takes (an assertion, a guard).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import fnmatch
import importlib
import importlib.util
import inspect
import os
import re
import sys
import tempfile
import textwrap
import types
import typing
from pathlib import Path
from typing import Any, Callable
from unittest import mock

from runner.claims.kit import MbskillsError
from runner.claims.kit import collect_warnings, preserved_environ, resolve, tiny_config
from .fsdp import assign, block_assignments, distinct, fsdp_config, lookup, passes, raises_exactly, relative, symbol
from runner.claims.kit import ClaimFailed, Context, assignment, claim, comparison, function_source, literal, raised, resolve_symbol, source_of, threshold

ADAPTER = "megatron.core.distributed.fsdp.mcore_fsdp_adapter"
BUFFER = "megatron.core.distributed.fsdp.src.megatron_fsdp.param_and_grad_buffer"
WRAP = "megatron.training.models.dist_utils._ddp_wrap"
CHECKPOINTING = "megatron.bridge.training.checkpointing"
CHECKPOINTS = "/tmp/mbskills-claim-check"
RECIPE = "fsdp-perf-recipe"


def _squash(text: Any) -> str:
    return " ".join(str(text).split())


def ast_of(obj: Any) -> ast.AST:
    return ast.parse(textwrap.dedent(inspect.getsource(obj)))


def strategies() -> list[str]:
    from megatron.core.distributed.fsdp.src.megatron_fsdp.fully_shard import ShardingStrategy

    return [m.lower() for m in ShardingStrategy.__members__]


def ddp_defaults() -> dict[str, Any]:
    from megatron.core.distributed import DistributedDataParallelConfig

    return {f.name: f.default for f in dataclasses.fields(DistributedDataParallelConfig)}


def ddp_field(ctx: Context, dotted: str) -> str:
    """`cfg.ddp.x` (or `x`) -> 'x', a field of DistributedDataParallelConfig."""
    parts = relative(dotted)
    name = parts[-1]
    ctx.expect(len(parts) == 1 or parts[:-1] == ["ddp"], f"{dotted} is not a cfg.ddp field")
    ctx.expect(name in ddp_defaults(), f"DistributedDataParallelConfig has no field {name}")
    return name


def strategy_value(ctx: Context, text: str) -> str:
    ctx.expect(text in strategies(), f"{text!r} is not one of Megatron FSDP's sharding strategies {strategies()}")
    return text


def raise_messages(tree: ast.AST, kind: str) -> list[tuple[ast.If | None, str]]:
    """(enclosing if, message text) of every `raise kind(...)` / `assert ..., msg` of kind."""
    found = []
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def text(node: ast.AST) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        if isinstance(node, ast.BinOp):
            return text(node.left) + text(node.right)
        return ""

    def enclosing(node: ast.AST) -> ast.If | None:
        while node in parents:
            node = parents[node]
            if isinstance(node, ast.If):
                return node
        return None

    for node in ast.walk(tree):
        if kind == "AssertionError" and isinstance(node, ast.Assert) and node.msg is not None:
            found.append((enclosing(node), text(node.msg), node))
        elif isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and ast.unparse(node.exc.func) == kind and node.exc.args:
            found.append((enclosing(node), text(node.exc.args[0]), node))
    return found


def guarded_raise(ctx: Context, tree: ast.AST, kind: type[BaseException], message: str, where: str):
    """The one raise/assert of `kind` in `tree` whose message starts with `message`."""
    hits = [(guard, node) for guard, text, node in raise_messages(tree, kind.__name__) if _squash(text).startswith(_squash(message))]
    ctx.expect(len(hits) == 1, f"{where} has {len(hits)} {kind.__name__}s saying {message!r}, not one")
    return hits[0]


# --- running the Megatron FSDP adapter's constructor on CPU -------------------------------


class _HandedOver(MbskillsError):
    """Raised by the MegatronFSDP stand-in: the adapter got as far as building the core."""


def adapter_handover(*, strategy: str = "optim_grads_params", fusion: bool = False, te_version: str | None = None, model: dict[str, Any] | None = None, **ddp: Any) -> dict[str, Any]:
    """Build megatron-core's FullyShardedDataParallel around a toy module, as far as the call
    of MegatronFSDP, and return the keyword arguments it passes there. Process groups are
    skipped (`_init_dist_index`); `te_version` is what megatron-core's version check sees."""
    import torch
    from megatron.core import utils as core_utils
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.distributed.fsdp import mcore_fsdp_adapter as adapter
    from megatron.core.transformer import TransformerConfig
    from packaging.version import Version

    seen: dict[str, Any] = {}

    def core(**kwargs: Any) -> None:
        seen.update(kwargs)
        raise _HandedOver

    config = TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, gradient_accumulation_fusion=fusion)
    for name, value in (model or {}).items():  # set after __post_init__, whose MoE checks a toy config cannot meet
        if not hasattr(config, name):
            raise ClaimFailed(f"the model config has no {name}")
        setattr(config, name, value)
    ddp_config = DistributedDataParallelConfig(use_megatron_fsdp=True, use_distributed_optimizer=True, data_parallel_sharding_strategy=strategy, **ddp)
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(adapter.FullyShardedDataParallel, "_init_dist_index", lambda self, pg_collection: None))
        stack.enter_context(mock.patch.object(adapter, "MegatronFSDP", core))
        stack.enter_context(mock.patch.object(core_utils, "_te_version", Version(te_version) if te_version else core_utils._te_version))
        try:
            adapter.FullyShardedDataParallel(config, ddp_config, torch.nn.Linear(4, 4), device=torch.device("cpu"))
        except _HandedOver:
            return seen
    raise ClaimFailed("megatron-core's FullyShardedDataParallel no longer hands over to MegatronFSDP")


def dist_index_for(instances: int, outer: str) -> dict[str, Any]:
    """What the adapter's `_init_dist_index` passes to FSDPDistributedIndex for a DDP config
    with `instances` optimizer instances and outer strategy `outer` (meshes recorded, not built)."""
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.distributed.fsdp import mcore_fsdp_adapter as adapter

    names = ("tp", "expt_tp", "dp_cp", "intra_dp_cp", "inter_dist_opt", "expt_dp", "intra_expt_dp", "ep")
    pg = types.SimpleNamespace(**{n: types.SimpleNamespace(name=n, size=lambda: 1, rank=lambda: 0) for n in names})
    owner = types.SimpleNamespace(ddp_config=DistributedDataParallelConfig(num_distributed_optimizer_instances=instances, outer_dp_sharding_strategy=outer), num_moe_experts=None)
    mesh = types.SimpleNamespace(tolist=lambda: [[0]])
    index: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(adapter, "_get_hsdp_tp_mesh", lambda *a, **k: mesh))
        stack.enter_context(mock.patch.object(adapter, "_get_dp_tp_mesh", lambda *a, **k: mesh))
        stack.enter_context(mock.patch.object(adapter, "DeviceMesh", types.SimpleNamespace(from_group=lambda groups, **k: tuple(g.name for g in groups))))
        stack.enter_context(mock.patch.object(adapter, "FSDPDistributedIndex", lambda **kwargs: index.update(kwargs) or index))
        adapter.FullyShardedDataParallel._init_dist_index(owner, pg)
    return index


def parameter_groups(module: Any, units: list, bucket_size: int | None) -> list[list[str]]:
    """megatron-core's own grouping of `module`'s parameters: names per group."""
    from megatron.core.distributed.fsdp.src.megatron_fsdp.param_and_grad_buffer import BucketingPolicy, _get_parameter_groups

    names = {p: n for n, p in module.named_parameters()}
    groups, _, _ = _get_parameter_groups(module, BucketingPolicy(suggested_bucket_size=bucket_size, fsdp_unit_modules=units, data_parallel_sharding_strategy="optim_grads"), {})
    return [sorted(names[p] for p in g.params) for g in groups]


def gradient_bucket(distributed: bool) -> tuple[int, int, int, bool]:
    """A DataParallelBuffer over four layers' parameters at two data-parallel ranks:
    (elements of the group, elements it keeps, elements of the bucket fetch_bucket() hands
    out, whether that bucket is the buffer's own memory)."""
    import torch
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.distributed.fsdp.src.megatron_fsdp import param_and_grad_buffer as pgb

    params = list(torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(4)]).parameters())
    with mock.patch.object(pgb.torch.distributed, "get_world_size", lambda group=None: 2):
        buffer = pgb.DataParallelBuffer(DistributedDataParallelConfig(), params, is_data_distributed=distributed, bucket_id=0, dtype=torch.float32, device=torch.device("cpu"), dp_rank=0)
    buffer.init_data(torch.zeros(buffer.data_size))
    bucket = buffer.fetch_bucket()
    again = buffer.fetch_bucket()
    if again.data.data_ptr() != bucket.data.data_ptr():
        raise ClaimFailed("fetch_bucket() hands out a new bucket on every access")
    return buffer.bucket_index.size, buffer.data_size, bucket.data.numel(), bucket.data.data_ptr() == buffer.data.data_ptr()


def grad_buffer_sharding() -> dict[str, bool]:
    """Strategy -> is_grad_buffer_distributed, from ParamAndGradBuffer's own if/elif chain."""
    from megatron.core.distributed.fsdp.src.megatron_fsdp.param_and_grad_buffer import ParamAndGradBuffer

    tree = ast_of(ParamAndGradBuffer._init_each_parameter_group_buffers)
    table: dict[str, bool] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and ast.unparse(node.test.left) == "data_parallel_sharding_strategy":
            value = ast.literal_eval(node.test.comparators[0])
            for statement in node.body:
                if isinstance(statement, ast.Assign) and ast.unparse(statement.targets[0]) == "is_grad_buffer_distributed":
                    table[value] = ast.literal_eval(statement.value)
    return table


# --- the claims ------------------------------------------------------------------------------


@claim("fsdp-optim-grads-memory")
def optim_grads_memory(ctx: Context) -> None:
    import torch

    r = ctx.read("A run with `{setting:code}` can run out of memory where `{ok_a:code}` and `{ok_b:code}` fit.")
    a = ctx.read(
        "megatron-core's `{adapter:code}` makes FSDP units of `{u1:code}`, `{u2:code}` and `{u3:code}` only under `{with_units:code}`;"
        " under every other strategy it makes none, and Bridge's wrap (`{wrap:code}`) passes no units of its own."
    )
    g = ctx.read(
        "Without units, the parameters of one dtype (experts and frozen ones apart) form one group unless `{size:code}` cuts it, and `{wrap_again:code}`"
        " sets that to {unset:word} whenever `{overlap:code}` is {off:bool}, so one group then spans the whole model."
    )
    b = ctx.read(
        "`{sharded:code}` shards the gradient buffer, `{unsharded:code}` does not, and a sharded gradient buffer hands each parameter"
        " its gradient inside a temporary unsharded bucket of the whole group, allocated on the first access to a gradient of that"
        " group; an unsharded buffer hands out its own memory."
    )
    d = ctx.read("With overlap on and no size set, `{wrap_default:code}` uses `{default_size:code}` elements instead.")
    f = ctx.read("Fix: `{fix_a:code}`, whose units give each layer its own groups, or `{fix_b:code}`.")

    field, bad = assignment(r.setting)
    ctx.expect(field == "data_parallel_sharding_strategy" and field in ddp_defaults(), f"{r.setting} does not set the sharding strategy")
    for name in (bad, r.ok_a, r.ok_b, a.with_units, b.sharded, b.unsharded, f.fix_a, f.fix_b):
        strategy_value(ctx, name)
    distinct(ctx, [bad, r.ok_a, r.ok_b], "a strategy")

    # The adapter itself, run on CPU up to MegatronFSDP: which units it hands over per strategy.
    adapter = resolve_symbol(a.adapter)
    wrap = resolve_symbol(a.wrap)
    ctx.expect(adapter is wrap.__globals__["FullyShardedDataParallel"], f"{a.adapter} is not the wrapper {a.wrap} builds")
    units = {s: [m.__name__ for m in adapter_handover(strategy=s)["fsdp_unit_modules"]] for s in strategies()}
    named = [a.u1, a.u2, a.u3]
    distinct(ctx, named, "a unit module")
    ctx.expect(sorted(units[a.with_units]) == sorted(named), f"under {a.with_units} the adapter makes units of {units[a.with_units]}, not {named}")
    others = {s: u for s, u in units.items() if s != a.with_units}
    ctx.expect(all(u == [] for u in others.values()), f"the adapter makes units under other strategies too: {others}")
    ctx.expect("fsdp_unit_modules" not in source_of(wrap) and "DP(" in source_of(wrap), f"{a.wrap} passes units of its own")

    # The grouping megatron-core does, on a toy module.
    class Experts(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.experts = torch.nn.Sequential(torch.nn.Linear(8, 8))

    plain = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(4)])
    every = sorted(n for n, _ in plain.named_parameters())
    ctx.expect(parameter_groups(plain, [], None) == [every], "without units or a bucket size, one dtype's parameters are not one group")
    ctx.expect(len(parameter_groups(plain, [], 100)) > 1, "a bucket size does not cut a group")
    mixed = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8).to(torch.bfloat16))
    ctx.expect(len(parameter_groups(mixed, [], None)) == 2, "parameters of two dtypes share a group")
    moe = torch.nn.Sequential(torch.nn.Linear(8, 8), Experts())
    ctx.expect(len(parameter_groups(moe, [], None)) == 2, "expert parameters share a group with the others")
    frozen = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8).requires_grad_(False))
    ctx.expect(len(parameter_groups(frozen, [], None)) == 2, "frozen parameters share a group with trained ones")
    per_layer = parameter_groups(plain, [torch.nn.Linear], None)
    ctx.expect(len(per_layer) == 4 and all(len({n.split(".")[0] for n in group}) == 1 for group in per_layer), f"units do not give each layer its own groups: {per_layer}")
    ctx.expect(f.fix_a == a.with_units, f"the fix {f.fix_a} is not the strategy with units, {a.with_units}")

    # _ddp_wrap: no bucket size when gradient reduction does not overlap.
    ctx.expect(g.wrap_again == a.wrap.rsplit(".", 1)[-1], f"SKILL.md names {g.wrap_again} where it named {a.wrap}")
    size, overlap = ddp_field(ctx, g.size), ddp_field(ctx, g.overlap)
    ctx.expect(ddp_defaults()[overlap] is False, f"{g.overlap} does not default to False")
    test = f"not ddp_config.{overlap}" if g.off is False else f"ddp_config.{overlap}"
    unset = literal(g.unset)
    from megatron.core.distributed.fsdp.src.megatron_fsdp.megatron_fsdp import MegatronFSDP

    core = source_of(MegatronFSDP)
    ctx.expect(f"self.bucket_size = self.ddp_config.{size}" in core and "suggested_bucket_size=self.bucket_size" in core, f"Megatron FSDP does not cut groups at {g.size}")
    cuts = [n for n in ast.walk(ast_of(wrap)) if isinstance(n, ast.If) and ast.unparse(n.test) == test and any(ast.unparse(s) == f"ddp_config.{size} = {unset!r}" for s in n.body)]
    ctx.expect(len(cuts) == 1, f"{a.wrap} does not set {size} to {unset!r} when {overlap} is {g.off}")
    ctx.expect(d.wrap_default == g.wrap_again, f"SKILL.md names {d.wrap_default} where it named {g.wrap_again}")
    stated = ast.unparse(ast.parse(d.default_size, mode="eval"))
    fills = [n for n in ast.walk(ast_of(wrap)) if isinstance(n, ast.If) and ast.unparse(n.test) == f"ddp_config.{size} is None" and any(ast.unparse(s) == f"ddp_config.{size} = {stated}" for s in n.body)]
    ctx.expect(len(fills) == 1 and fills[0].lineno < cuts[0].lineno, f"{a.wrap} does not default {size} to {stated} before the overlap check")

    # Which gradient buffers are sharded, and what a sharded one hands out.
    table = grad_buffer_sharding()
    ctx.expect(set(table) == set(strategies()), f"ParamAndGradBuffer's strategy table covers {sorted(table)}")
    ctx.expect(table[b.sharded] is True and table[b.unsharded] is False, f"the gradient buffer is sharded under {sorted(s for s, v in table.items() if v)}")
    ctx.expect(b.sharded == bad, f"SKILL.md explains {bad} with the buffer of {b.sharded}")
    ctx.expect({r.ok_a, r.ok_b} == {a.with_units, b.unsharded} and f.fix_b == b.unsharded, "the strategies that fit are not the one with units and the one with an unsharded gradient buffer")
    group, kept, handed, own = gradient_bucket(distributed=True)
    ctx.expect(kept < group and handed == group and not own, f"a sharded gradient buffer keeps {kept} of {group} elements and hands out {handed} (own memory: {own})")
    group, kept, handed, own = gradient_bucket(distributed=False)
    ctx.expect(kept == group and handed == group and own, "an unsharded gradient buffer does not hand out its own memory")
    from megatron.core.distributed.fsdp.src.megatron_fsdp.param_and_grad_buffer import ParamAndGradBuffer

    getter = source_of(ParamAndGradBuffer)
    ctx.expect("def main_grad_getter(p):" in getter and "bucket = gbuf.fetch_bucket(" in getter and "p.get_main_grad = main_grad_getter" in getter, "a parameter's gradient is no longer fetched from its group's bucket on access")


def field_doc(cls: type, name: str) -> str:
    """The docstring that follows a dataclass field in its class body."""
    body = ast_of(cls).body[0].body
    for index, node in enumerate(body[:-1]):
        following = body[index + 1]
        if isinstance(node, ast.AnnAssign) and ast.unparse(node.target) == name and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant):
            return _squash(following.value.value)
    raise ClaimFailed(f"{cls.__name__}.{name} has no docstring")


@claim("fsdp-hsdp")
def hsdp(ctx: Context) -> None:
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.distributed.fsdp.src.megatron_fsdp.megatron_fsdp import MegatronFSDP
    from megatron.core.distributed.fsdp.src.megatron_fsdp.param_and_grad_buffer import ParamAndGradBuffer

    r = ctx.read(
        "**Hybrid sharding (HSDP).** Megatron FSDP shards within groups of data-parallel ranks instead of across all of them"
        " when `{when:code}` (the number of groups; the default is {default:int})."
    )
    o = ctx.read(
        "Across the groups, `{outer:code}` decides: its default `{replicate:code}` replicates, and `{shard:code}`, the only other"
        " value megatron-core documents, shards the optimizer state across the groups as well."
    )
    v = ctx.read(
        "Bridge's `{validate:code}` checks neither field, nor `{strategy:code}`: any string passes, and the adapter treats every"
        " outer value other than `{replicate_again:code}` as sharding."
    )
    n = ctx.read("Outer sharding needs `{inner:code}` inside; with another strategy, building the wrapper raises `{error:code}`")
    d = ctx.read(
        "A group count that does not divide the data-parallel size times the context-parallel size passes validation too, and"
        " fails when megatron-core builds the process groups with `{error:code}`."
    )

    instances_path, op, bound = comparison(r.when)
    instances = ddp_field(ctx, instances_path)
    outer = ddp_field(ctx, o.outer)
    defaults = ddp_defaults()
    ctx.expect(defaults[instances] == r.default, f"{instances} defaults to {defaults[instances]}, not {r.default}")
    ctx.expect(defaults[outer] == o.replicate, f"{outer} defaults to {defaults[outer]!r}, not {o.replicate!r}")
    ctx.expect(v.replicate_again == o.replicate, f"SKILL.md names {v.replicate_again} where it named the default {o.replicate}")

    # The adapter's own mesh choice, at the boundary of the stated threshold.
    hybrid, flat = threshold(op, bound)
    grouped, whole = dist_index_for(hybrid, o.replicate), dist_index_for(flat, o.replicate)
    ctx.expect(grouped.get("dp_outer_dim") == "outer_fsdp_dp" and grouped["device_mesh"] == ("inter_dist_opt", "intra_dp_cp", "tp") and grouped["dp_shard_dim"] == "dp_cp", f"{instances}={hybrid} does not shard within the intra-instance groups: {grouped}")
    ctx.expect("dp_outer_dim" not in whole and whole["device_mesh"] == ("dp_cp", "tp"), f"{instances}={flat} does not shard across all data-parallel ranks: {whole}")
    ctx.expect("factor by which the DP domain is sharded" in field_doc(DistributedDataParallelConfig, instances), f"megatron-core does not document {instances} as the number of groups")
    ctx.expect("dp_outer_dim" not in dist_index_for(r.default, o.replicate), f"the default {r.default} turns hybrid sharding on")
    enable = [n for n in ast.walk(ast_of(resolve_symbol(f"{ADAPTER}.FullyShardedDataParallel._init_dist_index"))) if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "enable_hsdp"]
    ctx.expect(len(enable) == 1 and ast.unparse(enable[0].value) == f"self.ddp_config.{instances} {op} {bound!r}", "the adapter's HSDP switch is not the stated comparison")

    # What each outer value means: megatron-core's documentation, and the adapter's reading.
    doc = field_doc(DistributedDataParallelConfig, outer)
    listed = re.search(r"Valid values are ([^.]+)\.", doc)
    ctx.expect(listed is not None and set(re.findall(r"'(\w+)'", listed.group(1))) == {o.replicate, o.shard} and o.replicate != o.shard, f"megatron-core documents {doc!r} for {outer}")
    api = _squash(importlib.import_module("megatron.core.distributed.fsdp.src.megatron_fsdp.fully_shard").fully_shard_model.__doc__)
    ctx.expect(f"'{o.replicate}' / 0 (DP Replication)" in api and f"'{o.shard}' / 1 (Optimizer State Hybrid Sharding)" in api, f"megatron-core does not document {o.replicate} as replication and {o.shard} as optimizer-state sharding")
    ctx.expect(dist_index_for(hybrid, o.replicate)["hsdp_outer_dp_shard"] is False and dist_index_for(hybrid, o.shard)["hsdp_outer_dp_shard"] is True, f"the adapter does not read {o.replicate} as replication and {o.shard} as sharding")
    ctx.expect(dist_index_for(hybrid, "mbskills-any-string")["hsdp_outer_dp_shard"] is True, f"the adapter reads a value other than {o.replicate} as no sharding")

    # What validation checks: nothing of the three.
    ctx.expect(symbol(v.validate) is resolve_symbol("megatron.bridge.training.config.ConfigContainer.validate"), f"{v.validate} is not ConfigContainer.validate")
    strategy = ddp_field(ctx, v.strategy)
    ctx.expect(strategy == "data_parallel_sharding_strategy", f"{v.strategy} is not the sharding strategy")
    for target, value in ((outer, "mbskills-any-string"), (strategy, "mbskills-any-string"), (instances, 3)):
        cfg = fsdp_config(ctx)
        assign(cfg, f"ddp.{target}", value)
        passes(ctx, lambda cfg=cfg: resolve(cfg, world_size=8), f"{target}={value!r}")
        ctx.expect(getattr(cfg.ddp, target) == value, f"validation changes {target}={value!r}")

    # Outer sharding with another inner strategy: the buffer the wrapper builds refuses it.
    kind, message = raised(n.error)
    strategy_value(ctx, n.inner)
    build = ast_of(ParamAndGradBuffer._init_each_parameter_group_buffers)
    guard, _ = guarded_raise(ctx, build, kind, message, "ParamAndGradBuffer")
    ctx.expect(guard is not None and _squash(ast.unparse(guard.test)) == f"should_create_hfsdp_helper_buffers and self.ddp_config.data_parallel_sharding_strategy != '{n.inner}'", f"the {kind.__name__} is raised under {ast.unparse(guard.test) if guard else None}")
    helper = [x for x in ast.walk(build) if isinstance(x, ast.Assign) and ast.unparse(x.targets[0]) == "should_create_hfsdp_helper_buffers"]
    ctx.expect(len(helper) == 1 and _squash(ast.unparse(helper[0].value)) == f"self.dist_index.use_hybrid_fsdp and self.ddp_config.{outer} != '{o.replicate}'", "the outer-sharding switch of ParamAndGradBuffer changed")
    ctx.expect("self._init_each_parameter_group_buffers(" in source_of(ParamAndGradBuffer.__init__) and "ParamAndGradBuffer(" in source_of(MegatronFSDP), "building the wrapper does not build those buffers")

    # A count that does not divide DP x CP: validation lets it through (above), process-group setup does not.
    kind, message = raised(d.error)
    _, node = guarded_raise(ctx, ast_of(parallel_state.initialize_model_parallel), kind, message, "initialize_model_parallel")
    ctx.expect(_squash(ast.unparse(node.test)) == f"data_parallel_size * context_parallel_size % {instances} == 0", f"initialize_model_parallel asserts {ast.unparse(node.test)}")
    init = source_of(resolve_symbol("megatron.bridge.training.initialize.torch_dist_init"))
    setup = source_of(resolve_symbol("megatron.bridge.training.initialize._initialize_distributed"))
    ctx.expect("_initialize_distributed(" in init and f"{instances}={instances}" in setup and "parallel_state.initialize_model_parallel(" in setup, f"Bridge's process-group setup does not pass {instances} to initialize_model_parallel")
    from megatron.bridge.training.config import DistributedInitConfig

    ctx.expect({f.name: f.default for f in dataclasses.fields(DistributedInitConfig)}["use_decentralized_pg"] is False, "Bridge no longer builds process groups through initialize_model_parallel by default")


@claim("fsdp-nccl-ub")
def nccl_ub(ctx: Context) -> None:
    from megatron.core.distributed.fsdp.src.megatron_fsdp.param_and_grad_buffer import ParamAndGradBuffer

    r = ctx.read(
        "**NCCL user buffers.** With `{setting:code}`, Bridge's validation turns on `{manual:code}` (Bridge then registers the"
        " buffers once, after the first training step) but leaves `{double:code}` as it is, {default:bool} by default; the"
        " Megatron-LM command line sets both."
    )
    n = ctx.read("Megatron FSDP turns the double buffer on itself: its parameter buffer sets `{sets:code}` as it is built with user buffers, before the check that user buffers need it.")
    m = ctx.read("Manual registration without user buffers fails validation: `{alone:code}` alone raises `{error:code}`. On the config, one line turns user buffers on:")

    ub, on = assignment(r.setting)
    ub, manual, double = ddp_field(ctx, ub), ddp_field(ctx, r.manual), ddp_field(ctx, r.double)
    distinct(ctx, [ub, manual, double], "a field")
    ctx.expect(on is True, f"{r.setting} does not turn user buffers on")
    defaults = ddp_defaults()
    ctx.expect(defaults[double] is r.default and defaults[manual] is False and defaults[ub] is False, f"{double} defaults to {defaults[double]}, not {r.default}")

    # Bridge's validation: manual registration on, the double buffer left alone.
    cfg = fsdp_config(ctx)
    assign(cfg, f"ddp.{ub}", on)
    passes(ctx, lambda: resolve(cfg), r.setting)
    ctx.expect(getattr(cfg.ddp, manual) is True and getattr(cfg.ddp, double) is r.default, f"with {r.setting} validation leaves {manual}={getattr(cfg.ddp, manual)}, {double}={getattr(cfg.ddp, double)}")
    # ... which registers once, after the first step (train.py imports GPU-only packages: read its file).
    step = function_source("megatron.bridge.training.train", "train")
    ctx.expect("if global_state.train_state.step == start_iteration + 1 and config.ddp.use_megatron_fsdp: _maybe_register_fsdp_buffers(config, model)" in step, "Bridge does not register the buffers after the first training step")
    register = function_source("megatron.bridge.training.train", "_maybe_register_fsdp_buffers")
    ctx.expect(f"config.ddp.{manual}" in register and "fsdp_param_and_grad_buffer.manual_buffer_registration()" in register, f"Bridge's registration does not follow {manual}")
    ctx.expect('assert not self.already_registered, "Mem pool is already registered"' in source_of(ParamAndGradBuffer.manual_buffer_registration), "the buffers can be registered more than once")
    # Megatron-LM's argument checks set both.
    cli = ast_of(resolve_symbol("megatron.training.arguments.validate_args"))
    sets = [node for node in ast.walk(cli) if isinstance(node, ast.If) and ast.unparse(node.test) == f"args.{ub}"]
    assigned = {ast.unparse(s) for node in sets for s in node.body if isinstance(s, ast.Assign)}
    ctx.expect({f"args.{manual} = True", f"args.{double} = True"} <= assigned, f"Megatron-LM's validate_args sets {sorted(assigned)} under {ub}")

    # The adapter hands the config over unchanged; the buffer's constructor turns the double
    # buffer on under user buffers, before it builds the groups whose check asserts it.
    handed = adapter_handover(**{ub: True})["ddp_config"]
    ctx.expect(getattr(handed, double) is r.default, f"the adapter turns {double} on by itself")
    target, value = assignment(n.sets)
    ctx.expect(target == double and value is True, f"{n.sets} is not {double} turned on")
    init = ast_of(ParamAndGradBuffer.__init__)
    turned = [node for node in ast.walk(init) if isinstance(node, ast.If) and ast.unparse(node.test) == f"self.ddp_config.{ub}" and f"self.ddp_config.{double} = True" in {ast.unparse(x) for x in node.body}]
    builds = [node for node in ast.walk(init) if isinstance(node, ast.Call) and ast.unparse(node.func) == "self._init_each_parameter_group_buffers"]
    ctx.expect(len(turned) == 1 and builds and turned[0].lineno < min(b.lineno for b in builds), f"ParamAndGradBuffer.__init__ does not set {double} under {ub} before building its groups")
    guard, node = guarded_raise(ctx, ast_of(ParamAndGradBuffer._init_each_parameter_group_buffers), AssertionError, "NCCL UB is only supported with FSDP double buffer.", "ParamAndGradBuffer")
    ctx.expect(guard is not None and ast.unparse(guard.test) == f"self.ddp_config.{ub}" and ast.unparse(node.test) == f"self.ddp_config.{double}", f"ParamAndGradBuffer does not check {double} under {ub}")

    # Manual registration alone.
    target, value = assignment(m.alone)
    ctx.expect(ddp_field(ctx, target) == manual and value is True, f"{m.alone} is not manual registration on")
    kind, message = raised(m.error)
    cfg = fsdp_config(ctx)
    assign(cfg, target, value)
    raises_exactly(ctx, lambda: resolve(cfg), kind, message)

    # The block: user buffers on, which passes validation with manual registration on.
    block = block_assignments(ctx.code(0))
    ctx.expect({".".join(relative(t)): v for t, v in block.items()} == {f"ddp.{ub}": True}, f"the block sets {block}, not {ub} alone")
    cfg = ctx.apply(fsdp_config(ctx))
    passes(ctx, lambda: resolve(cfg), "the block")
    ctx.expect(getattr(cfg.ddp, ub) is True and getattr(cfg.ddp, manual) is True, "after the block and validation, user buffers and manual registration are not on")
    _nccl_ub_allocator(ctx, ub)


def _torch_at(version: str):
    """megatron-core's torch version checks see `version` for this block."""
    from megatron.core import utils as core_utils
    from packaging.version import Version

    return mock.patch.object(core_utils, "_torch_version", Version(version))


def _nccl_ub_allocator(ctx: Context, ub: str) -> None:
    """The allocator setting megatron-core refuses next to user buffers on older PyTorch,
    which Bridge's hardware recipes put in `cfg.env_vars`."""
    import importlib.metadata

    from packaging.requirements import Requirement

    a = ctx.read(
        "The allocator setting must allow it. With PyTorch older than {torch_min:version}, megatron-core's DDP config refuses"
        " user buffers when the environment holds `{env:code}`: validation fails with `{error:code}`"
    )
    b = ctx.read("Bridge accepts PyTorch {bridge_min:version} and newer, and its hardware recipes put that value in `{where:code}` (from `{common:code}`), which `{updater:code}` applies before it validates.")
    f = ctx.read("Fix: on such a recipe, `{removal:code}` and keep the launcher from exporting it, or PyTorch {fixed:version} or newer.")
    var, _, value = a.env.partition("=")
    kind, message = raised(a.error)
    older = version_below(a.torch_min)

    def build(env_vars: dict[str, str]) -> Any:
        cfg = fsdp_config(ctx)
        assign(cfg, f"ddp.{ub}", True)
        cfg.env_vars = dict(env_vars)
        return cfg

    with preserved_environ():
        os.environ.pop(var, None)
        with _torch_at(older):
            raises_exactly(ctx, lambda: resolve(build({var: value})), kind, message)
            passes(ctx, lambda: resolve(build({})), "user buffers without the allocator setting")
        with _torch_at(a.torch_min):
            passes(ctx, lambda: resolve(build({var: value})), f"user buffers with {a.env} on PyTorch {a.torch_min}")
    ctx.expect(f.fixed == a.torch_min, f"the fix names PyTorch {f.fixed}, the refusal {a.torch_min}")
    # Bridge's own floor is below the version the refusal needs.
    floors = [Requirement(r) for r in importlib.metadata.requires("megatron-bridge") or [] if Requirement(r).name == "torch" and not Requirement(r).marker]
    ctx.expect(len(floors) == 1 and floors[0].specifier.contains(b.bridge_min) and not floors[0].specifier.contains(version_below(b.bridge_min)), f"megatron-bridge requires {[str(x) for x in floors]}, not torch>={b.bridge_min}")
    ctx.expect(floors[0].specifier.contains(older), f"Bridge does not accept PyTorch {older}")
    # The recipes' shared environment holds the value; the updater applies env_vars first.
    module, _, name = b.common.rpartition(".")
    common = getattr(importlib.import_module(module), name)
    ctx.expect(str(common.get(var)) == value, f"{b.common} sets {var}={common.get(var)!r}, not {value}")
    users = [p for p in Path(importlib.util.find_spec("megatron.bridge.recipes").origin).parent.rglob("*.py") if f"**{name}" in p.read_text("utf-8")]
    ctx.expect(bool(users), f"no recipe spreads {name} into its env_vars")
    ctx.expect(b.where == "cfg.env_vars" and b.updater == "runtime_config_update()", f"SKILL.md names {b.where} / {b.updater}")
    # The fix: pop the recipe's entry; a value the launcher exported still trips it.
    call_node = ast.parse(f.removal, mode="eval").body
    ctx.expect(isinstance(call_node, ast.Call) and ast.unparse(call_node.func) == "cfg.env_vars.pop" and [ast.literal_eval(x) for x in call_node.args] == [var, None], f"{f.removal} does not remove {var} from cfg.env_vars")
    with preserved_environ(), _torch_at(older):
        os.environ.pop(var, None)
        cfg = build({var: value, "OTHER_VAR": "1"})
        cfg.env_vars.pop(var, None)
        passes(ctx, lambda: resolve(cfg), f"the recipe's env_vars after {f.removal}")
        os.environ[var] = value
        cfg = build({})
        raises_exactly(ctx, lambda: resolve(cfg), kind, message)


def version_below(text: str) -> str:
    """The nearest version below `text` that megatron-core would compare as older: 2.10 -> 2.9.99."""
    parts = [int(p) for p in text.split(".")]
    for index in range(len(parts) - 1, -1, -1):
        if parts[index] > 0:
            return ".".join(str(p) for p in parts[:index] + [parts[index] - 1]) + ".99"
    raise ClaimFailed(f"no version is below {text}")


@contextlib.contextmanager
def importable(**present: bool):
    """Make each named module importable (a stand-in) or not, for this block only."""
    saved = {name: sys.modules.get(name) for name in present}
    try:
        for name, there in present.items():
            sys.modules[name] = types.ModuleType(name) if there else None
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


@claim("fsdp-grad-accum-fusion")
def grad_accum_fusion(ctx: Context) -> None:
    from megatron.core.transformer import TransformerConfig

    r = ctx.read(
        "**Gradient accumulation fusion needs Transformer Engine {needed:version}.** With `{setting:code}` in the model config,"
        " the Megatron FSDP wrapper checks `{check:code}` as it is built and otherwise fails with `{error:code}`"
    )
    p = ctx.read(
        "Bridge's `{p1:code}` and `{p2:code}` default the field to `{default:code}`, which is {value:bool} whenever `{te:code}` or"
        " APEX's `{apex:code}` imports, whatever the version, and validation does not look at it, so a container with an older"
        " Transformer Engine fails only when the model is wrapped."
    )
    f = ctx.read("Fix: `{fix:code}`, as the reference recipe below does, or Transformer Engine {newer:version} or newer.")

    field, fused = assignment(r.setting)
    ctx.expect(field in {x.name for x in dataclasses.fields(TransformerConfig)}, f"the model config has no {field}")
    call_node = ast.parse(r.check, mode="eval").body
    ctx.expect(isinstance(call_node, ast.Call) and ast.unparse(call_node.func) == "is_te_min_version" and len(call_node.args) == 1, f"{r.check} is not a TE version check")
    checked = ast.literal_eval(call_node.args[0])
    ctx.expect(checked == r.needed == f.newer, f"SKILL.md states the TE version as {r.needed}, {checked} and {f.newer}")
    adapter = ast_of(resolve_symbol(f"{ADAPTER}.FullyShardedDataParallel.__init__"))
    guards = [n for n in ast.walk(adapter) if isinstance(n, ast.If) and ast.unparse(n.test) == f"config.{field}" and any(isinstance(s, ast.Assert) and ast.unparse(s.test) == ast.unparse(call_node) for s in n.body)]
    ctx.expect(len(guards) == 1, f"the adapter does not check {r.check} under {field}")

    # The adapter's constructor on CPU: at the stated version it builds, just below it asserts.
    kind, message = raised(r.error)
    adapter_handover(fusion=fused, te_version=r.needed)
    raises_exactly(ctx, lambda: adapter_handover(fusion=fused, te_version=version_below(r.needed)), kind, message)
    adapter_handover(fusion=not fused, te_version=version_below(r.needed))

    # Bridge's default for the field, and what it depends on.
    default = resolve_symbol(p.default.removesuffix("()"))
    distinct(ctx, [p.p1, p.p2], "a provider")
    for name in (p.p1, p.p2):
        provider = resolve_symbol(f"megatron.bridge.models.{name}")
        spec = {x.name: x for x in dataclasses.fields(provider)}.get(field)
        ctx.expect(spec is not None and spec.default_factory is default, f"{name}.{field} does not default to {p.default}")
    ctx.expect(p.te != p.apex, "SKILL.md names one module twice")
    te_root = p.te.split(".")[0]
    with importable(**{te_root: True, p.te: True, p.apex: False}):
        ctx.expect(default() is p.value, f"{p.default} is not {p.value} with {p.te} importable")
    with importable(**{te_root: False, p.te: False, p.apex: True}):
        ctx.expect(default() is p.value, f"{p.default} is not {p.value} with {p.apex} importable")
    with importable(**{te_root: False, p.te: False, p.apex: False}), collect_warnings():
        ctx.expect(default() is (not p.value), f"{p.default} is {p.value} with neither importable")
    ctx.expect(p.value == fused, f"the default {p.value} is not the value that trips the check")
    cfg = fsdp_config(ctx)
    assign(cfg, f"model.{field}", fused)
    passes(ctx, lambda: resolve(cfg), f"model.{field}={fused}")
    ctx.expect(getattr(cfg.model, field) == fused, f"validation changes {field}")

    # The fix: the reference recipe's value, and it builds at any TE version.
    target, value = assignment(f.fix)
    ctx.expect(relative(target) == ["model", field] and value == (not fused), f"{f.fix} does not turn {field} off")
    recipe, _ = reference_recipe(ctx)
    ctx.expect(lookup(recipe, target) == value, f"the reference recipe sets {target} to {lookup(recipe, target)!r}")


REFERENCE = "A reference: `{recipe:code}`."
STAND_IN_LAYERS = 80  # Llama 3 70B's depth: the recipe offloads activations of 30 layers


def reference_recipe(ctx: Context) -> tuple[Any, Callable[[], Any]]:
    """The performance recipe the skill names (in its fsdp-perf-recipe section), built offline:
    the Hugging Face config it reads becomes a small GPT stand-in of the same depth."""
    from megatron.bridge.models.conversion.auto_bridge import AutoBridge

    source = ctx if ctx.section.claim_id == RECIPE else ctx.sibling(RECIPE)
    name = source.read(REFERENCE).recipe
    factory = resolve_symbol(name.removesuffix("()"))

    class StandIn:
        def to_megatron_provider(self, load_weights: bool = False) -> Any:
            model = tiny_config().model
            model.num_layers = STAND_IN_LAYERS
            return model

    with mock.patch.object(AutoBridge, "from_hf_pretrained", lambda *args, **kwargs: StandIn()), collect_warnings():
        return factory(), factory


def own_assignments(func: Callable) -> dict[str, str]:
    """target -> source of the value, for the assignments in `func`'s own body."""
    out = {}
    for node in ast.walk(ast_of(func)):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            out[ast.unparse(node.targets[0])] = ast.unparse(node.value)
    return out


@claim(RECIPE)
def perf_recipe(ctx: Context) -> None:
    from megatron.bridge.training.config import CheckpointConfig

    from .fsdp import shipped_by

    ctx.says("The wheel ships complete Megatron FSDP performance recipes.")
    ctx.read(REFERENCE)
    s = ctx.read("These are all the `{ddp:code}` settings in its own body, with its meta-device initialisation and fusion off:")
    e = ctx.read("Its launch variables are in `{env:code}`, among them `{var:code}`.")
    c = ctx.read(
        "Checkpointing is off in it (`{save:code}` and `{load:code}` are {none:word}), which is why it can keep the default"
        " `{fmt:code}`; set `{fix:code}` before you turn saving on."
    )
    v = ctx.read("Built offline around a small stand-in model, with RoPE fusion off where Transformer Engine is absent, it passes Bridge's validation at {ranks:int} ranks.")

    cfg, factory = reference_recipe(ctx)
    ctx.expect(shipped_by(factory, "megatron-bridge") and ".perf_recipes." in factory.__module__, f"{factory.__qualname__} is not one of the wheel's performance recipes")
    ctx.expect(cfg.ddp.use_megatron_fsdp is True, "the reference recipe does not use Megatron FSDP")

    block = block_assignments(ctx.code(0))
    own = own_assignments(factory)
    prefix = s.ddp + "."
    said = {t for t in block if t.startswith(prefix)}
    made = {t for t in own if t.startswith(prefix)}
    ctx.expect(said == made, f"the recipe's own {s.ddp} settings are {sorted(made)}, the block lists {sorted(said)}")
    for target, value in block.items():
        ctx.expect(lookup(cfg, target) == value, f"the recipe leaves {target} = {lookup(cfg, target)!r}, not {value!r}")
    rest = {t: val for t, val in block.items() if not t.startswith(prefix)}
    ctx.expect(rest == {"cfg.model.init_model_with_meta_device": True, "cfg.model.gradient_accumulation_fusion": False} and set(rest) <= set(own), f"the block's other settings {rest} are not the recipe's meta-device initialisation and fusion off")

    name, value = assignment(e.var)
    env = lookup(cfg, e.env)
    ctx.expect(isinstance(env, dict) and env.get(name) == value and len(env) > 1, f"the recipe's {e.env} has {name}={env.get(name) if isinstance(env, dict) else env!r}")

    unset = literal(c.none)
    distinct(ctx, [c.save, c.load], "a checkpoint setting")
    for where in (c.save, c.load):
        ctx.expect(lookup(cfg, where) is unset, f"the recipe sets {where} to {lookup(cfg, where)!r}")
    fmt_field, fmt = assignment(c.fix)
    defaults = {x.name: x.default for x in dataclasses.fields(CheckpointConfig)}
    ctx.expect(relative(fmt_field) == ["checkpoint", c.fmt] and lookup(cfg, fmt_field) == defaults[c.fmt], f"the recipe does not keep the default {c.fmt}")

    ctx.expect(f"_{v.ranks}gpu_" in factory.__name__, f"{factory.__name__} is not the recipe for {v.ranks} GPUs")
    if importlib.util.find_spec("transformer_engine") is None:
        ctx.expect(cfg.model.apply_rope_fusion is True, "the recipe does not ask for RoPE fusion")
        ctx.expect_raises(lambda: resolve(reference_recipe(ctx)[0], world_size=v.ranks), ValueError, "apply_rope_fusion is not available")
    cfg.model.apply_rope_fusion = False
    cfg.dataset.seq_length = cfg.model.seq_length
    checked = resolve(cfg, world_size=v.ranks)
    ctx.expect(checked.data_parallel_size == v.ranks and checked.ddp.fsdp_manual_registration is True, f"at {v.ranks} ranks the recipe validates to DP={checked.data_parallel_size}")

    saving, _ = reference_recipe(ctx)
    saving.model.apply_rope_fusion = False
    saving.dataset.seq_length = saving.model.seq_length
    assign(saving, c.save, CHECKPOINTS)
    ctx.expect_raises(lambda: resolve(saving, world_size=v.ranks), AssertionError, "Megatron-FSDP requires the fsdp_dtensor checkpointing format!")
    saving, _ = reference_recipe(ctx)
    saving.model.apply_rope_fusion = False
    saving.dataset.seq_length = saving.model.seq_length
    assign(saving, c.save, CHECKPOINTS)
    assign(saving, fmt_field, fmt)
    passes(ctx, lambda: resolve(saving, world_size=v.ranks), f"the recipe saving with {c.fix}")


def saved_dcp(folder: str, state: dict) -> None:
    """A PyTorch DCP checkpoint of `state` in `folder`, written in this process (no process group)."""
    import torch.distributed.checkpoint as dcp

    with collect_warnings(), open(os.devnull, "w") as sink, contextlib.redirect_stderr(sink):
        dcp.save(state, storage_writer=dcp.FileSystemWriter(folder))


@claim("fsdp-checkpoint-hf-sidecar")
def checkpoint_hf_sidecar(ctx: Context) -> None:
    r = ctx.read("`{setting:code}` cannot be combined with Megatron FSDP.")
    a = ctx.read("With `{fmt:code}`, validation raises `{error:code}` whether or not `{save:code}` is set: `{finalize:code}` looks at the format only.")
    b = ctx.read("With `{fmt:code}` and `{save:code}` set, the FSDP check fails instead, with `{error:code}`.")
    ctx.expect(a.save == b.save, f"the two sentences name {a.save} and {b.save}")
    r = types.SimpleNamespace(setting=r.setting, save=a.save)
    ctx.says("Export after training instead, as the next section describes.")
    target, value = assignment(r.setting)
    ctx.expect(relative(target)[0] == "checkpoint" and value is True, f"{r.setting} does not turn the Hugging Face export on")
    formats = []
    for said in (a, b):
        fmt_field, fmt = assignment(said.fmt)
        formats.append(fmt)
        kind, message = raised(said.error)
        cfg = fsdp_config(ctx)
        assign(cfg, target, value)
        assign(cfg, r.save, CHECKPOINTS)
        assign(cfg, f"checkpoint.{fmt_field}", fmt)
        raises_exactly(ctx, lambda cfg=cfg: resolve(cfg), kind, message)
        cfg = fsdp_config(ctx)
        assign(cfg, r.save, CHECKPOINTS)
        assign(cfg, f"checkpoint.{fmt_field}", fmt)
        if kind is ValueError:  # the export is what fails: without it this format saves
            passes(ctx, lambda cfg=cfg: resolve(cfg), f"saving {fmt} without {r.setting}")
            # ... and it fails the same with nothing saved or loaded: finalize() reads the format only
            cfg = fsdp_config(ctx)
            assign(cfg, target, value)
            assign(cfg, f"checkpoint.{fmt_field}", fmt)
            ctx.expect(cfg.checkpoint.save is None and cfg.checkpoint.load is None, "the FSDP config saves or loads")
            raises_exactly(ctx, lambda cfg=cfg: resolve(cfg), kind, message)
            ctx.expect(a.finalize == "CheckpointConfig.finalize()", f"SKILL.md names {a.finalize}")
            from megatron.bridge.training.config import CheckpointConfig as _Ckpt

            checkpoint = _Ckpt(**{relative(target)[1]: value, fmt_field: fmt})
            raises_exactly(ctx, checkpoint.finalize, kind, message)
    distinct(ctx, formats, "a format")
    ctx.expect(formats[0] == "fsdp_dtensor", f"the first format named, {formats[0]}, is not the one Megatron FSDP saves")
    from megatron.bridge.training.config import CheckpointConfig

    allowed = typing.get_args(typing.get_type_hints(CheckpointConfig)["ckpt_format"])
    advised = re.findall(r"Use ckpt_format='(\w+)'", raised(a.error)[1])
    ctx.expect(formats[1] in allowed and advised == [formats[1]], f"{formats[1]} is not the format the ValueError advises ({advised}) among {allowed}")
    section = ctx.sibling("fsdp-checkpoint-hf-export")
    ctx.expect(section.section.path == ctx.section.path and section.section.line > ctx.section.line, "the export is not described in the next section")


@claim("fsdp-checkpoint-hf-export")
def checkpoint_hf_export(ctx: Context) -> None:
    import torch
    from megatron.bridge.training import checkpointing, model_load_save
    from megatron.bridge.training.config import CheckpointConfig

    r = ctx.read(
        "`{export:code}` cannot read an `{fmt:code}` checkpoint: it loads through `{loader:code}`, which reads only megatron-core"
        " distributed checkpoints and, given an `{fmt_again:code}` folder, raises `{exc:code}` saying the folder \"{message:quote}\"."
    )
    w = ctx.read(
        "Load it the way training resumes instead: build the model wrapped in Megatron FSDP, whose DTensor state dict the loader"
        " expects, load it with `{load:code}`, with `{load_field:code}` at the checkpoint and the settings below, then write it with"
        " `{save:code}`, whose export gathers each sharded `{dtensor:code}` into a full tensor."
    )
    f = ctx.read(
        "With `{finetune:code}` the loader asks the checkpoint for the model weights only, with no optimizer, scheduler, RNG or"
        " rerun state (so `{skip_a:code}` and `{skip_b:code}` are not consulted), and resets the iteration to {step:int}."
    )
    bridge_cls = "megatron.bridge.models.conversion.auto_bridge."
    ctx.expect(r.fmt == r.fmt_again == "fsdp_dtensor", f"SKILL.md names {r.fmt} and {r.fmt_again}")

    # The export path: export_ckpt -> load_megatron_model -> build_and_load_model -> the loader.
    export = source_of(resolve_symbol(bridge_cls + r.export.removesuffix("()")))
    loader_name = r.loader.rsplit(".", 1)[-1]
    loader = resolve_symbol(r.loader)
    ctx.expect("megatron_model = self.load_megatron_model(megatron_path" in export, f"{r.export} does not load through load_megatron_model")
    ctx.expect("from megatron.bridge.training.model_load_save import load_megatron_model" in source_of(resolve_symbol(bridge_cls + "AutoBridge.load_megatron_model")), "AutoBridge.load_megatron_model is not Bridge's model_load_save one")
    ctx.expect("build_and_load_model(" in source_of(model_load_save.load_megatron_model) and f"{loader_name}(" in source_of(model_load_save.build_and_load_model), f"the export does not reach {r.loader}")
    body = source_of(loader)
    ctx.expect("dist_checkpointing.load_common_state_dict(checkpoint_path)" in body and "TorchDistLoadShardedStrategy()" in body and "fsdp_dtensor" not in body, f"{r.loader} reads more than megatron-core distributed checkpoints")
    with tempfile.TemporaryDirectory() as folder:
        saved_dcp(folder, {"model": {"weight": torch.ones(2)}})
        ctx.expect(checkpointing._get_checkpoint_format(folder) == r.fmt, f"a DCP folder is not detected as {r.fmt}")
        try:
            loader(folder, [])
        except Exception as error:  # noqa: BLE001 - which exception is the claim
            ctx.expect(type(error).__name__ == r.exc and str(error) == f"{folder} {r.message}", f"{r.loader} raises {type(error).__name__}: {error}")
        else:
            raise ClaimFailed(f"{r.loader} reads an {r.fmt} folder")

    # The way back: the training loader with finetune, then save_hf_pretrained.
    load = resolve_symbol(w.load.removesuffix("()"))
    ctx.expect(load is checkpointing.load_checkpoint and "return _load_checkpoint_from_path(" in source_of(load), f"{w.load} is not Bridge's training loader")
    read_fsdp = source_of(checkpointing.load_fsdp_dtensor_checkpoint)
    ctx.expect("preprocess_fsdp_dtensor_state_dict(cfg, state_dict, model[0])" in read_fsdp and "preprocess_state_dict_for_uneven_dtensor(state_dict)" in source_of(checkpointing.preprocess_fsdp_dtensor_state_dict), "the fsdp_dtensor loader does not expect Megatron FSDP's DTensor state dict")
    ctx.expect(relative(w.load_field) == ["checkpoint", "load"] and "load_dir = cfg.checkpoint.load" in source_of(load), f"{w.load} does not read {w.load_field}")
    save = resolve_symbol(bridge_cls + w.save.removesuffix("()"))
    ctx.expect("self.save_hf_weights(" in source_of(save) and "stream_weights_megatron_to_hf(" in source_of(resolve_symbol(bridge_cls + "AutoBridge.save_hf_weights")), f"{w.save} does not export through stream_weights_megatron_to_hf")
    stream = source_of(resolve_symbol("megatron.bridge.models.conversion.model_bridge.MegatronModelBridge.stream_weights_megatron_to_hf"))
    ctx.expect(f"if isinstance(task.param_weight, {w.dtensor}):" in stream and "megatron_weights = uneven_dtensor_to_full_tensor(task.param_weight)" in stream, f"the export does not gather sharded {w.dtensor}s")

    # finetune: the fsdp_dtensor branch requests only the model, and the step is reset.
    field, on = assignment(f.finetune)
    fields = {x.name for x in dataclasses.fields(CheckpointConfig)}
    ctx.expect({field, f.skip_a, f.skip_b} <= fields and on is True, f"{f.finetune}, {f.skip_a} or {f.skip_b} is not a checkpoint setting turned on")
    distinct(ctx, [f.skip_a, f.skip_b], "a setting")
    tree = ast_of(checkpointing._load_checkpoint_from_path)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    guard = f"not cfg.checkpoint.{field}"
    branch = next((n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == f"ckpt_format == '{r.fmt}'"), None)
    ctx.expect(branch is not None, f"_load_checkpoint_from_path has no {r.fmt} branch")
    requested = {"gen_sd_rerun_state", "gen_sd_rng_state", "gen_sd_optim", "gen_sd_opt_param_scheduler"}
    empty = {ast.unparse(s.targets[0]): ast.unparse(s.value) for s in branch.body if isinstance(s, ast.Assign)}
    ctx.expect({k: empty.get(k) for k in requested} == {"gen_sd_rerun_state": "{}", "gen_sd_rng_state": "None", "gen_sd_optim": "None", "gen_sd_opt_param_scheduler": "None"}, f"the {r.fmt} branch does not start with nothing but the model requested")
    under = next((s for s in branch.body if isinstance(s, ast.If) and ast.unparse(s.test) == guard), None)
    filled = {ast.unparse(t) for s in ast.walk(under) if isinstance(s, ast.Assign) for t in s.targets} if under else set()
    ctx.expect(requested <= filled, f"the {r.fmt} branch requests {sorted(requested - filled)} outside `if {guard}`")

    def guarded(node: ast.AST) -> bool:
        while node in parents:
            parent = parents[node]
            if isinstance(parent, ast.If) and node in parent.body and guard in ast.unparse(parent.test).replace("(", "").replace(")", ""):
                if not isinstance(parent.test, ast.BoolOp) or isinstance(parent.test.op, ast.And):
                    return True
            if isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.And) and any(ast.unparse(v) == guard for v in parent.values):
                return True
            node = parent
        return False

    for name in (f.skip_a, f.skip_b):
        uses = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and ast.unparse(n) == f"cfg.checkpoint.{name}"]
        ctx.expect(bool(uses) and all(guarded(n) for n in uses), f"_load_checkpoint_from_path reads {name} without `{guard}`")
    resets = [n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == f"cfg.checkpoint.{field} or release" and any(ast.unparse(s) == f"state.train_state.step = {f.step}" for s in n.body)]
    ctx.expect(len(resets) == 1, f"with {f.finetune} the loader does not reset the step to {f.step}")

    # The settings block: applied to a Megatron FSDP config with load set, it validates and keeps them.
    block = block_assignments(ctx.code(0))
    ctx.expect({".".join(relative(t)): v for t, v in block.items()} == {"checkpoint.ckpt_format": r.fmt, f"checkpoint.{field}": on}, f"the block sets {block}")
    cfg = ctx.apply(fsdp_config(ctx))
    assign(cfg, w.load_field, CHECKPOINTS)
    passes(ctx, lambda: resolve(cfg), "the load settings")
    ctx.expect(cfg.checkpoint.ckpt_format == r.fmt and getattr(cfg.checkpoint, field) is on, "validation changes the load settings")


@claim("fsdp-checkpoint-load-format")
def checkpoint_load_format(ctx: Context) -> None:
    import torch
    import torch.distributed.checkpoint as dcp
    from megatron.bridge.training import checkpointing
    from megatron.bridge.training.config import CheckpointConfig
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    r = ctx.read(
        "On load, Bridge detects the format of the iteration folder it reads: a folder with a `{marker:code}` file and without"
        " megatron-core's own distributed-checkpoint marker is `{fmt:code}`."
    )
    m = ctx.read(
        "When `{load:code}` is a checkpoint root, the configured `{field:code}` must equal the detected one, or loading fails with"
        " `{error:code}` followed by the folder; when it names an `{pattern:code}` folder itself, the detected format is used and"
        " the configured one is not compared."
    )
    s = ctx.read(
        "`{strict:code}` defaults to {default:bool}, which loads `{fmt:code}` checkpoints with partial loading allowed: a weight"
        " missing from the checkpoint keeps the value it had, with only a printed list of differences. Set it {fix:bool} to fail"
        " on a missing key instead."
    )
    ctx.expect(r.fmt == s.fmt, f"SKILL.md names {r.fmt} and {s.fmt}")
    kind, message = raised(m.error)
    fields = {x.name: x.default for x in dataclasses.fields(CheckpointConfig)}
    ctx.expect(relative(m.load) == ["checkpoint", "load"] and m.field in fields, f"{m.load} or {m.field} is not a checkpoint setting")
    configured = next((v for v in ("torch_dist", "fsdp_dtensor") if f"Checkpoint format '{v}' from config" in message), None)
    ctx.expect(configured is not None and configured != r.fmt, f"the quoted message {message!r} does not configure another format than {r.fmt}")

    with tempfile.TemporaryDirectory() as root:
        folder = checkpointing.get_checkpoint_name(root, 5, False)
        os.makedirs(folder)
        Path(folder, r.marker).touch()
        ctx.expect(checkpointing._get_checkpoint_format(folder) == r.fmt, f"a folder with {r.marker} is not detected as {r.fmt}")
        with mock.patch.object(checkpointing.dist_checkpointing, "check_is_distributed_checkpoint", lambda path: True):
            ctx.expect(checkpointing._get_checkpoint_format(folder) == "torch_dist", "megatron-core's own marker does not take precedence")
        Path(checkpointing.get_checkpoint_tracker_filename(root)).write_text("5")
        with collect_warnings():
            error = ctx.expect_raises(lambda: checkpointing._load_base_checkpoint(root, CheckpointConfig(**{"load": root, m.field: configured}), rank0=True, pg_collection=None), kind, message)
            ctx.expect(_squash(error) == _squash(f"{message} for {folder}."), f"the assertion says {error}")
            state, _, _, kind_loaded = checkpointing._load_base_checkpoint(root, CheckpointConfig(**{"load": root, m.field: r.fmt}), rank0=True, pg_collection=None)
            ctx.expect(kind_loaded.name == r.fmt.upper(), f"with {m.field}={r.fmt!r} the root loads as {kind_loaded}")
            ctx.expect(fnmatch.fnmatch(os.path.basename(folder), m.pattern) and not fnmatch.fnmatch(os.path.basename(root), m.pattern), f"iteration folders are not named {m.pattern}")
            _, _, _, direct = checkpointing._load_base_checkpoint(folder, CheckpointConfig(**{"load": folder, m.field: configured}), rank0=True, pg_collection=None)
            ctx.expect(direct.name == r.fmt.upper(), f"an {m.pattern} folder configured as {configured} loads as {direct}")

    # strict_fsdp_dtensor_load: its default, how the loader reads it, and what DCP then does.
    ctx.expect(s.strict.removeprefix("cfg.checkpoint.") in fields and fields[s.strict.removeprefix("cfg.checkpoint.")] is s.default and relative(s.strict)[0] == "checkpoint", f"{s.strict} does not default to {s.default}")
    name = relative(s.strict)[-1]
    body = source_of(checkpointing.load_fsdp_dtensor_checkpoint)
    ctx.expect(f'allow_partial_load = not getattr(ckpt_cfg, "{name}", False)' in body and "DefaultLoadPlanner(allow_partial_load=allow_partial_load)" in body and "if allow_partial_load: state_dict_metadata = fs_storage_reader.read_metadata().state_dict_metadata" in body and "print_diff_in_state_dicts(state_dict_metadata, state_dict)" in body, f"the fsdp_dtensor loader does not read {name} as partial loading allowed")
    with tempfile.TemporaryDirectory() as folder:
        saved_dcp(folder, {"present": torch.ones(2)})
        for strict in (s.default, s.fix):
            state = {"present": torch.zeros(2), "missing": torch.full((2,), 7.0)}
            load = lambda: dcp.load(state, storage_reader=dcp.FileSystemReader(folder), planner=DefaultLoadPlanner(allow_partial_load=not strict))  # noqa: E731
            if strict:
                try:
                    with open(os.devnull, "w") as sink, contextlib.redirect_stderr(sink), collect_warnings():
                        load()
                except BaseException as error:  # DCP's CheckpointException is a BaseException
                    ctx.expect("Missing key in checkpoint state_dict: missing." in str(error), f"a strict load fails with {error!r}")
                else:
                    raise ClaimFailed(f"with {name}={strict} a missing key does not fail the load")
            else:
                load()
                ctx.expect(torch.equal(state["present"], torch.ones(2)) and torch.equal(state["missing"], torch.full((2,), 7.0)), f"with {name}={strict} a missing weight does not keep its value")
    ctx.expect(s.fix is not s.default, f"SKILL.md's fix {s.fix} is the default")


@claim("fsdp-ep-overlap-double-buffer")
def ep_overlap_double_buffer(ctx: Context) -> None:
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.distributed.fsdp.src.megatron_fsdp.param_and_grad_buffer import ParamAndGradBuffer
    from megatron.core.transformer import TransformerConfig

    r = ctx.read("With `{setting:code}` in the model config, the Megatron FSDP wrapper refuses the double buffer as it is built: `{error:code}`")
    g = ctx.read("It then accepts only the `{field:code}` values `{ok_a:code}` and `{ok_b:code}`.")
    b = ctx.read(
        "Two settings bring the double buffer back. `{pool:code}` turns `{double:code}` on in the DDP config's own `{hook:code}`,"
        " before the wrapper looks, so it fails with the error above."
    )
    u = ctx.read(
        "NCCL user buffers turn it on later, as the parameter buffer is built inside `{core:code}`, after the check:"
        " with `{ub:code}` the first model chunk builds with no error, and the double buffer is on anyway."
    )
    v = ctx.read(
        "Every virtual-pipeline chunk is wrapped with the same DDP config, so with VPP the second chunk sees the double"
        " buffer the first one turned on and fails with the error above."
    )
    name, on = assignment(r.setting)
    ctx.expect(on is True, f"{r.setting} does not turn the overlap on")
    double = ddp_field(ctx, b.double)
    kind, message = raised(r.error)
    overlap = {name: True}
    raises_exactly(ctx, lambda: adapter_handover(model=overlap, **{double: True}), kind, message)
    adapter_handover(model=overlap, **{double: False})
    adapter_handover(model={name: False}, **{double: True})

    # CUDA graphs under the overlap: the stated values build, the per-layer ones do not.
    ctx.expect(g.field in {f.name for f in dataclasses.fields(TransformerConfig)}, f"the model config has no {g.field}")
    distinct(ctx, [g.ok_a, g.ok_b], "a value")
    for value in (g.ok_a, g.ok_b):
        adapter_handover(model={**overlap, g.field: value})
    for value in ("local", "transformer_engine"):
        ctx.expect_raises(lambda value=value: adapter_handover(model={**overlap, g.field: value}), AssertionError, "1F1B overlap with FSDP does not support per-layer CUDA graphs")
    tests = [ast.unparse(n.test) for n in ast.walk(ast_of(resolve_symbol(f"{ADAPTER}.FullyShardedDataParallel.__init__"))) if isinstance(n, ast.Assert) and g.field in ast.unparse(n.test)]
    ctx.expect(tests == [f"config.{g.field} in {(g.ok_a, g.ok_b)!r}"] or tests == [f"config.{g.field} in {(g.ok_b, g.ok_a)!r}"], f"the adapter accepts {tests}")

    # The max-pool allocator is a double buffer: the DDP config's own post-init turns it on.
    pool_field, pool_on = assignment(b.pool)
    pool = ddp_field(ctx, pool_field)
    ctx.expect(ddp_defaults()[pool] is False and ddp_defaults()[double] is False, f"{pool} or {double} is on by default")
    ctx.expect(getattr(DistributedDataParallelConfig(**{pool: pool_on}), double) is True and getattr(DistributedDataParallelConfig(), double) is False, f"{b.pool} does not turn {double} on")
    hook = getattr(DistributedDataParallelConfig, b.hook, None)
    ctx.expect(hook is not None and f"if self.{pool}: # MaxPoolAllocator is a type of double-buffer allocator. self.{double} = True" in source_of(hook), f"{b.hook} does not turn {double} on for {pool}")
    raises_exactly(ctx, lambda: adapter_handover(model=overlap, **{pool: pool_on}), kind, message)

    # NCCL user buffers: the adapter's check runs before MegatronFSDP(...) is called, and the
    # buffer built inside it turns the double buffer on in the very config object it was given.
    ub, ub_on = assignment(u.ub)
    ub = ddp_field(ctx, ub)
    ctx.expect(ub_on is True, f"{u.ub} does not turn user buffers on")
    init = ast_of(resolve_symbol(f"{ADAPTER}.FullyShardedDataParallel.__init__"))
    checks = [n for n in ast.walk(init) if isinstance(n, ast.Assert) and ast.unparse(n.test) == f"not ddp_config.{double}"]
    core_name = u.core.removesuffix("(...)")
    builds = [n for n in ast.walk(init) if isinstance(n, ast.Call) and ast.unparse(n.func) == core_name]
    ctx.expect(u.core.endswith("(...)") and len(checks) == 1 and len(builds) == 1 and checks[0].lineno < builds[0].lineno, f"the adapter does not check {double} before it calls {u.core}")
    handed = adapter_handover(model=overlap, **{ub: True})["ddp_config"]  # no error on the first chunk
    core_init = ast_of(resolve_symbol(f"megatron.core.distributed.fsdp.src.megatron_fsdp.megatron_fsdp.{core_name}.__init__"))
    ctx.expect("self.ddp_config = ddp_config" in {ast.unparse(n) for n in ast.walk(core_init) if isinstance(n, ast.Assign)}, f"{core_name} copies the DDP config it is given")
    ctx.expect("self._init_fsdp_param_and_grad_buffer()" in {ast.unparse(n) for n in ast.walk(core_init) if isinstance(n, ast.Expr)}, f"{core_name} does not build its parameter buffer as it is built")
    core_buffer = ast_of(resolve_symbol(f"megatron.core.distributed.fsdp.src.megatron_fsdp.megatron_fsdp.{core_name}._init_fsdp_param_and_grad_buffer"))
    buffers = [n for n in ast.walk(core_buffer) if isinstance(n, ast.Call) and ast.unparse(n.func) == "ParamAndGradBuffer"]
    ctx.expect(len(buffers) == 1 and buffers[0].args and ast.unparse(buffers[0].args[0]) == "self.ddp_config", f"{core_name} does not hand its DDP config to the parameter buffer")
    turned = [n for n in ast.walk(ast_of(ParamAndGradBuffer.__init__)) if isinstance(n, ast.If) and ast.unparse(n.test) == f"self.ddp_config.{ub}" and f"self.ddp_config.{double} = True" in {ast.unparse(x) for x in n.body}]
    ctx.expect(len(turned) == 1, f"the parameter buffer does not turn {double} on under {ub}")
    _, node = guarded_raise(ctx, ast_of(ParamAndGradBuffer._init_each_parameter_group_buffers), AssertionError, "NCCL UB is only supported with FSDP double buffer.", "ParamAndGradBuffer")
    ctx.expect(ast.unparse(node.test) == f"self.ddp_config.{double}", f"NCCL user buffers do not need {double}")
    # VPP: _ddp_wrap wraps every chunk with the one config object; after the first chunk's
    # buffer turned the double buffer on, the next chunk's adapter check trips.
    wrap = ast_of(resolve_symbol(WRAP))
    loops = [n for n in ast.walk(wrap) if isinstance(n, ast.For) and "enumerate(model)" in ast.unparse(n.iter)]
    per_chunk = [k for loop in loops for c in ast.walk(loop) if isinstance(c, ast.Call) and ast.unparse(c.func) == "DP" for k in c.keywords if k.arg == "ddp_config"]
    ctx.expect(len(per_chunk) == 1 and ast.unparse(per_chunk[0].value) == "ddp_config", "_ddp_wrap does not wrap every chunk with the same DDP config")
    ctx.expect(getattr(handed, double) is False, f"the adapter turns {double} on by itself")
    # the second chunk's config, as the first chunk's buffer leaves it:
    raises_exactly(ctx, lambda: adapter_handover(model=overlap, **{ub: True, double: True}), kind, message)
