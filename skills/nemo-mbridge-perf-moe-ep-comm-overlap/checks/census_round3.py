"""Checks for the sections added after the second review round (HybridEP topology variables,
buffer size, uneven inputs and the rank budget; EP with CP; Bridge's H100 MoE recipes; what
MoE CUDA graphs capture; fused permutation in the recipes; blockwise FP8 with MoE). Each
reads its sentences and compares them with the installed release: recipes built offline
around a small MoE GPT, Bridge's `runtime_config_update()`, megatron-core's own classes run
on a CPU with DeepEP's HybridEP calls stood in for, or the installed source.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import logging
import os
import re
from types import SimpleNamespace
from unittest import mock

from runner.claims.kit import Context, assignment, claim, get_field, literal, preserved_environ, resolve_symbol, set_field, source_of, tiny_config

from .census_topics import core_config, core_default, flat, plain_moe, with_change
from .moe import _package_files, gpu, outcome, passes, squash

H100 = "NVIDIA H100 80GB HBM3"


def _tree(obj) -> ast.AST:
    return ast.parse(inspect.cleandoc("\n" + inspect.getsource(obj)))


def _module_text(obj) -> str:
    return inspect.getsource(inspect.getmodule(obj))


def built_recipe(name: str, num_layers: int = 2):
    """A Bridge recipe that reads a Hugging Face config, built offline around a small MoE GPT
    on a simulated H100 (the recipe's own apply_flex_dispatcher_backend sees that GPU)."""
    from megatron.bridge.models.conversion.auto_bridge import AutoBridge
    from runner.claims.kit import collect_warnings

    class StandIn:
        def to_megatron_provider(self, load_weights: bool = False):
            model = tiny_config().model
            model.num_layers, model.num_moe_experts, model.moe_router_topk = num_layers, 8, 2
            return model

    factory = resolve_symbol(name.strip().removesuffix("()"))
    with mock.patch.object(AutoBridge, "from_hf_pretrained", lambda *args, **kwargs: StandIn()), gpu(9, H100), collect_warnings():
        return factory()


def _recipe_path(name: str) -> str:
    """The dotted path of a recipe of Bridge's recipes package, found by its function name."""
    found = []
    for path in _package_files("megatron.bridge"):
        parts = path.parts[path.parts.index("bridge") :]
        if parts[1] != "recipes":
            continue
        if re.search(rf"^def {re.escape(name)}\(", path.read_text("utf-8", errors="replace"), re.M):
            found.append("megatron." + ".".join(parts).removesuffix(".py") + "." + name)
    if len(found) != 1:
        raise AssertionError(f"{name} is defined in {found}")
    return found[0]


# --- hybridep.md ------------------------------------------------------------------------


@claim("moe-hybridep-recipe-env")
def hybridep_recipe_env(ctx: Context) -> None:
    from megatron.bridge.training import config as bridge_config
    from megatron.bridge.training import flex_dispatcher_backend

    r = ctx.read(
        "Bridge's DeepSeek-V3 H100 recipe `{recipe:code}` (TP={tp:int}, PP={pp:int}, EP={ep:int}) trains with HybridEP, not DeepEP: it sets"
        " `{backend:code}` and calls `{apply:code}`, which on an H100 sets the dispatcher to `{flex:code}`."
    )
    path = _recipe_path(r.recipe)
    ctx.expect(".deepseek.h100." in path, f"{r.recipe} is not a DeepSeek H100 recipe ({path})")
    cfg = built_recipe(path)
    m = cfg.model
    ctx.expect((m.tensor_model_parallel_size, m.pipeline_model_parallel_size, m.expert_model_parallel_size) == (r.tp, r.pp, r.ep), f"{r.recipe} sets TP/PP/EP {(m.tensor_model_parallel_size, m.pipeline_model_parallel_size, m.expert_model_parallel_size)}")
    field, value = assignment(r.backend)
    ctx.expect(getattr(m, field) == value == "hybridep", f"{r.recipe} leaves {field} at {getattr(m, field)!r}")
    body = source_of(resolve_symbol(path))
    ctx.expect(f"cfg.model.{field} = {value!r}".replace("'", '"') in body, f"{r.recipe} does not set {r.backend} itself")
    ctx.expect(r.apply == flex_dispatcher_backend.apply_flex_dispatcher_backend.__name__ and f"{r.apply}(cfg.model, cfg.model.{field})" in body, f"{r.recipe} does not call {r.apply} with its backend")
    ctx.expect(m.moe_token_dispatcher_type == literal(r.flex), f"on an H100 the recipe's dispatcher is {m.moe_token_dispatcher_type!r}")
    s = ctx.read(
        "Its `{env:code}` carry the HybridEP topology, `{v1:code}` = {n1:int}, `{v2:code}` = {n2:int} and `{v3:code}` = {n3:int},"
        " which `{upd:code}` puts into the process environment unless a variable is already set there."
    )
    stated = {s.v1: s.n1, s.v2: s.n2, s.v3: s.n3}
    env = get_field(cfg, s.env)
    ctx.expect(len(stated) == 3 and all(env.get(k, "missing") == v for k, v in stated.items()), f"the recipe's {s.env} holds {({k: env.get(k) for k in stated})}")
    ctx.expect(s.upd == "runtime_config_update()" and "apply_environment_variables(cfg)" in source_of(bridge_config.runtime_config_update), f"{s.upd} does not apply cfg.env_vars")
    with preserved_environ():
        for name in stated:
            os.environ.pop(name, None)
        os.environ[s.v1] = "4"
        bridge_config.apply_environment_variables(cfg)
        ctx.expect(os.environ[s.v1] == "4" and all(os.environ.get(k) == str(v) for k, v in stated.items() if k != s.v1), f"the recipe's variables reach the environment as {({k: os.environ.get(k) for k in stated})}")
    ctx.read("No module of Bridge or megatron-core outside the recipes names these variables, so a config of your own that moves a DeepEP run to HybridEP sets them too, here with the values of that recipe:")
    for package in ("megatron.bridge", "megatron.core"):
        for file in _package_files(package):
            if "/recipes/" in file.as_posix() or "/perf_recipes/" in file.as_posix():
                continue
            text = file.read_text("utf-8", errors="replace")
            ctx.expect(not any(name in text for name in stated), f"{file.name} names one of {list(stated)}")
    mine = plain_moe(ctx)
    mine.model.moe_token_dispatcher_type, mine.model.moe_flex_dispatcher_backend = "flex", "deepep"
    with gpu(9, H100):
        mine = ctx.apply(mine)
        passes(ctx, mine, "the HybridEP block")
    ctx.expect((mine.model.moe_token_dispatcher_type, mine.model.moe_flex_dispatcher_backend) == (literal(r.flex), value), f"the block leaves {mine.model.moe_token_dispatcher_type}/{mine.model.moe_flex_dispatcher_backend}")
    ctx.expect({k: mine.env_vars.get(k) for k in stated} == {k: env[k] for k in stated}, f"the block's variables {mine.env_vars} differ from the recipe's")


def _flatten_dispatch_input():
    from megatron.core.transformer.moe.token_dispatcher import MoEFlexTokenDispatcher

    return MoEFlexTokenDispatcher.dispatch_preprocess


@claim("moe-hybridep-buffer-size")
def hybridep_buffer_size(ctx: Context) -> None:
    import torch
    from megatron.core.transformer.moe import fused_a2a, token_dispatcher

    r = ctx.read(
        "megatron-core builds the HybridEP buffer at the first dispatch: `{fwd:code}` takes `{count:code}` from the rows of its input (`{shape:code}`), and"
        " `{init:code}` hands that count to DeepEP's `{buf:code}` as `{kw:code}`."
    )
    cls_name, method = r.fwd.split(".")
    forward = getattr(getattr(fused_a2a, cls_name), method)
    init = getattr(fused_a2a, r.init)
    ctx.expect(f"{r.count}, hidden_dim = {r.shape}" in source_of(forward), f"{r.fwd} does not take {r.count} from {r.shape}")
    seen = []

    class Buffer:
        def __init__(self, **kwargs):
            seen.append(kwargs)

        def dispatch_with_permute(self, **kwargs):
            return kwargs["hidden"], kwargs["probs"], None, torch.tensor([1]), ("handle",)

    x = torch.zeros(48, 16)
    saved = fused_a2a._hybrid_ep_buffer
    try:
        with mock.patch.object(fused_a2a, r.buf, Buffer, create=True):
            fused_a2a._hybrid_ep_buffer = None
            ctx_ = SimpleNamespace()
            forward(ctx_, x, torch.zeros(48, 4, dtype=torch.bool), torch.zeros(48, 4), None, 2)
            forward(ctx_, torch.zeros(96, 16), torch.zeros(96, 4, dtype=torch.bool), torch.zeros(96, 4), None, 2)
    finally:
        fused_a2a._hybrid_ep_buffer = saved
    ctx.expect(len(seen) == 1 and seen[0].get(r.kw) == x.shape[0], f"{r.fwd} built the buffer {len(seen)} times with {[s.get(r.kw) for s in seen]}, input rows {x.shape[0]}")
    ctx.expect(f"{r.kw}={r.count}" in flat(source_of(init)), f"{r.init} does not pass {r.count} as {r.kw}")
    s = ctx.read("That input is the MoE layer's local tokens flattened (`{view:code}` in `{prep:code}`), so the count grows with sequence length times micro batch size.")
    prep = resolve_symbol(f"megatron.core.transformer.moe.token_dispatcher.{s.prep}")
    ctx.expect(prep is _flatten_dispatch_input() and f"hidden_states = {s.view}" in source_of(prep), f"{s.prep} does not flatten with {s.view}")
    wrapper = [n for n in ast.walk(ast.parse(_module_text(fused_a2a.HybridEPDispatch))) if isinstance(n, ast.FunctionDef) and n.name == "hybrid_ep_dispatch"]
    ctx.expect("hybrid_ep_dispatch(" in source_of(token_dispatcher._HybridEPManager.dispatch) and len(wrapper) == 1 and "HybridEPDispatch.apply(" in ast.unparse(wrapper[0]), "the HybridEP manager does not reach HybridEPDispatch")
    t = ctx.read("megatron-core {version:version} compares the count with no limit before the buffer is built, so a count too large for DeepEP's buffer fails inside DeepEP.")
    from importlib.metadata import version

    ctx.expect(t.version == version("megatron-core"), f"megatron-core {version('megatron-core')} is installed, not {t.version}")
    for fn in (forward, init):
        tree = _tree(fn)
        guards = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, (ast.Compare, ast.Assert, ast.Raise)) and r.count in ast.unparse(n)]
        ctx.expect(not guards, f"{fn.__qualname__} checks {r.count}: {guards}")
    u = ctx.read(
        "To lower it, shorten `{seq:code}` or `{mbs:code}`, or split the sequence further: CP (`{cp:code}`) gives each rank a slice of the sequence in `{cpfn:code}`,"
        " and TP with `{sp:code}` splits it again in the embedding (`{scatter:code}`)."
    )
    cfg = plain_moe(ctx)
    ctx.expect(get_field(cfg, f"model.{u.seq}") is not None and get_field(cfg, f"train.{u.mbs}") is not None and hasattr(cfg.model, u.cp) and hasattr(cfg.model, u.sp), f"{u.seq}/{u.mbs}/{u.cp}/{u.sp} are not config fields")
    from megatron.bridge.training import gpt_step

    ctx.expect(f"{u.cpfn}(" in source_of(gpt_step), f"Bridge's GPT step does not call {u.cpfn}")
    cpfn = resolve_symbol(f"megatron.core.utils.{u.cpfn}")
    batch = {"tokens": torch.arange(16).reshape(2, 8), "cu_seqlens": None}
    with mock.patch.object(torch.distributed, "get_world_size", lambda group=None: 2), mock.patch.object(torch.distributed, "get_rank", lambda group=None: 0):
        sliced = cpfn(batch, is_hybrid_cp=False, cp_group=object())
    ctx.expect(tuple(sliced["tokens"].shape) == (2, 4), f"{u.cpfn} with CP=2 leaves tokens of shape {tuple(sliced['tokens'].shape)}")
    from megatron.core.models.common.embeddings.language_model_embedding import LanguageModelEmbedding

    emb = source_of(LanguageModelEmbedding.forward)
    ctx.expect(f"if self.config.{u.sp}" in emb and f"tensor_parallel.{u.scatter}(" in emb, f"the embedding does not call {u.scatter} under {u.sp}")


