"""Checks for the reference files added for user-reported MoE problems (dispatchers,
overlap internals, parallel layout). Each reads its sentences and compares them with the
pinned release: a real config resolved through Bridge's `runtime_config_update()`, a
megatron-core `TransformerConfig` built directly, or the installed source read with
`inspect`/`ast` where only a GPU run would show the behaviour.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import logging
import os
import typing
import warnings
from types import SimpleNamespace
from unittest import mock

from runner.claims.kit import (
    Context,
    assignment,
    call,
    claim,
    collect_warnings,
    comparison,
    literal,
    preserved_environ,
    resolve_symbol,
    set_field,
    source_of,
    threshold,
)

from .moe import FLAG, enabled, gpu, outcome, passes, raise_messages, refuses, squash


def plain_moe(ctx: Context):
    """The enablement block's MoE layout with no overlap asked for (cfg.comm_overlap = None)."""
    cfg = enabled(ctx)
    cfg.comm_overlap = None
    return cfg


def with_change(ctx: Context, **fields):
    cfg = plain_moe(ctx)
    for name, value in fields.items():
        setattr(cfg.model, name, value)
    return cfg


def core_config(**fields):
    """megatron-core's own TransformerConfig (its __post_init__ checks), with the warnings it gave."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    base = dict(num_layers=2, hidden_size=64, num_attention_heads=4, num_moe_experts=8, moe_router_topk=2, bf16=True)
    base.update(fields)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = TransformerConfig(**base)
    return cfg, [squash(w.message) for w in caught]


def core_default(name: str):
    from megatron.core.transformer.transformer_config import TransformerConfig

    fields = {f.name: f for f in dataclasses.fields(TransformerConfig)}
    return fields[name].default


def provider_default(name: str):
    from megatron.bridge.models import GPTModelProvider

    fields = {f.name: f for f in dataclasses.fields(GPTModelProvider)}
    return fields[name].default


def flat(text: str) -> str:
    return "".join(text.split())


# --- dispatchers.md ---------------------------------------------------------------------


@claim("moe-dispatcher-values")
def dispatcher_values(ctx: Context) -> None:
    from megatron.core.transformer.moe.moe_layer import MoELayer
    from megatron.core.transformer.transformer_config import TransformerConfig

    r = ctx.read("`{field:code}` is typed as one of `{a:code}`, `{b:code}` or `{c:code}`.")
    hint = typing.get_type_hints(TransformerConfig)[r.field]
    ctx.expect(set(typing.get_args(hint)) == {literal(r.a), literal(r.b), literal(r.c)}, f"{r.field} is typed {hint}")
    s = ctx.read('The legacy sequence all-to-all dispatcher is gone: the config still accepts `{old:code}`, and building the MoE layer raises `{exc:exc}` "{m:quote}".')
    target, value = assignment(s.old)
    ctx.expect(target == r.field and value not in {literal(r.a), literal(r.b), literal(r.c)}, f"{s.old} is not a dispatcher outside the typed values")
    passes(ctx, with_change(ctx, **{target: value}), s.old)
    tree = ast.parse(inspect.cleandoc("\n" + inspect.getsource(MoELayer.__init__)))
    handled, message = set(), None
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and ast.unparse(node.left) == f"config.{r.field}" and isinstance(node.comparators[0], ast.Constant):
            handled.add(node.comparators[0].value)
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and getattr(node.exc.func, "id", None) == s.exc.__name__ and isinstance(node.exc.args[0], ast.JoinedStr):
            message = eval(compile(ast.Expression(node.exc.args[0]), "moe_layer", "eval"), {"config": SimpleNamespace(**{r.field: value})})  # noqa: S307 - the library's own f-string
    ctx.expect(handled == {literal(r.a), literal(r.b), literal(r.c)}, f"MoELayer builds dispatchers for {handled}")
    ctx.expect(message is not None and squash(message) == squash(s.m), f"MoELayer raises {message!r} for {value}, not {s.m!r}")
    u = ctx.read("Use `{fix:code}`.")
    passes(ctx, with_change(ctx, **{target: literal(u.fix)}), u.fix)
    ctx.expect(literal(u.fix) in handled, f"{u.fix} is not a dispatcher MoELayer builds")


def _apply_on_gpu(model, backend, major: int, name: str = "NVIDIA H100 80GB HBM3"):
    from megatron.bridge.training import flex_dispatcher_backend as module

    logger = logging.getLogger(module.__name__)
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with gpu(major, name), collect_warnings() as messages:
            module.apply_flex_dispatcher_backend(model, backend)
    finally:
        logger.setLevel(level)
    return messages


@claim("moe-flex-backend-none")
def flex_backend_none(ctx: Context) -> None:
    r = ctx.read("The backend field alone selects no dispatcher: megatron-core defaults `{backend:code}` to `{bdefault:code}` while `{dispatcher:code}` defaults to `{ddefault:code}`.")
    ctx.expect(core_default(r.backend) == literal(r.bdefault), f"{r.backend} defaults to {core_default(r.backend)!r}")
    ctx.expect(core_default(r.dispatcher) == literal(r.ddefault), f"{r.dispatcher} defaults to {core_default(r.dispatcher)!r}")
    s = ctx.read('`{call:code}` on a GPU logs "{m:quote}" and returns without touching the dispatcher, so a config already at `{flex:code}` stays `{flex2:code}`.')
    node = ast.parse(s.call, mode="eval").body
    ctx.expect(isinstance(node, ast.Call) and ast.unparse(node.func) == "apply_flex_dispatcher_backend" and ast.unparse(node.args[0]) == "cfg.model", f"{s.call} is not apply_flex_dispatcher_backend on cfg.model")
    backend = ast.literal_eval(node.args[1])
    cfg = plain_moe(ctx)
    setattr(cfg.model, r.dispatcher, literal(s.flex))
    setattr(cfg.model, r.backend, "deepep")
    messages = _apply_on_gpu(cfg.model, backend, 9)
    ctx.expect(any(squash(s.m) == squash(m) for m in messages), f"{s.call} logs {messages}, not {s.m!r}")
    ctx.expect(getattr(cfg.model, r.dispatcher) == literal(s.flex2) == literal(s.flex), f"{s.call} leaves the dispatcher at {getattr(cfg.model, r.dispatcher)!r}")
    t = ctx.read("Only the fallback for an unsupported GPU writes `{alltoall:code}` (and the backend `{none:code}`).")
    cfg = plain_moe(ctx)
    setattr(cfg.model, r.dispatcher, "flex")
    _apply_on_gpu(cfg.model, "deepep", 10, "NVIDIA GB200")
    ctx.expect((getattr(cfg.model, r.dispatcher), getattr(cfg.model, r.backend)) == (literal(t.alltoall), literal(t.none)), f"the fallback leaves ({getattr(cfg.model, r.dispatcher)!r}, {getattr(cfg.model, r.backend)!r})")
    from megatron.bridge.training import flex_dispatcher_backend as module

    writers = [n for n in ast.walk(ast.parse(inspect.getsource(module))) if isinstance(n, ast.Assign) and any(ast.unparse(t_).endswith(r.dispatcher) for t_ in n.targets) and isinstance(n.value, ast.Constant) and n.value.value == literal(t.alltoall)]
    ctx.expect(len(writers) == 1, f"{len(writers)} places in the module write {t.alltoall}")
    u = ctx.read("To train with the all-to-all dispatcher, set `{fix:code}` yourself.")
    cfg = plain_moe(ctx)
    setattr(cfg.model, r.dispatcher, "flex")
    target, value = assignment(u.fix)
    set_field(cfg, target, value)
    passes(ctx, cfg, u.fix)
    ctx.expect(getattr(cfg.model, r.dispatcher) == value == literal(t.alltoall), f"{u.fix} resolves to {getattr(cfg.model, r.dispatcher)!r}")


@claim("moe-flex-ncclep")
def flex_ncclep(ctx: Context) -> None:
    r = ctx.read('The third backend, `{backend:code}`, is kept on compute capability {c1:int} or {c2:int}; outside the flex dispatcher megatron-core rejects it with `{exc:exc}` "{m:quote}".')
    backend = literal(r.backend)
    kept = set()
    for major in range(6, 13):
        cfg = plain_moe(ctx)
        _apply_on_gpu(cfg.model, backend, major, "NVIDIA Some GPU")
        if cfg.model.moe_token_dispatcher_type == "flex" and cfg.model.moe_flex_dispatcher_backend == backend:
            kept.add(major)
    ctx.expect(kept == {r.c1, r.c2}, f"{backend} is kept on compute capability {sorted(kept)}")
    cfg = with_change(ctx, moe_flex_dispatcher_backend=backend)
    refuses(ctx, cfg, r.m, "core", r.exc)


@claim("moe-deepep-legacy")
def deepep_legacy(ctx: Context) -> None:
    import importlib.util

    from .moe import _package_files

    r = ctx.read("Bridge has no `{module:code}` module and no `{fn:code}`; DeepEP is applied with `{apply:code}`, which checks the GPU.")
    ctx.expect(r.module.startswith("megatron.bridge.training.") and r.fn.isidentifier(), f"{r.module} is no Bridge training module or {r.fn} no function name")
    ctx.expect(importlib.util.find_spec(r.module) is None, f"{r.module} exists")
    defined = [p for p in _package_files("megatron.bridge") if f"def {r.fn}(" in p.read_text("utf-8", errors="replace")]
    ctx.expect(not defined, f"{r.fn} is defined in {defined[:2]}")
    apply = resolve_symbol(f"megatron.bridge.training.flex_dispatcher_backend.{r.apply}")
    ctx.expect("get_device_properties" in source_of(apply), f"{r.apply} does not read the GPU")
    s = ctx.read('megatron-core\'s `{flag:code}` is deprecated: outside the flex dispatcher it raises `{exc:exc}` "{m1:quote}", and with it it sets the backend to `{backend:code}` and warns "{m2:quote}".')
    target, value = assignment(s.flag)
    refuses(ctx, with_change(ctx, **{target: value}), s.m1, "core", s.exc)
    cfg, caught = core_config(**{target: value, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": None})
    ctx.expect(cfg.moe_flex_dispatcher_backend == literal(s.backend), f"{s.flag} with flex sets the backend to {cfg.moe_flex_dispatcher_backend!r}")
    ctx.expect(squash(s.m2) in caught, f"{s.flag} with flex warns {caught}, not {s.m2!r}")


@claim("moe-dispatch-numerics")
def dispatch_numerics(ctx: Context) -> None:
    from megatron.core.transformer.moe import token_dispatcher

    r = ctx.read("The flex dispatcher communicates over one group spanning all TP and EP ranks (`{group:code}`), the alltoall dispatcher over the EP group and then the expert-TP group, so the two hand tokens to the experts in different orders and accumulate in a different order: small loss differences between them are expected.")
    flex = source_of(token_dispatcher.MoEFlexTokenDispatcher)
    ctx.expect(f"group=self.{r.group}" in flex.replace(" ", ""), f"the flex dispatcher does not communicate over {r.group}")
    a2a = token_dispatcher.MoEAlltoAllTokenDispatcher
    ctx.expect("all_to_all(self.ep_group" in flat(source_of(a2a.token_dispatch)), "the alltoall dispatcher's token_dispatch does not run the all-to-all on the EP group")
    ctx.expect("gather_from_sequence_parallel_region(global_input_tokens,group=self.tp_group" in flat(source_of(a2a.dispatch_postprocess)), "the alltoall dispatcher does not gather over the expert-TP group after the all-to-all")
    s = ctx.read('For routing precision set `{field:code}` to `{a:code}` or `{b:code}` (default `{default:code}`); with at least {n:int} experts and no router dtype megatron-core warns "{m:quote}".')
    from megatron.core.transformer.transformer_config import TransformerConfig

    ctx.expect(set(typing.get_args(typing.get_args(typing.get_type_hints(TransformerConfig)[s.field])[0])) == {literal(s.a), literal(s.b)}, f"{s.field} does not take {s.a} or {s.b}")
    ctx.expect(core_default(s.field) == literal(s.default), f"{s.field} defaults to {core_default(s.field)!r}")
    for experts, warns in ((s.n, True), (s.n - 1, False)):
        _, caught = core_config(num_moe_experts=experts)
        ctx.expect((squash(s.m) in caught) is warns, f"{experts} experts without a router dtype {'do not warn' if warns else 'warn'}")
    for dtype in (s.a, s.b):
        _, caught = core_config(num_moe_experts=s.n, **{s.field: literal(dtype)})
        ctx.expect(squash(s.m) not in caught, f"{s.field}={dtype} still warns")


@claim("moe-capacity-any-dispatcher")
def capacity_any_dispatcher(ctx: Context) -> None:
    from megatron.core.transformer.moe.router import TopKRouter

    r = ctx.read("`{field:code}` is not tied to a dispatcher: the router drops tokens in `{drop:code}` whatever the dispatcher, and the `{dispatcher:code}` dispatcher with a capacity factor passes validation.")
    routing = source_of(TopKRouter.routing)
    ctx.expect(f"{r.drop}(" in routing and "moe_token_dispatcher_type" not in routing, f"the router's {r.drop} depends on the dispatcher")
    from megatron.core.transformer.transformer_config import TransformerConfig

    typed = set(typing.get_args(typing.get_type_hints(TransformerConfig)["moe_token_dispatcher_type"]))
    ctx.expect(literal(r.dispatcher) in typed and literal(r.dispatcher) != enabled(ctx).model.moe_token_dispatcher_type, f"{r.dispatcher} is not a dispatcher other than the block's")
    cfg = with_change(ctx, moe_token_dispatcher_type=literal(r.dispatcher), **{r.field: 1.0})
    passes(ctx, cfg, f"{r.dispatcher} with {r.field}=1.0")
    s = ctx.read('The factor needs a load-balancing type of `{t1:code}`, `{t2:code}`, `{t3:code}` or `{t4:code}`; `{bad:code}` raises `{exc:exc}` "{m:quote}".')
    post = ast.parse(inspect.cleandoc("\n" + inspect.getsource(TransformerConfig.__post_init__)))
    allowed = {tuple(e.value for e in n.comparators[0].elts) for n in ast.walk(post) if isinstance(n, ast.Compare) and isinstance(n.ops[0], ast.NotIn) and isinstance(n.comparators[0], ast.List) and any(getattr(e, "value", None) == "seq_aux_loss" for e in n.comparators[0].elts)}
    stated = [literal(k) for k in (s.t1, s.t2, s.t3, s.t4)]
    ctx.expect(len(allowed) == 1 and list(next(iter(allowed))) == stated, f"the capacity factor allows {allowed} (in that order), the skill says {stated}")
    from megatron.core.transformer.moe import router as router_module

    ctx.expect(f'"{literal(s.bad)}"' in source_of(router_module), f"{s.bad} is not a routing type the router knows")
    for kind in (s.t1, s.t2, s.t3, s.t4):
        passes(ctx, with_change(ctx, moe_router_load_balancing_type=literal(kind), **{r.field: 1.0}), f"{r.field} with {kind}")
    refuses(ctx, with_change(ctx, moe_router_load_balancing_type=literal(s.bad), **{r.field: 1.0}), s.m, "core", s.exc)
    n = ctx.read("A negative factor comes out `{neg:code}`.")
    cfg = with_change(ctx, **{r.field: -1.0})
    passes(ctx, cfg, "a negative factor")
    ctx.expect(getattr(cfg.model, r.field) is literal(n.neg), f"a negative factor comes out {getattr(cfg.model, r.field)!r}")
    p = ctx.read('`{pad:code}` without a factor raises "{m2:quote}", and with the flex dispatcher\'s `{backend:code}` backend it raises "{m3:quote}".')
    target, value = assignment(p.pad)
    refuses(ctx, with_change(ctx, **{target: value}), p.m2, "core", s.exc)
    _, _ = core_config(**{target: value, r.field: 1.0, "moe_token_dispatcher_type": "alltoall"})
    try:
        core_config(**{target: value, r.field: 1.0, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": literal(p.backend)})
    except s.exc as error:
        ctx.expect(squash(error) == squash(p.m3), f"flex with {p.backend} and padding raised {error}")
    else:
        ctx.expect(False, f"flex with {p.backend} and padding passes")
    core_config(**{target: value, r.field: 1.0, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep"})


@claim("moe-aux-loss-map")
def aux_loss_map(ctx: Context) -> None:
    from megatron.core.transformer.moe.router import TopKRouter

    r = ctx.read("The load-balancing losses never see the padded or capacity-dropped map: `{fn:code}` first calls `{drop:code}`, then builds a separate map with `{scores:code}` and passes that map to `{a:code}`, `{b:code}` and `{c:code}`.")
    ctx.expect(r.fn == "TopKRouter.routing", f"SKILL.md names {r.fn}")
    tree = ast.parse(inspect.cleandoc("\n" + inspect.getsource(TopKRouter.routing)))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    name = lambda n: ast.unparse(n.func).split(".")[-1]  # noqa: E731
    drop = [n for n in calls if name(n) == r.drop]
    ctx.expect(len(drop) == 1 and any(k.arg == "pad_to_capacity" for k in drop[0].keywords), f"{r.fn} does not drop and pad with {r.drop}")
    aux_map = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and name(node.value) == r.scores:
            aux_map = ast.unparse(node.targets[0].elts[0])
            scores_line = node.lineno
    ctx.expect(aux_map is not None and drop[0].lineno < scores_line, f"{r.fn} does not build the aux-loss map with {r.scores} after {r.drop}")
    dropped = {ast.unparse(n.targets[0].elts[1]) for n in ast.walk(tree) if isinstance(n, ast.Assign) and n.value is drop[0]}
    ctx.expect(dropped == {"routing_map"}, f"{r.drop} returns the map as {dropped}")
    ctx.expect(len({r.a, r.b, r.c}) == 3, "SKILL.md names one loss term twice")
    for term in (r.a, r.b, r.c):
        uses = [n for n in calls if name(n) == term]
        ctx.expect(uses and all(aux_map in [ast.unparse(a) for a in u.args] and not dropped & {ast.unparse(a) for a in u.args} for u in uses), f"{term} is not given {aux_map} alone")


# --- overlap-internals.md ---------------------------------------------------------------


@claim("moe-partial-hiding")
def partial_hiding(ctx: Context) -> None:
    from megatron.core.pipeline_parallel import schedules
    from megatron.core.transformer.moe import token_dispatcher

    r = ctx.read("With the interleaved schedule and the overlap on, `{fn:code}` adds {n:int} extra warmup microbatch, a forward step before the 1F1B phase that is not overlapped.")
    fn = getattr(schedules, r.fn)

    def warmup(overlap: bool) -> int:
        with mock.patch.multiple(schedules.parallel_state, get_pipeline_model_parallel_world_size=lambda: 4, get_pipeline_model_parallel_rank=lambda: 0, get_virtual_pipeline_model_parallel_world_size=lambda: 2):
            result = fn(num_microbatches=16, num_model_chunks=2, microbatch_group_size_per_vp_stage=4, forward_only=False, overlap_moe_expert_parallel_comm=overlap)
        return result[2]

    ctx.expect(warmup(True) - warmup(False) == r.n, f"the overlap adds {warmup(True) - warmup(False)} warmup microbatches")
    s = ctx.read('Inside a step the alltoall dispatcher overlaps the shared expert\'s first GEMM with the dispatch all-to-all only "{comment:quote}" (its source comment).')
    dispatch = source_of(token_dispatcher.MoEAlltoAllTokenDispatcher.token_dispatch)
    ctx.expect(f"# {s.comment}." in dispatch and "shared experts fc1 is overlapped with dispatch A2A" in dispatch, f"the dispatch comment does not say {s.comment!r}")
    t = ctx.read("Bridge's MoE recipes such as `{recipe:code}` put `{var:code}` = {value:int} in `{env:code}`, and `{upd:code}` applies them with `{how:code}`, so a value already in the environment wins.")
    from megatron.bridge.recipes.qwen.gb200 import qwen3_moe

    recipe = getattr(qwen3_moe, t.recipe)
    ctx.expect(t.var in s.comment, f"the comment does not name {t.var}")
    found = [ast.literal_eval(v) for n in ast.walk(ast.parse(inspect.getsource(recipe).lstrip())) if isinstance(n, ast.Dict) for k, v in zip(n.keys, n.values) if isinstance(k, ast.Constant) and k.value == t.var]
    ctx.expect(found == [t.value] and t.env.removeprefix("cfg.") in source_of(recipe), f"{t.recipe} sets {t.var} to {found}")
    from megatron.bridge.training import config as bridge_config

    update = source_of(bridge_config.runtime_config_update)
    ctx.expect("apply_environment_variables(cfg)" in update and t.upd == "runtime_config_update()", f"{t.upd} does not apply the env vars")
    ctx.expect(f"os.environ.{t.how.split('.')[-1]}(" in source_of(bridge_config.apply_environment_variables), f"the env vars are not applied with {t.how}")
    cfg = plain_moe(ctx)
    cfg.env_vars = {t.var: t.value}
    with preserved_environ():
        os.environ[t.var] = "1"
        bridge_config.apply_environment_variables(cfg)
        ctx.expect(os.environ[t.var] == "1", f"{t.var} from the recipe replaced the one in the environment")
    ctx.says("Bridge's overlap checks do not read the variable.")
    from megatron.bridge.training import comm_overlap

    ctx.expect(t.var not in source_of(comm_overlap.CommOverlapConfig._get_model_comm_overlap_cfgs), f"Bridge's overlap checks read {t.var}")


@claim("moe-mtp-zero")
def mtp_zero(ctx: Context) -> None:
    r = ctx.read("`{zero:code}` passes both Bridge's and megatron-core's overlap checks, as does `{none:code}`.")
    for text in (r.zero, r.none):
        field, value = assignment(text)
        cfg = enabled(ctx)
        setattr(cfg.model, field, value)
        passes(ctx, cfg, f"{text} through CommOverlapConfig")
        ctx.expect(getattr(cfg.model, FLAG) is True, f"{text} turns the overlap off")
        cfg = plain_moe(ctx)
        setattr(cfg.model, FLAG, True)
        setattr(cfg.model, field, value)
        passes(ctx, cfg, f"{text} with the flag on the model")
    ctx.expect(assignment(r.zero)[0] == assignment(r.none)[0] == "mtp_num_layers", "SKILL.md sets another field")
    one = ctx.sibling("moe-mtp-one-layer").read('- **At most one MTP layer**: `{bad:code}` fails with "{m:quote}"; `{ok:code}` passes.')
    zero, none = assignment(r.zero)[1], assignment(r.none)[1]
    ctx.expect(none is None and isinstance(zero, int) and zero < assignment(one.ok)[1], f"{r.zero} and {r.none} are not the counts below the one MTP layer the list allows")


@claim("moe-dispatch-wgrad-flag")
def dispatch_wgrad_flag(ctx: Context) -> None:
    from megatron.core import model_parallel_config
    from megatron.core.transformer import transformer_config as core_module
    from packaging.version import Version

    from .moe import below

    r = ctx.read('`{flag:code}` defaults to `{default:code}` and needs Transformer Engine {version:version} or newer in megatron-core: "{m:quote}".')
    fields = {f.name: f for f in dataclasses.fields(model_parallel_config.ModelParallelConfig)}
    ctx.expect(fields[r.flag].default is literal(r.default), f"{r.flag} defaults to {fields[r.flag].default!r}")
    refuses(ctx, with_change(ctx, **{r.flag: True}), r.m, "core")
    ctx.expect(f">= {r.version} " in r.m, f"the message does not state {r.version}")
    parts = r.version.split(".")
    just_below = ".".join([*parts[:-1], str(int(parts[-1]) - 1)]) if int(parts[-1]) else below(r.version)
    for installed, ok in ((r.version, True), (just_below, False)):
        with mock.patch.object(core_module, "is_te_min_version", lambda wanted, *a, **k: Version(installed) >= Version(wanted)):
            error, where = outcome(with_change(ctx, **{r.flag: True}))
        ctx.expect((error is None) is ok, f"with Transformer Engine {installed} the flag {'fails' if error else 'passes'}: {error}")
    from megatron.core.transformer.moe import moe_layer, token_dispatcher

    s = ctx.read("When it is on, `{dispatch:code}` wraps the layer input in `{wrapper:code}` before the dispatcher, and the flex dispatcher's `{td:code}` hands that same tensor to the shared experts, so with a shared expert the routed experts' weight-gradient launch waits for both input-gradient branches in the pinned release.")
    body = flat(source_of(resolve_symbol(f"megatron.core.transformer.moe.moe_layer.{s.dispatch}")))
    ctx.expect(f"ifself.config.{r.flag}:hidden_states={s.wrapper}.apply(self,hidden_states)" in body, f"{s.dispatch} does not wrap the input in {s.wrapper} on {r.flag}")
    ctx.expect(body.find(s.wrapper) < body.find("self.token_dispatcher."), f"{s.dispatch} dispatches before wrapping")
    ctx.expect(isinstance(getattr(moe_layer, s.wrapper), type), f"{s.wrapper} is not a class of moe_layer")
    td = flat(source_of(getattr(token_dispatcher.MoEFlexTokenDispatcher, s.td)))
    ctx.expect("self.shared_experts.pre_forward_comm(hidden_states" in td, f"the flex {s.td} does not hand the dispatched input to the shared experts")


@claim("moe-cuda-graph-scope-deprecated")
def cuda_graph_scope_deprecated(ctx: Context) -> None:
    r = ctx.read('`{old:code}` is deprecated: setting it warns "{m1:quote}" and setting both fails megatron-core\'s own `{cls:code}` with "{m2:quote}".')
    ctx.expect(r.cls == "TransformerConfig", f"SKILL.md names {r.cls}")
    _, caught = core_config(**{r.old: ["attn"]})
    ctx.expect(squash(r.m1) in caught, f"{r.old} warns {caught}")
    ctx.expect(squash(r.m2) in raise_messages(resolve_symbol(f"megatron.core.transformer.transformer_config.{r.cls}.__post_init__"), "AssertionError"), f"megatron-core has no assertion {r.m2!r}")
    try:
        core_config(**{r.old: ["attn"], "cuda_graph_modules": ["attn"]})
    except AssertionError as error:
        ctx.expect(squash(error) == squash(r.m2), f"both set raised {error}")
    else:
        ctx.expect(False, f"{r.old} with cuda_graph_modules passes megatron-core")
    s = ctx.read("Bridge's recipe `{recipe:code}` sets `{impl:code}`, `{scope:code}` and `{rng:code}`.")
    from megatron.bridge.recipes.qwen.gb200 import qwen3_moe

    recipe = flat(source_of(getattr(qwen3_moe, s.recipe)))
    ctx.expect(len({assignment(x)[0] for x in (s.impl, s.scope, s.rng)}) == 3, "SKILL.md names one recipe field twice")
    for text in (s.impl, s.scope, s.rng):
        ctx.expect(f"cfg.model.{flat(text)}" in recipe, f"{s.recipe} does not set cfg.model.{text}")
    ctx.expect(assignment(s.scope)[0] == r.old, f"the recipe's {s.scope} is not {r.old}")
    t = ctx.read('Megatron-LM\'s `{flag:code}` is deprecated too: "{m3:quote}".')
    from megatron.training import arguments

    ctx.expect(t.flag.startswith("--"), f"{t.flag} is no command-line flag")
    args = source_of(arguments.validate_args)
    ctx.expect(f"'{t.m3}'" in args and f"args.{t.flag.removeprefix('--').replace('-', '_')}" in args, f"validate_args does not deprecate {t.flag} with {t.m3!r}")


# --- parallel-layout.md -----------------------------------------------------------------


def _grid_source():
    from megatron.core import parallel_state

    return ast.parse(inspect.getsource(parallel_state.initialize_model_parallel))


@claim("moe-etp-grid")
def etp_grid(ctx: Context) -> None:
    r = ctx.read("megatron-core's `{fn:code}` lays experts out on a grid of `{grid:code}` ranks; an unset `{etp:code}` counts as `{tp:code}`.")
    tree = _grid_source() if r.fn == "initialize_model_parallel" else None
    ctx.expect(tree is not None, f"SKILL.md names {r.fn}")
    assign = next(n for n in ast.walk(tree) if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "expert_tensor_model_pipeline_parallel_size")
    factors = sorted(ast.unparse(assign.value).replace("(", "").replace(")", "").replace(" ", "").split("*"))
    ctx.expect(factors == sorted(r.grid.replace(" ", "").split("*")), f"the grid is {ast.unparse(assign.value)}")
    fallback = [n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == f"{r.etp} is None" and ast.unparse(n.body[0]) == f"{r.etp} = {r.tp}"]
    ctx.expect(len(fallback) == 1 and fallback[0].lineno < assign.lineno, f"{r.etp} None does not become {r.tp} before the grid")
    s = ctx.read('The grid must divide the world size, else `{exc:exc}` "{m:quote}" (here ETP={etp_n:int}, EP={ep:int}, PP={pp:int} on {world:int} ranks).')
    raise_node = next(n for n in ast.walk(tree) if isinstance(n, ast.Raise) and isinstance(n.exc, ast.Call) and getattr(n.exc.func, "id", None) == s.exc.__name__ and "expert_tensor_model_pipeline" in ast.unparse(n.exc))
    grid = eval(compile(ast.Expression(assign.value), "grid", "eval"), {"expert_tensor_parallel_size": s.etp_n, "expert_model_parallel_size": s.ep, "pipeline_model_parallel_size": s.pp, "expert_gtp_remat_size": 1})  # noqa: S307
    message = eval(compile(ast.Expression(raise_node.exc.args[0]), "msg", "eval"), {"world_size": s.world, "expert_tensor_model_pipeline_parallel_size": grid})  # noqa: S307
    ctx.expect(s.world % grid != 0 and squash(message) == squash(s.m), f"ETP={s.etp_n}, EP={s.ep}, PP={s.pp} on {s.world} ranks gives {message!r}")
    t = ctx.read("Bridge sets an unset `{etp2:code}` to `{one:code}` when `{cond:code}`.")
    field, op, bound = comparison(t.cond)
    on, off = threshold(op, bound)
    for ep, expected in ((on, literal(t.one)), (off, None)):
        cfg = plain_moe(ctx)
        cfg.model.tensor_model_parallel_size, cfg.model.sequence_parallel, cfg.model.add_bias_linear = 2, True, False  # so that 1 is not TP
        cfg.model.expert_model_parallel_size = ep
        setattr(cfg.model, t.etp2, None)
        passes(ctx, cfg, f"EP={ep}")
        got = getattr(cfg.model, t.etp2)
        ctx.expect(got == expected if expected is not None else got in (None, 2), f"with TP=2 and EP={ep} Bridge leaves {t.etp2} at {got!r}")
    ctx.expect(field == "expert_model_parallel_size", f"SKILL.md compares {field}")


@claim("moe-optimizer-instances")
def optimizer_instances(ctx: Context) -> None:
    from megatron.bridge.training import initialize
    from megatron.core.transformer.moe import token_dispatcher

    r = ctx.read("Bridge passes `{field:code}` (default `{default:code}`) to megatron-core's `{fn:code}`.")
    cfg = plain_moe(ctx)
    from runner.claims.kit import get_field

    ctx.expect(get_field(cfg, r.field) == literal(r.default), f"{r.field} defaults to {get_field(cfg, r.field)!r}")
    name = r.field.split(".")[-1]
    entry = flat(source_of(initialize.initialize_megatron))
    ctx.expect(f"{name}={r.field}" in entry, f"initialize_megatron does not pass {r.field}")
    init = flat(source_of(initialize._initialize_distributed))
    at = init.find(f"parallel_state.{r.fn}(")
    ctx.expect(at >= 0 and f"{name}={name}" in init[at:], f"_initialize_distributed does not hand {name} to {r.fn}")
    s = ctx.read("The alltoall dispatcher synchronises with the host at `{point:code}` when its token counts are needed there, before the EP all-to-all.")
    cls = source_of(token_dispatcher.MoEAlltoAllTokenDispatcher)
    point = literal(s.point)
    ctx.expect(f'self._maybe_update_cuda_sync_point("{point}")' in cls and f'self.cuda_dtoh_point = "{point}"' in cls, f"the alltoall dispatcher has no sync point {point}")
    body = flat(source_of(token_dispatcher.MoEAlltoAllTokenDispatcher.token_dispatch))
    ctx.expect(0 <= body.find(f'_maybe_dtoh_and_synchronize("{point}"') < body.find("all_to_all(self.ep_group"), f"the dispatcher does not synchronise at {point} before the EP all-to-all")


@claim("moe-tp-needs-sp")
def tp_needs_sp(ctx: Context) -> None:
    from megatron.core.transformer.moe import token_dispatcher

    r = ctx.read('MoE with attention TP above `{one:code}` must train with sequence parallelism: `{fn:code}` raises `{exc:exc}` "{m:quote}" (two words run together).')
    forward = resolve_symbol(f"megatron.core.transformer.moe.moe_layer.{r.fn}")
    ctx.expect(squash(r.m) in raise_messages(forward, r.exc.__name__), f"{r.fn} raises no {r.exc.__name__} {r.m!r}")
    ctx.expect(f"self.attn_tp_group.size()>{r.one}andnotself.config.sequence_parallel" in flat(source_of(forward)) and "self.training" in source_of(forward), f"{r.fn} does not guard TP > {r.one} without sequence parallelism in training")
    ctx.expect("parallelismare" in r.m, "the quoted message does not run the two words together")
    s = ctx.read('The alltoall dispatcher has no zero-token path: its `{method:code}` reshapes with `{view:code}` unguarded, the reshape behind "{err:quote}".')
    body = source_of(getattr(token_dispatcher.MoEAlltoAllTokenDispatcher, s.method))
    ctx.expect(f"output = {s.view}" in body and "numel()" not in body and "== 0" not in body, f"{s.method} does not reshape with {s.view} unguarded")
    import re

    import torch

    try:
        torch.empty(0).view((4, 1, 8))
    except RuntimeError as error:
        ctx.expect(re.fullmatch(".*".join(re.escape(part) for part in s.err.split(" ... ")), str(error)) is not None, f"an empty reshape says {error}")
    else:
        ctx.expect(False, "an empty tensor reshapes")


@claim("moe-grouped-gemm")
def grouped_gemm(ctx: Context) -> None:
    r = ctx.read("`{field:code}` defaults to `{default:code}` in megatron-core's `{core:code}` and in Bridge's `{provider:code}`.")
    ctx.expect(r.core == "TransformerConfig" and r.provider == "GPTModelProvider", f"SKILL.md names {r.core} and {r.provider}")
    ctx.expect(core_default(r.field) is literal(r.default) and provider_default(r.field) is literal(r.default), f"{r.field} defaults to {core_default(r.field)!r} / {provider_default(r.field)!r}")
    s = ctx.read("Bridge's Qwen3-MoE converter (`{fn:code}`) sets it to `{value:code}`, together with `{a:code}` and `{b:code}`.")
    from megatron.bridge.models.qwen import qwen3_moe_bridge

    method = getattr(qwen3_moe_bridge, s.fn.split(".")[0]).provider_bridge
    ctx.expect(s.fn.endswith(".provider_bridge"), f"SKILL.md names {s.fn}")
    sets = {}
    for node in ast.walk(ast.parse(inspect.cleandoc("\n" + inspect.getsource(method)))):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute) and ast.unparse(node.targets[0].value) == "provider":
            try:
                sets[node.targets[0].attr] = ast.literal_eval(node.value)
            except ValueError:
                pass
    ctx.expect(len({assignment(s.a)[0], assignment(s.b)[0], r.field}) == 3, "SKILL.md names one field twice")
    for text in (f"{r.field} = {s.value}", s.a, s.b):
        field, value = assignment(text)
        ctx.expect(field in sets and sets[field] == value, f"{s.fn} sets {field} to {sets.get(field)!r}")
    t = ctx.read('`{module:code}` in `{modules:code}` without it raises `{exc:exc}` "{m:quote}".')
    refuses(ctx, with_change(ctx, recompute_granularity="selective", **{t.modules: [literal(t.module)]}), t.m, "core", t.exc)
    passes(ctx, with_change(ctx, recompute_granularity="selective", **{t.modules: [literal(t.module)], r.field: True}), f"{t.module} with {r.field}")


@claim("moe-lora-shared-experts")
def lora_shared_experts(ctx: Context) -> None:
    import re

    from .moe import _package_files

    r = ctx.read("Bridge's LoRA treats shared experts as ordinary linears: `{call1:code}` is `{v1:code}` and `{call2:code}` is `{v2:code}` (in `{module:code}`).")
    path = next(p for p in _package_files("megatron.bridge") if p.as_posix().endswith(r.module.replace("megatron.bridge.", "").replace(".", "/") + ".py"))
    tree = ast.parse(path.read_text("utf-8"))
    namespace = {"re": re}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in ("is_expert_linear",):
            node.returns = None
            node.args.args[0].annotation = None
            exec(compile(ast.Module([node], []), str(path), "exec"), namespace)  # noqa: S102 - the library's own function
    for text, value in ((r.call1, r.v1), (r.call2, r.v2)):
        name, args = ast.unparse(ast.parse(text, mode="eval").body.func), [ast.literal_eval(a) for a in ast.parse(text, mode="eval").body.args]
        ctx.expect(name in namespace and namespace[name](*args) is literal(value), f"{text} is {namespace[name](*args) if name in namespace else 'undefined'}")
    shared = ast.literal_eval(ast.parse(r.call1, mode="eval").body.args[0])
    ctx.expect(".shared_experts." in shared and namespace["is_expert_linear"](shared.replace(".shared_experts.", ".experts.")) is True, f"{shared} is not a shared-expert copy of a routed expert linear")
    s = ctx.read("A base linear whose TP communication Megatron turned off (`{pm:code}` of `{none:code}` or `{eec:code}`) gets an adapter without TP communication.")
    source = flat(path.read_text("utf-8"))
    ctx.expect(f'disable_tensor_parallel_comm=getattr(m,"{s.pm}","")is{s.none}orgetattr(m,"{s.eec}",False)' in source, f"the adapter does not turn TP communication off on {s.pm} {s.none} or {s.eec}")
    t = ctx.read('Shared-expert overlap needs the alltoall or flex dispatcher: `{exc:exc}` "{m:quote}".')
    cfg = with_change(ctx, moe_token_dispatcher_type="allgather", moe_shared_expert_intermediate_size=64, moe_shared_expert_overlap=True)
    refuses(ctx, cfg, t.m, "core", t.exc)
    for dispatcher in ("alltoall",):
        passes(ctx, with_change(ctx, moe_token_dispatcher_type=dispatcher, moe_shared_expert_intermediate_size=64, moe_shared_expert_overlap=True), f"shared-expert overlap with {dispatcher}")