def _hybridep_manager(factor=None, pad=False, group_size=1):
    """megatron-core's _HybridEPManager without DeepEP (its __init__ needs HybridEP and CUDA)."""
    import torch
    from megatron.core.transformer.moe.token_dispatcher import _HybridEPManager

    m = object.__new__(_HybridEPManager)
    m.config = SimpleNamespace(
        moe_expert_rank_capacity_factor=factor,
        moe_hybridep_pad_uneven_dispatch_inputs=pad,
        moe_router_topk=2,
        fp8=None,
        fp4=None,
        moe_flex_dispatcher_num_sms=None,
        moe_hybridep_num_blocks_permute=None,
        moe_hybridep_num_blocks_unpermute=None,
        moe_permute_fusion_into_hybridep=False,
        moe_hybridep_num_sms_preprocessing=None,
    )
    m.num_experts, m.num_local_experts, m.group = 4, 2, SimpleNamespace(size=lambda: group_size)
    m.drop_and_pad, m.capacity_factor, m.num_permuted_tokens, m.pad_multiple = False, None, None, None
    m.moe_expert_rank_capacity_factor, m.handle = factor, None
    m.over_budget = torch.zeros(1, dtype=torch.bool)
    m._original_num_tokens = m._padded_num_tokens = None
    return m


def _handle(flag: int, *extra: int):
    import torch

    return tuple([None] * 10) + (torch.tensor(flag),) + tuple(torch.tensor(e) for e in extra)


@contextlib.contextmanager
def _hybridep_calls(handle=None, combined_rows=None, group_max=None):
    """HybridEP's dispatch/combine and the group all-reduce stood in for."""
    import torch
    from megatron.core.transformer.moe import token_dispatcher

    def dispatch(**kw):
        dispatched = kw["x"]
        return dispatched, kw["probs"], None, torch.tensor([3, 5]), handle if handle is not None else _handle(0)

    def combine(**kw):
        return torch.zeros(combined_rows or kw["x"].shape[0], kw["x"].shape[-1])

    def all_reduce(tensor, op=None, group=None):
        if group_max is not None:
            tensor.fill_(group_max)

    with mock.patch.object(token_dispatcher, "hybrid_ep_dispatch", dispatch), mock.patch.object(token_dispatcher, "hybrid_ep_combine", combine), mock.patch.object(
        token_dispatcher, "get_align_size_for_quantization", lambda config: 16
    ), mock.patch.object(torch.distributed, "all_reduce", all_reduce):
        yield


def _route(manager, tokens: int):
    import torch

    routing = torch.zeros(tokens, 4, dtype=torch.bool)
    routing[:, 0] = True
    manager.setup_metadata(routing, torch.rand(tokens, 4))
    return manager


@claim("moe-hybridep-uneven-inputs")
def hybridep_uneven_inputs(ctx: Context) -> None:
    import torch
    from megatron.core.transformer.moe import fused_a2a, token_dispatcher

    r = ctx.read('HybridEP\'s dispatch expects the same number of input tokens on every rank of its group ("{comment:quote}" in megatron-core\'s source).')
    comments = " ".join(line.strip().removeprefix("#").strip() for line in inspect.getsource(token_dispatcher._HybridEPManager.__init__).splitlines() if line.strip().startswith("#"))
    sentences = re.findall(r"HybridEP dispatch [^.]*\.", comments)
    ctx.expect(sentences == [r.comment], f"the HybridEP manager's source says {sentences}, not {r.comment!r}")
    s = ctx.read(
        "megatron-core's `{field:code}` (default `{default:code}`) pads them: `{setup:code}` takes the largest local token count of the group with an all-reduce (`{op:code}`),"
        " rounds it up to a multiple of `{align:code}` ({n:int}), pads the routing map, the probabilities and the hidden states with zero rows, and `{combine:code}` cuts"
        " the output back to the local count."
    )
    ctx.expect(core_default(s.field) is literal(s.default), f"{s.field} defaults to {core_default(s.field)!r}")
    ctx.expect(getattr(fused_a2a, s.align) == s.n and getattr(token_dispatcher, s.align) == s.n, f"{s.align} is {getattr(fused_a2a, s.align)}")
    cls_name, method = s.setup.split(".")
    ctx.expect(cls_name == "_HybridEPManager" and method == "setup_metadata", f"SKILL.md names {s.setup}")
    ctx.expect(f"ReduceOp.{s.op}" in source_of(token_dispatcher._HybridEPManager.setup_metadata), f"setup_metadata does not reduce with {s.op}")
    local, group_max = 40, 100
    padded = -(-group_max // s.n) * s.n
    m = _hybridep_manager(pad=True)
    with _hybridep_calls(group_max=group_max, combined_rows=padded):
        _route(m, local)
        ctx.expect(m.routing_map.shape[0] == padded and m.token_probs.shape[0] == padded and not m.routing_map[local:].any() and not m.token_probs[local:].any(), f"setup_metadata pads {local} tokens to {m.routing_map.shape[0]} (group max {group_max})")
        dispatched = m.dispatch(torch.ones(local, 8))
        ctx.expect(dispatched.shape[0] == padded and not dispatched[local:].any(), f"dispatch passes {dispatched.shape[0]} rows")
        combined = getattr(m, s.combine)(torch.ones(padded, 8))
    ctx.expect(combined.shape[0] == local, f"{s.combine} returns {combined.shape[0]} rows, not the local {local}")
    ctx.read("Without the field the counts reach HybridEP as they are.")
    m = _hybridep_manager(pad=False)
    with _hybridep_calls(group_max=group_max):
        _route(m, local)
        dispatched = m.dispatch(torch.ones(local, 8))
    ctx.expect(m.routing_map.shape[0] == local and dispatched.shape[0] == local, f"without {s.field} HybridEP gets {dispatched.shape[0]} rows")


def _hybridep_cfg(ctx: Context, packing: bool = True, **fields):
    from megatron.bridge.recipes.utils.dataset_utils import default_squad_config

    cfg = with_change(ctx, **{"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep", **fields})
    if packing:
        cfg.dataset = default_squad_config(seq_length=cfg.model.seq_length, enable_offline_packing=True)
    return cfg


@claim("moe-hybridep-uneven-bridge")
def hybridep_uneven_bridge(ctx: Context) -> None:
    from megatron.bridge.models import transformer_config as bridge_tc
    from megatron.bridge.training import config as bridge_config

    field = "moe_hybridep_pad_uneven_dispatch_inputs"
    r = ctx.read(
        "Bridge turns the field on by itself only in `{where:code}`, through `{fn:code}`, and only when its own dataset config packs sequences (`{off:code}` or `{inb:code}`),"
        " the dispatcher is `{flex:code}` with the `{backend:code}` backend and no CUDA graphs are set (`{graphs:code}`)."
    )
    ctx.expect(r.where == "cfg.validate()" and r.off != r.inb, f"SKILL.md names {r.where} / {r.off} / {r.inb}")
    fn = getattr(bridge_tc, r.fn)
    callers = [p.name for p in _package_files("megatron.bridge") if f"{r.fn}(" in p.read_text("utf-8", errors="replace") and p.name != "transformer_config.py"]
    ctx.expect(callers == ["config.py"] and f"{r.fn}(" in source_of(bridge_config.ConfigContainer.validate), f"{r.fn} is called from {callers}")
    validate = source_of(bridge_config.ConfigContainer.validate)
    ctx.expect(f'getattr(self.dataset, "{r.off}", False)' in validate and f'getattr(self.dataset, "{r.inb}", False)' in validate and f"uses_thd = enable_offline_packing or enable_in_batch_packing" in validate, f"validate does not derive packing from {r.off}/{r.inb}")

    def resolved(cfg):
        with gpu(9, H100):
            passes(ctx, cfg, "the HybridEP config")
        return getattr(cfg.model, field)

    ctx.expect(resolved(_hybridep_cfg(ctx)) is True, f"offline packing with flex/hybridep leaves {field} off")
    ctx.expect(resolved(_hybridep_cfg(ctx, packing=False)) is False, f"without packing Bridge turns {field} on")
    ctx.expect(resolved(_hybridep_cfg(ctx, moe_flex_dispatcher_backend="deepep")) is False, f"DeepEP gets {field}")
    ctx.expect(resolved(_hybridep_cfg(ctx, moe_token_dispatcher_type="alltoall", moe_flex_dispatcher_backend="hybridep")) is False, f"the alltoall dispatcher gets {field}")
    gfield, gvalue = assignment(r.graphs)
    ctx.expect(core_default(gfield) == gvalue, f"{gfield} defaults to {core_default(gfield)!r}")
    for thd, impl, expected in ((True, gvalue, True), (True, "transformer_engine", False), (True, "local", False), (False, gvalue, False)):
        model = plain_moe(ctx).model
        model.moe_token_dispatcher_type, model.moe_flex_dispatcher_backend = literal(r.flex), literal(r.backend)
        setattr(model, gfield, impl)
        fn(model, uses_thd=thd)
        ctx.expect(getattr(model, field) is expected, f"{r.fn} with packing={thd}, {gfield}={impl!r} leaves {field}={getattr(model, field)}")
    s = ctx.read("Sequences packed outside Bridge's dataset config leave it `{off2:code}`; set it yourself:")
    ctx.expect(core_default(field) is literal(s.off2), f"{field} defaults to {core_default(field)!r}")
    cfg = _hybridep_cfg(ctx, packing=False)
    target, value = assignment(ctx.code().strip())
    ctx.expect(target == f"cfg.model.{field}", f"the block sets {target}")
    cfg = ctx.apply(cfg)
    ctx.expect(resolved(cfg) is value is True, f"the block leaves {field} off")


@claim("moe-hybridep-rank-budget")
def hybridep_rank_budget(ctx: Context) -> None:
    from megatron.bridge.training import eval as bridge_eval
    from megatron.bridge.training import train as bridge_train

    r = ctx.read(
        "`{field:code}` (default `{default:code}`) gives the flex dispatcher a fixed token budget per expert rank. megatron-core accepts it only with the `{b1:code}` or"
        ' `{b2:code}` backend, else `{exc:exc}` "{m1:quote}", and for `{b3:code}` only with `{fuser:code}`, else "{m2:quote}".'
    )
    ctx.expect(core_default(r.field) is literal(r.default), f"{r.field} defaults to {core_default(r.field)!r}")
    fuser, on = assignment(r.fuser)
    base = dict(moe_token_dispatcher_type="flex", **{r.field: 1.5})

    def core_error(**fields):
        try:
            core_config(**{**base, **fields})
        except Exception as error:  # noqa: BLE001 - the exception is the observation
            return type(error), squash(error)
        return None

    allowed = [b for b in ("deepep", "hybridep", "ncclep") if core_error(moe_flex_dispatcher_backend=b, **{fuser: on}) is None]
    ctx.expect(sorted(allowed) == sorted({literal(r.b1), literal(r.b2)}) and r.b1 != r.b2, f"the factor is accepted with {allowed}")
    ctx.expect(core_error(moe_flex_dispatcher_backend="deepep", **{fuser: on}) == (r.exc, squash(r.m1)), f"DeepEP with the factor gives {core_error(moe_flex_dispatcher_backend='deepep', **{fuser: on})}")
    ctx.expect(literal(r.b3) == "hybridep" and core_error(moe_flex_dispatcher_backend="hybridep", **{fuser: not on}) == (r.exc, squash(r.m2)), f"HybridEP without {fuser} gives {core_error(moe_flex_dispatcher_backend='hybridep', **{fuser: not on})}")
    ctx.expect(core_error(moe_flex_dispatcher_backend="ncclep", **{fuser: not on}) is None, f"ncclep needs {fuser} too")
    s = ctx.read('`{stash:code}` needs the factor: "{m3:quote}".')
    sfield, svalue = assignment(s.stash)
    ctx.expect(core_error(moe_flex_dispatcher_backend="hybridep", **{fuser: on, sfield: svalue, r.field: None}) == (r.exc, squash(s.m3)), f"{s.stash} without the factor gives {core_error(moe_flex_dispatcher_backend='hybridep', **{fuser: on, sfield: svalue, r.field: None})}")
    ctx.expect(core_error(moe_flex_dispatcher_backend="hybridep", **{fuser: on, sfield: svalue}) is None, f"{s.stash} with the factor fails")
    t = ctx.read("When the factor is set, Bridge's `{f1:code}` and `{f2:code}` wrap the forward-backward step in megatron-core's `{runner:code}`.")
    for module, name in ((bridge_train, t.f1), (bridge_eval, t.f2)):
        tree = _tree(getattr(module, name))
        wraps = [n for n in ast.walk(tree) if isinstance(n, ast.If) and f"{r.field} is not None" in ast.unparse(n.test) and f"forward_backward_func = {t.runner}(" in ast.unparse(n)]
        ctx.expect(len(wraps) == 1 and r.field in ast.unparse(wraps[0].test), f"{module.__name__}.{name} does not wrap the step in {t.runner} when {r.field} is set")
    u = ctx.read('When a rank went over budget, the runner logs "{m4:quote}" (here for one rank), clears the factor and runs the same step again, so that step runs forward and backward twice.')
    ran, messages, factor_after = _runner_step(_handle(1))
    ctx.expect(squash(u.m4) in [squash(m) for m in messages], f"the runner logged {messages}")
    ctx.expect(ran == [1.5, None] and factor_after == 1.5, f"the step ran with factors {ran}; the factor is {factor_after} afterwards")
    ran, messages, _ = _runner_step(_handle(0))
    ctx.expect(ran == [1.5] and not messages, f"a step within budget ran {len(ran)} times and logged {messages}")


def _runner_step(handle):
    """One training step through megatron-core's PagedStashRunner whose MoE layer is a real
    _HybridEPManager; DeepEP's dispatch returns `handle`. (factors the step ran with, log, factor after)"""
    import torch
    from megatron.core.transformer.moe import paged_stash
    from megatron.core.transformer.moe.token_dispatcher import MoEFlexTokenDispatcher

    manager = _hybridep_manager(factor=1.5)
    dispatcher = SimpleNamespace(_comm_manager=manager, config=manager.config)
    dispatcher.check_over_budget = lambda: MoEFlexTokenDispatcher.check_over_budget(dispatcher)
    dispatcher.reset_over_budget = lambda: MoEFlexTokenDispatcher.reset_over_budget(dispatcher)
    ran = []

    def step(**kwargs):
        _route(manager, 8)
        manager.dispatch(torch.rand(8, 16))
        ran.append(manager.moe_expert_rank_capacity_factor)
        return "loss"

    runner = object.__new__(paged_stash.PagedStashRunner)
    runner.stash_manager = SimpleNamespace(overflow=None, host_spill=None, release_stash_buffers=lambda: None)
    runner.config = SimpleNamespace(moe_paged_stash=True)
    runner.copy_main_params, runner.optimizer, runner.forward_backward_func = False, None, step
    runner.model = [SimpleNamespace(zero_grad_buffer=lambda: None)]
    runner.moe_layers = [SimpleNamespace(token_dispatcher=dispatcher)]
    runner._configs_to_sync_moe_paged_stash = [runner.config]
    messages = []

    class Collector(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    collector, level = Collector(), paged_stash.logger.level
    paged_stash.logger.addHandler(collector)
    paged_stash.logger.setLevel(logging.INFO)
    no_flag = lambda: torch.zeros(1, dtype=torch.bool)  # noqa: E731
    try:
        with _hybridep_calls(handle=handle), mock.patch.object(paged_stash, "check_paged_stash_overflow", no_flag), mock.patch.object(paged_stash, "check_paged_stash_host_spill", no_flag), mock.patch.object(torch.distributed, "all_reduce", lambda *a, **k: None):
            runner(model=runner.model, data_iterator=None, num_microbatches=1, seq_length=8, forward_only=False)
    finally:
        paged_stash.logger.removeHandler(collector)
        paged_stash.logger.setLevel(level)
    return ran, [m for m in messages if "over budget" in m], manager.moe_expert_rank_capacity_factor


@claim("moe-hybridep-overflow-flag")
def hybridep_overflow_flag(ctx: Context) -> None:
    from importlib.metadata import version

    from megatron.core.transformer.moe import token_dispatcher

    r = ctx.read(
        "megatron-core {version:version} reads HybridEP's overflow flag by position: with the factor set, `{fn:code}` takes the last element of the handle that HybridEP's"
        " dispatch returns (`{expr:code}`)."
    )
    ctx.expect(r.version == version("megatron-core"), f"megatron-core {version('megatron-core')} is installed, not {r.version}")
    cls_name, method = r.fn.split(".")
    ctx.expect(f"over_budget = {r.expr}" in source_of(getattr(getattr(token_dispatcher, cls_name), method)), f"{r.fn} does not read {r.expr}")

    def over_budget(handle, factor=1.5):
        m = _hybridep_manager(factor=factor)
        with _hybridep_calls(handle=handle):
            _route(m, 8)
            m.dispatch(__import__("torch").rand(8, 16))
        return bool(m.over_budget)

    ctx.expect(over_budget(_handle(1)) and not over_budget(_handle(0)), "the manager does not follow the flag of an 11-field handle")
    ctx.read(
        "A HybridEP build whose handle carries one more field after the flag, such as a token count, is read as over budget whenever that field is not zero, so every step logs"
        " the message above and runs twice."
    )
    ctx.expect(over_budget(_handle(0, 4096)) and not over_budget(_handle(0, 0)), "a trailing token count does not decide the flag")
    ran, messages, factor = _runner_step(_handle(0, 4096))
    ran2, messages2, _ = _runner_step(_handle(0, 4096))
    ctx.expect(ran == ran2 == [1.5, None] and len(messages) == len(messages2) == 1 and factor == 1.5, f"with a trailing count steps ran {ran}/{ran2} and logged {messages}/{messages2}")
    s = ctx.read("Without the factor the handle is not read for the flag and no runner is installed; to run so, unset the factor together with the paged stash:")
    ctx.expect(not over_budget(_handle(1, 4096), factor=None), "without the factor the flag is read")
    target = [assignment(line) for line in ctx.code().strip().splitlines()]
    ctx.expect([t[0] for t in target] == ["cfg.model.moe_expert_rank_capacity_factor", "cfg.model.moe_paged_stash"] and [t[1] for t in target] == [None, False], f"the block sets {target}")
    cfg = _hybridep_cfg(ctx, packing=False, moe_expert_rank_capacity_factor=1.5, use_transformer_engine_op_fuser=True, moe_paged_stash=True)
    cfg.model.moe_expert_rank_capacity_factor = None
    error, _ = outcome(cfg)
    ctx.expect(error is not None and "moe_paged_stash requires" in squash(error), f"unsetting the factor alone gives {error!r}")
    cfg = ctx.apply(_hybridep_cfg(ctx, packing=False, moe_expert_rank_capacity_factor=1.5, use_transformer_engine_op_fuser=True, moe_paged_stash=True))
    with gpu(9, H100):
        passes(ctx, cfg, "the block that unsets the budget")
    ctx.expect(cfg.model.moe_expert_rank_capacity_factor is None and cfg.model.moe_paged_stash is False, "the block leaves the budget on")


# --- parallel-layout.md -----------------------------------------------------------------


def _generator_kwargs(tree: ast.AST, target: str) -> dict[str, str]:
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == target)
    return {k.arg: ast.unparse(k.value) for k in node.value.keywords}


@claim("moe-ep-with-cp")
def ep_with_cp(ctx: Context) -> None:
    from megatron.bridge.training import initialize
    from megatron.core import parallel_state

    r = ctx.read(
        'Expert parallelism and context parallelism combine. megatron-core\'s `{cls:code}` asserts "{m:quote}" for a single generator, and `{fn:code}` builds two:'
        " the dense layers' with `{d_ep:code}` and `{d_cp:code}`, the experts' with `{e_ep:code}` and `{e_cp:code}`."
    )
    generator = getattr(parallel_state, r.cls)
    try:
        generator(tp=1, ep=2, dp=1, pp=1, cp=2, order="tp-cp-ep-dp-pp")
    except AssertionError as error:
        ctx.expect(squash(error) == squash(r.m), f"{r.cls} asserts {squash(error)!r}")
    else:
        ctx.expect(False, f"{r.cls} accepts EP=2 with CP=2")
    generator(tp=1, ep=2, dp=2, pp=1, cp=1, order="tp-cp-ep-dp-pp")
    generator(tp=1, ep=1, dp=1, pp=1, cp=2, order="tp-cp-ep-dp-pp")
    tree = _tree(getattr(parallel_state, r.fn))
    dense, expert = _generator_kwargs(tree, "decoder_rank_generator"), _generator_kwargs(tree, "expert_decoder_rank_generator")
    for kwargs, text, key, what in ((dense, r.d_ep, "ep", "dense"), (dense, r.d_cp, "cp", "dense"), (expert, r.e_ep, "ep", "expert"), (expert, r.e_cp, "cp", "expert")):
        stated_key, value = text.split("=")
        ctx.expect(stated_key == key and kwargs.get(key) == value, f"the {what} generator gets {key}={kwargs.get(key)}; SKILL.md says {text}")
    s = ctx.read(
        "The expert group is laid over the ranks that TP, CP and DP share in the dense layers: with CP={cp:int} and EP={ep:int} on {world:int} ranks"
        " (TP={tp:int}, PP={pp:int}) the CP groups are `{cp_groups:code}` and the EP group is `{ep_groups:code}`."
    )
    t = ctx.read("Bridge passes both sizes with its default rank order `{order:code}` and accepts that layout; its H100 recipe `{recipe:code}` sets CP={rcp:int} with EP={rep:int}.")
    order = literal(t.order)
    ctx.expect(f'order="{order}" if not dist_config.use_tp_pp_dp_mapping' in source_of(initialize._initialize_distributed), f"Bridge does not pass the order {order}")
    cp, ep, world, tp, pp = s.cp, s.ep, s.world, s.tp, s.pp
    sizes = {"context_parallel_size": cp, "expert_model_parallel_size": ep}
    names = dict(
        tensor_model_parallel_size=tp,
        context_parallel_size=cp,
        expert_model_parallel_size=ep,
        pipeline_model_parallel_size=pp,
        data_parallel_size=world // (tp * pp * cp),
        expert_tensor_parallel_size=1,
        expert_data_parallel_size=world // (ep * pp),
        decoder_order=parallel_state._inject_gtp_remat_axis(order, after="tp"),
        expert_order=parallel_state._inject_gtp_remat_axis(order, after="ep"),
        rank_offset=0,
        gtp_remat_size=1,
        expert_gtp_remat_size=1,
    )
    built = {name: generator(**{k: eval(v, {}, names) for k, v in kwargs.items()}) for name, kwargs in (("dense", dense), ("expert", expert))}  # noqa: S307 - megatron-core's own arguments
    ctx.expect(built["dense"].get_ranks("cp") == literal(s.cp_groups), f"the CP groups are {built['dense'].get_ranks('cp')}")
    ctx.expect(built["expert"].get_ranks("ep") == literal(s.ep_groups), f"the EP groups are {built['expert'].get_ranks('ep')}")
    ctx.expect(built["dense"].get_ranks("pp") == built["expert"].get_ranks("pp"), "the two generators disagree on the pipeline groups")
    cfg = plain_moe(ctx)
    cfg.model.tensor_model_parallel_size, cfg.model.pipeline_model_parallel_size = tp, pp
    for key, value in sizes.items():
        setattr(cfg.model, key, value)
    error, where = outcome(cfg, world=world)
    ctx.expect(error is None, f"Bridge refuses CP={cp} with EP={ep} on {world} ranks: {squash(error)} ({where})")
    path = _recipe_path(t.recipe)
    ctx.expect(".h100." in path, f"{t.recipe} is not an H100 recipe")
    recipe = built_recipe(path)
    ctx.expect((recipe.model.context_parallel_size, recipe.model.expert_model_parallel_size) == (t.rcp, t.rep), f"{t.recipe} sets CP={recipe.model.context_parallel_size}, EP={recipe.model.expert_model_parallel_size}")


@claim("moe-permute-fusion-recipes")
def permute_fusion_recipes(ctx: Context) -> None:
    import torch
    from megatron.core.transformer.moe import moe_utils
    from megatron.core.transformer.transformer_config import TransformerConfig

    r = ctx.read("Bridge's MoE recipes turn the fusion on, for example the Qwen3 recipe `{a:code}` and the DeepSeek-V3 recipe `{b:code}` (`{on:code}`).")
    field_path, on = assignment(r.on)
    field = field_path.split(".")[-1]
    ctx.expect(field == "moe_permute_fusion" and on is True and r.a != r.b, f"SKILL.md writes {r.on}")
    for name, family in ((r.a, ".qwen."), (r.b, ".deepseek.")):
        path = _recipe_path(name)
        ctx.expect(family in path, f"{name} is not a{family.strip('.')} recipe ({path})")
        ctx.expect(r.on in source_of(resolve_symbol(path)), f"{name} does not write {r.on}")
        ctx.expect(getattr(built_recipe(path).model, field) is True, f"{name} leaves {field} off")
    s = ctx.read(
        "megatron-core's check of the flag only asks whether Transformer Engine's fused permutation functions import; it neither looks at the Triton version nor runs a kernel,"
        " so a Transformer Engine whose permutation kernels fail with the installed Triton passes validation and fails in the first MoE forward: with routing probabilities and no alignment padding,"
        " `{fn:code}` calls Transformer Engine's `{te_fn:code}`."
    )
    block = [n for n in ast.walk(_tree(TransformerConfig.__post_init__)) if isinstance(n, ast.If) and ast.unparse(n.test) == f"self.{field}"]
    ctx.expect(len(block) == 1, f"__post_init__ has {len(block)} checks of {field}")
    text = ast.unparse(block[0])
    calls = {ast.unparse(n.func) for n in ast.walk(block[0]) if isinstance(n, ast.Call)}
    ctx.expect(calls == {"ValueError"} and "triton" not in text.lower() and all(isinstance(n, (ast.ImportFrom, ast.If)) for n in block[0].body), f"the {field} check does more than test imports: {calls}")
    names = [a.name for n in block[0].body if isinstance(n, ast.ImportFrom) for a in n.names]
    ctx.expect(s.te_fn in names, f"the check does not look for {s.te_fn}")
    stand_ins = {name: (lambda *a, **k: None) for name in names}
    with mock.patch.multiple(moe_utils, **stand_ins):
        core_config(**{field: True})
    seen = []

    def fused_with_probs(tokens, routing_map, probs, num_out_tokens=None):
        seen.append(tokens.shape)
        return tokens, probs, torch.arange(tokens.shape[0])

    padded = []

    def fused_and_pad(*args, **kwargs):
        padded.append(True)
        return args[0], args[2], None, None, None

    tokens, routing = torch.arange(8.0).reshape(4, 2), torch.tensor([[True, False], [False, True], [True, True], [False, True]])
    with mock.patch.multiple(moe_utils, HAVE_TE=True, **{s.te_fn: fused_with_probs, "fused_permute_and_pad_with_probs": fused_and_pad}):
        getattr(moe_utils, s.fn)(tokens, routing, probs=routing.float(), num_out_tokens=int(routing.sum()), fused=True)
        ctx.expect(len(seen) == 1 and not padded, f"{s.fn} with probabilities and fused=True does not call {s.te_fn}")
        getattr(moe_utils, s.fn)(tokens, routing, probs=routing.float(), num_out_tokens=int(routing.sum()), fused=True, tokens_per_expert=torch.tensor([2, 3]), align_size=16)
        ctx.expect(len(seen) == 1 and padded, f"{s.fn} with alignment padding still calls {s.te_fn}")
    t = ctx.read("Set `{fix:code}` after the recipe to take the PyTorch path until Transformer Engine and Triton match.")
    target, value = assignment(t.fix)
    ctx.expect(target == field_path and value is (not on), f"{t.fix} does not turn {field} off")
    cfg = built_recipe(_recipe_path(r.b))
    set_field(cfg, target, value)
    ctx.expect(getattr(cfg.model, field) is value, f"{t.fix} does not stick on the recipe")
    out = getattr(moe_utils, s.fn)(tokens, routing, probs=routing.float(), num_out_tokens=int(routing.sum()), **{"fused": value})
    ctx.expect(out[0].shape[0] == int(routing.sum()), f"{s.fn} with fused={value} returns {out[0].shape}")
    passes(ctx, with_change(ctx, **{field: value}), t.fix)


def _just_below(version: str) -> str:
    from packaging.version import Version

    release = list(Version(version).release)
    i = max(j for j, part in enumerate(release) if part > 0)
    return ".".join(str(p) for p in release[:i] + [release[i] - 1] + [99] * (len(release) - i - 1 or 1))


@contextlib.contextmanager
def _core_te(version: str):
    """megatron-core's Transformer Engine version tests as if `version` were installed."""
    from megatron.core.transformer import transformer_config
    from packaging.version import Version

    with mock.patch.object(transformer_config, "is_te_min_version", lambda wanted, *a, **k: Version(version) >= Version(wanted)):
        yield


def _fp8_moe(ctx: Context, tp: int, ep: int, etp: int):
    from megatron.bridge.training.mixed_precision import get_mixed_precision_config

    cfg = plain_moe(ctx)
    cfg.model.tensor_model_parallel_size, cfg.model.sequence_parallel, cfg.model.add_bias_linear = tp, tp > 1, False
    cfg.model.num_attention_heads = max(4, tp)
    cfg.model.expert_model_parallel_size, cfg.model.expert_tensor_parallel_size = ep, etp
    cfg.model.moe_token_dispatcher_type = "alltoall"
    cfg.mixed_precision = get_mixed_precision_config("bf16_with_fp8_subchannel_scaling_mixed")
    return cfg


def _fp8_recipe_fn(te_version: str):
    """megatron-core's get_fp8_recipe from its Transformer Engine branch, with TE stood in for."""
    from megatron.core import fp8_utils
    from packaging.version import Version

    module = ast.parse(_module_text(fp8_utils.get_fp8_align_size))
    branch = next(n for n in module.body if isinstance(n, ast.If) and ast.unparse(n.test) == "HAVE_TE" and any(isinstance(b, ast.FunctionDef) and b.name == "get_fp8_recipe" for b in n.body))
    fn = next(b for b in branch.body if isinstance(b, ast.FunctionDef) and b.name == "get_fp8_recipe")
    built = lambda name: (lambda **kw: (name, kw))  # noqa: E731
    recipe = SimpleNamespace(Format=SimpleNamespace(E4M3="E4M3", HYBRID="HYBRID"), **{n: built(n) for n in ("Float8BlockScaling", "Float8CurrentScaling", "MXFP8BlockScaling")})
    namespace = dict(vars(fp8_utils))
    namespace.update(transformer_engine=SimpleNamespace(common=SimpleNamespace(recipe=recipe)), is_te_min_version=lambda wanted, *a, **k: Version(te_version) >= Version(wanted), TEDelayedScaling=built("TEDelayedScaling"))
    exec(compile(ast.Module(body=[fn], type_ignores=[]), fp8_utils.__file__, "exec"), namespace)  # noqa: S102 - megatron-core's own function
    return namespace["get_fp8_recipe"]


@claim("moe-fp8-blockwise")
def fp8_blockwise(ctx: Context) -> None:
    from megatron.core.enums import Fp8Recipe

    r = ctx.read(
        "The error about `{cls:code}` and the `{fmt:code}` format comes from below Bridge and megatron-core: the type is Transformer Engine's (megatron-core imports it from"
        " `{te_mod:code}`), and no file of either package names `{fmt2:code}`."
    )
    ctx.expect(r.fmt == r.fmt2 and r.te_mod.startswith("transformer_engine."), f"SKILL.md names {r.fmt} / {r.fmt2} / {r.te_mod}")
    importers = []
    for package in ("megatron.bridge", "megatron.core"):
        for file in _package_files(package):
            text = file.read_text("utf-8", errors="replace")
            ctx.expect(r.fmt not in text, f"{file.name} names {r.fmt}")
            ctx.expect(f"class {r.cls}" not in text, f"{file.name} defines {r.cls}")
            if re.search(rf"from {re.escape(r.te_mod)} import [^\n]*\b{re.escape(r.cls)}\b", text):
                importers.append(file.name)
    ctx.expect(bool(importers), f"no module of megatron-core imports {r.cls} from {r.te_mod}")
    s = ctx.read(
        "Their checks accept blockwise FP8 (`{recipe:code}`) together with the FP8 parameter gather (`{gather:code}`), expert parallelism, an expert TP below the attention TP"
        " (ETP={etp:int} under TP={tp:int}) and the alltoall dispatcher: such a config passes `{validate:code}` once megatron-core's Transformer Engine floor for MoE FP8,"
        " {floor:version}, is met."
    )
    ep = 2  # "expert parallelism": any EP above 1 that divides the ranks
    ctx.expect(s.validate == "cfg.validate()", f"SKILL.md names {s.validate}")
    recipe_field, recipe_value = assignment(s.recipe)
    gather_field, gather_value = assignment(s.gather)
    ctx.expect(gather_field == "fp8_param_gather" and gather_value is True and s.etp < s.tp, f"SKILL.md writes {s.gather}, ETP={s.etp} under TP={s.tp}")

    def config():
        cfg = _fp8_moe(ctx, s.tp, ep, s.etp)
        setattr(cfg.mixed_precision, recipe_field, recipe_value)
        setattr(cfg.mixed_precision, gather_field, gather_value)
        return cfg

    with _core_te(s.floor):
        cfg = config()
        passes(ctx, cfg, f"blockwise FP8 with {s.gather} at TE {s.floor}")
    m = cfg.model
    ctx.expect((m.fp8_recipe, m.fp8_param, m.tensor_model_parallel_size, m.expert_model_parallel_size, m.expert_tensor_parallel_size, m.moe_token_dispatcher_type) == (recipe_value, gather_value, s.tp, ep, s.etp, "alltoall"), "the resolved config is not the one the sentence names")
    with _core_te(_just_below(s.floor)):
        error, where = outcome(config())
    ctx.expect(error is not None and "supports MoE FP8 training" in squash(error) and where == "core", f"below TE {s.floor} the config gives {error!r}")
    t = ctx.read(
        "At run time megatron-core's `{fn:code}` builds Transformer Engine's `{cls:code}` for `{bw:code}` only with Transformer Engine {min:word} or newer; from {low:version}"
        ' up to that it raises `{exc:exc}` "{m2:quote}".'
    )
    ctx.expect(t.fn == "get_fp8_recipe" and literal(t.bw) == recipe_value, f"SKILL.md names {t.fn} / {t.bw}")
    config_ = SimpleNamespace(fp8="hybrid", fp8_recipe=Fp8Recipe.blockwise, fp8_dot_product_attention=False, fp8_wgrad=True)
    got = _fp8_recipe_fn(t.min)(config_)
    ctx.expect(isinstance(got, tuple) and got[0] == t.cls, f"at TE {t.min} get_fp8_recipe builds {got}")
    for version in (_just_below(t.min), t.low):
        try:
            got = _fp8_recipe_fn(version)(config_)
        except t.exc as error:
            ctx.expect(squash(error) == squash(t.m2), f"at TE {version} get_fp8_recipe raises {error}")
        else:
            ctx.expect(False, f"at TE {version} get_fp8_recipe builds {got}")
    try:
        _fp8_recipe_fn(_just_below(t.low))(config_)
    except t.exc:
        ctx.expect(False, f"below TE {t.low} get_fp8_recipe raises {t.exc.__name__} too")
    except AssertionError:
        pass


@claim("moe-fp8-blockwise-presets")
def fp8_blockwise_presets(ctx: Context) -> None:
    from megatron.bridge.training.mixed_precision import get_mixed_precision_config

    r = ctx.read("Bridge's blockwise presets `{p1:code}` and `{p2:code}` set `{g_off:code}`, while `{p3:code}`, despite its name, sets `{bw:code}` with `{g_on:code}`.")
    off_field, off = assignment(r.g_off)
    on_field, on = assignment(r.g_on)
    ctx.expect(off_field == on_field == "fp8_param_gather" and off is False and on is True, f"SKILL.md writes {r.g_off} / {r.g_on}")
    ctx.expect(len({r.p1, r.p2, r.p3}) == 3 and r.p1.startswith("bf16_") and r.p2.startswith("fp16_"), f"SKILL.md names {r.p1}, {r.p2}, {r.p3}")
    for name in (r.p1, r.p2):
        preset = get_mixed_precision_config(name)
        ctx.expect((preset.fp8_recipe, getattr(preset, off_field)) == ("blockwise", off), f"{name} sets {preset.fp8_recipe} with {off_field}={getattr(preset, off_field)}")
    preset = get_mixed_precision_config(r.p3)
    ctx.expect("current_scaling" in r.p3 and (preset.fp8_recipe, getattr(preset, on_field)) == (literal(r.bw), on), f"{r.p3} sets {preset.fp8_recipe} with {on_field}={getattr(preset, on_field)}")
    ctx.read("To run blockwise FP8 as the subchannel presets do, without the FP8 parameter gather:")
    target, value = assignment(ctx.code().strip())
    ctx.expect(target == "cfg.mixed_precision" and value == r.p1, f"the block sets {target} = {value!r}")
    with _core_te("2.9.0"):
        cfg = _fp8_moe(ctx, 2, 2, 1)
        cfg.mixed_precision.fp8_param_gather = True
        cfg = ctx.apply(cfg)
        passes(ctx, cfg, "the subchannel preset block")
    ctx.expect((cfg.model.fp8_recipe, cfg.model.fp8_param, cfg.ddp.fp8_param_gather) == ("blockwise", False, False), f"the block resolves to {cfg.model.fp8_recipe} with fp8_param={cfg.model.fp8_param}")


# --- overlap-internals.md ---------------------------------------------------------------


def _fake_layer(config):
    return SimpleNamespace(
        config=config,
        is_moe_layer=True,
        **{n: n for n in ("input_layernorm", "self_attention", "pre_cross_attn_layernorm", "cross_attention", "pre_mlp_layernorm")},
        mlp=SimpleNamespace(router="router", shared_experts="shared_experts", experts="experts", token_dispatcher="token_dispatcher"),
    )


def _moe_forward(config, capturing: bool, store=None):
    """megatron-core's MoELayer.forward on a stand-in layer: the real route/preprocess (with their
    CUDA-graph decorators), everything else recorded. Returns (calls, result)."""
    import torch
    from megatron.core.transformer.moe import moe_layer, moe_utils

    calls = []
    layer = SimpleNamespace(config=config, training=True, moe_layer_recompute=False, fwd_execution_map=["route", "expert_compute", "postprocess"])
    layer.attn_tp_group = SimpleNamespace(size=lambda: 1)
    layer.cudagraph_tensor_store = store or SimpleNamespace(is_empty=lambda: True, probs=None, routing_map=None, hidden_states=None, shared_expert_output=None)
    layer.router = lambda hidden, mask=None: (calls.append("router"), (torch.ones(hidden.shape[0], 4), torch.ones(hidden.shape[0], 4, dtype=torch.bool)))[1]
    layer.token_dispatcher = SimpleNamespace(dispatch_preprocess=lambda h, m, p: (calls.append("dispatch_preprocess"), (h, p))[1], cudagraph_attrs=[], valid_cudagraph_attrs=None)
    layer.shared_experts_compute = lambda h: None
    layer.dispatch = lambda h, p: (calls.append("dispatch"), (h, p))[1]
    layer.routed_experts_compute = lambda h, p: (calls.append("experts"), (h, None))[1]
    layer.combine = lambda o: (calls.append("combine"), o)[1]
    layer.postprocess = lambda o, s: (calls.append("postprocess"), o)[1]
    layer.route = lambda *a, **k: moe_layer.MoELayer.route(layer, *a, **k)
    layer.preprocess = lambda *a, **k: moe_layer.MoELayer.preprocess(layer, *a, **k)
    with mock.patch.object(moe_layer, "apply_module", lambda module: module), mock.patch.object(moe_utils, "is_graph_capturing", lambda: capturing):
        result = moe_layer.MoELayer.forward(layer, torch.ones(6, 8))
    return calls, result


@claim("moe-cuda-graph-partial-capture")
def cuda_graph_partial_capture(ctx: Context) -> None:
    import torch
    from megatron.core.transformer import transformer_layer

    r = ctx.read(
        "With Transformer Engine graphs (`{impl:code}`) and `{field:code}` of `{a:code}`, `{b:code}` and `{c:code}`, the graph of a MoE layer covers the attention block,"
        " the pre-MLP layernorm and the router, and the shared experts when `{shared:code}` is off (`{fn:code}` of megatron-core's `{cls:code}`)."
    )
    impl_field, impl = assignment(r.impl)
    modules = [literal(r.a), literal(r.b), literal(r.c)]
    ctx.expect(r.field == "cuda_graph_modules" and len(set(modules)) == 3, f"SKILL.md names {r.field} {modules}")

    def config(overlap: bool, impl_value=impl):
        cfg, _ = core_config(**{impl_field: impl_value, r.field: list(modules), "moe_shared_expert_intermediate_size": 64, r.shared: overlap, "moe_token_dispatcher_type": "alltoall"})
        return cfg

    method = getattr(getattr(transformer_layer, r.cls), r.fn)
    attention = ["input_layernorm", "self_attention", "pre_cross_attn_layernorm", "cross_attention"]
    ctx.expect(method(_fake_layer(config(False))) == attention + ["pre_mlp_layernorm", "router", "shared_experts"], f"{r.fn} captures {method(_fake_layer(config(False)))}")
    ctx.expect(method(_fake_layer(config(True))) == attention + ["pre_mlp_layernorm", "router"], f"with {r.shared} on {r.fn} captures {method(_fake_layer(config(True)))}")
    s = ctx.read("During capture `{fwd:code}` returns after the dispatcher's preprocessing; after each replay the rest of the layer, the token dispatch, the routed experts and the combine, runs eagerly as without graphs.")
    ctx.expect(s.fwd == "MoELayer.forward", f"SKILL.md names {s.fwd}")
    calls, result = _moe_forward(config(False), capturing=True)
    ctx.expect(calls == ["router", "dispatch_preprocess"] and isinstance(result, list), f"during capture the MoE layer runs {calls}")
    calls, _ = _moe_forward(config(False, "local"), capturing=True)
    ctx.expect(calls == ["router", "dispatch_preprocess", "dispatch", "experts", "combine", "postprocess"], f"with other graphs the capture path runs {calls}")
    store = SimpleNamespace(is_empty=lambda: False, probs=torch.ones(6, 4), routing_map=None, hidden_states=torch.ones(6, 8), shared_expert_output=None)
    calls, _ = _moe_forward(config(False), capturing=False, store=store)
    ctx.expect(calls == ["dispatch", "experts", "combine", "postprocess"], f"after a replay the MoE layer runs {calls}")
    replay = flat(source_of(transformer_layer.TransformerLayer._te_cuda_graph_replay_impl))
    ctx.expect("self.mlp.cudagraph_tensor_store.set(" in replay and "mlp_output_with_bias=apply_module(self.mlp)(hidden_states)" in replay, "the replay does not run the MoE layer after the graph")


@claim("moe-h100-recipes-overlap-off")
def h100_recipes_overlap_off(ctx: Context) -> None:
    from megatron.bridge.training.comm_overlap import CommOverlapConfig

    r = ctx.read("Bridge's H100 recipes `{a:code}` and `{b:code}` train without the overlap: the first sets `{a_off:code}`, the second leaves `{b_field:code}` at `{none:code}`.")
    paths = [_recipe_path(name) for name in (r.a, r.b)]
    ctx.expect(all(".h100." in p for p in paths) and ".deepseek." in paths[0] and ".qwen." in paths[1], f"the recipes are {paths}")
    a, b = (built_recipe(p) for p in paths)
    flag_path, off = assignment(r.a_off)
    ctx.expect(get_field(a, flag_path.removeprefix("cfg.")) is off is False and r.a_off.replace(" ", "") in flat(source_of(resolve_symbol(paths[0]))), f"{r.a} leaves {flag_path} at {get_field(a, flag_path.removeprefix('cfg.'))!r}")
    ctx.expect(get_field(b, r.b_field.removeprefix("cfg.")) is literal(r.none) is None, f"{r.b} sets {r.b_field}")
    ctx.expect(not b.model.overlap_moe_expert_parallel_comm and not a.model.overlap_moe_expert_parallel_comm, "a recipe's model has the overlap on")
    s = ctx.read('Both use PP={pp:int} without virtual pipeline stages (`{vpp:code}`), so turning the overlap on in them and changing nothing else fails Bridge\'s check with "{m:quote}".')
    pp_field, pp = "pipeline_model_parallel_size", s.pp
    vpp_field, vpp = assignment(s.vpp)
    ctx.expect(vpp_field == f"virtual_{pp_field}" and vpp is None, f"SKILL.md writes {s.vpp}")
    for name, cfg in ((r.a, a), (r.b, b)):
        ctx.expect((getattr(cfg.model, pp_field), getattr(cfg.model, vpp_field)) == (pp, vpp), f"{name} uses {pp_field}={getattr(cfg.model, pp_field)}, {vpp_field}={getattr(cfg.model, vpp_field)}")
    set_field(a, flag_path.removeprefix("cfg."), not off)
    b.comm_overlap = CommOverlapConfig(tp_comm_overlap=False, overlap_moe_expert_parallel_comm=True)
    for name, cfg in ((r.a, a), (r.b, b)):
        with gpu(9, H100):
            error, where = outcome(cfg, world=2048)
        ctx.expect(isinstance(error, AssertionError) and squash(error) == squash(s.m) and where == "bridge", f"{name} with the overlap on gives {type(error).__name__}: {squash(error)} ({where})")
    t = ctx.read("The DeepSeek-V3 recipe's `{shared:code}` is not in the way, since on an H100 its own `{apply:code}` call turns it off, and its `{mtp:code}` is allowed.")
    shared_field, shared = assignment(t.shared)
    body = flat(source_of(resolve_symbol(paths[0])))
    ctx.expect(t.shared.replace(" ", "") in body and f"{t.apply}(cfg.model," in body and body.find(t.shared.replace(" ", "")) < body.find(f"{t.apply}(cfg.model,"), f"{r.a} does not set {t.shared} before calling {t.apply}")
    fresh = built_recipe(paths[0])
    ctx.expect(shared is True and getattr(fresh.model, shared_field) is False, f"on an H100 {r.a} ends with {shared_field}={getattr(fresh.model, shared_field)}")
    mtp_field, mtp = assignment(t.mtp)
    ctx.expect(getattr(fresh.model, mtp_field) == mtp, f"{r.a} sets {mtp_field}={getattr(fresh.model, mtp_field)}")
    mine = plain_moe(ctx)
    mine.comm_overlap = CommOverlapConfig(tp_comm_overlap=False, overlap_moe_expert_parallel_comm=True)
    setattr(mine.model, mtp_field, mtp)
    passes(ctx, mine, f"the overlap with {t.mtp}")
    setattr(mine.model, mtp_field, mtp + 1)
    ctx.expect(outcome(mine)[0] is not None, f"{mtp_field}={mtp + 1} passes too")
    u = ctx.read("Bridge's H100 performance recipe of the second name, in `{mod:code}`, runs the overlap with TP={tp:int}, PP={pp2:int}, virtual pipeline size {vp:int} and EP={ep:int}, and with `{delay:code}` on.")
    perf = built_recipe(f"{u.mod}.{r.b}")
    m = perf.model
    ctx.expect((m.tensor_model_parallel_size, m.pipeline_model_parallel_size, m.virtual_pipeline_model_parallel_size, m.expert_model_parallel_size) == (u.tp, u.pp2, u.vp, u.ep), f"the performance recipe uses TP/PP/VPP/EP {(m.tensor_model_parallel_size, m.pipeline_model_parallel_size, m.virtual_pipeline_model_parallel_size, m.expert_model_parallel_size)}")
    ctx.expect(perf.comm_overlap.overlap_moe_expert_parallel_comm is True and getattr(perf.comm_overlap, u.delay) is True, f"the performance recipe's CommOverlapConfig has {u.delay}={getattr(perf.comm_overlap, u.delay, None)}")
