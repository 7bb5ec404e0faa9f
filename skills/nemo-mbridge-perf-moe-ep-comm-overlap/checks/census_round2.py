"""Checks for the sections added after the first held-out round (expert-TP default paths,
fused permutation, MoE metrics with PP, flex-dispatcher SM count, CUDA graph modules,
recomputation with the combined 1F1B schedule, Megatron-LM's delayed-wgrad floor). Each
reads its sentences and compares them with the installed release.
"""

from __future__ import annotations

import ast
import inspect
import re
from unittest import mock

from runner.claims.kit import Context, assignment, claim, literal, resolve_symbol, set_field, source_of

from .census_topics import core_config, core_default, flat, plain_moe, provider_default, with_change
from .moe import FLAG, _package_files, enabled, gpu, passes, raise_messages, refuses, squash


def _tree(obj):
    return ast.parse(inspect.cleandoc("\n" + inspect.getsource(obj)))


def _calls_in(obj, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(_tree(obj)) if isinstance(n, ast.Call) and ast.unparse(n.func).split(".")[-1] == name]


def _captured_etp(provider):
    """What ModelProviderMixin.initialize_model_parallel hands megatron-core for the expert TP size."""
    import torch
    from megatron.core import parallel_state

    seen = {}
    with mock.patch.object(torch.distributed, "is_initialized", lambda: True), mock.patch.object(parallel_state, "initialize_model_parallel", lambda **kw: seen.update(kw)):
        provider.initialize_model_parallel()
    return seen


# --- parallel-layout.md -----------------------------------------------------------------


@claim("moe-etp-paths")
def etp_paths(ctx: Context) -> None:
    from megatron.bridge.models import transformer_config as bridge_tc
    from megatron.bridge.training import initialize

    r = ctx.read("Bridge's default is `{fn:code}`, run by the model config's `{fin:code}`, by `{a:code}` and by `{b:code}`.")
    fn = getattr(bridge_tc, r.fn)
    ctx.expect("expert_tensor_parallel_size = 1" in source_of(fn) and "expert_model_parallel_size > 1" in source_of(fn), f"{r.fn} does not set ETP to 1 when EP > 1")
    ctx.expect(r.fin == "finalize()", f"SKILL.md names {r.fin}")
    for cls in (bridge_tc.TransformerConfig, bridge_tc.MLATransformerConfig, bridge_tc.HeterogeneousTransformerConfig):
        ctx.expect(len([c for c in _calls_in(cls.finalize, r.fn) if ast.unparse(c.args[0]) == "self"]) == 1, f"{cls.__name__}.finalize does not call {r.fn}(self)")
    ctx.expect(r.a != r.b, "SKILL.md names one caller twice")
    for name in (r.a, r.b):
        ctx.expect(len(_calls_in(getattr(initialize, name), r.fn)) == 1, f"initialize.{name} does not call {r.fn}")
    callers = sorted(p.name for p in _package_files("megatron.bridge") if f"{r.fn}(" in p.read_text("utf-8", errors="replace"))
    ctx.expect(callers == ["initialize.py", "transformer_config.py"], f"{r.fn} is called in {callers}")
    s = ctx.read("A provider's own `{meth:code}` does not run it: it passes `{etp:code}` to megatron-core as it stands, so there an unset value on a provider not yet finalized still counts as `{tp:code}`, and an explicit value is honoured.")
    meth = resolve_symbol(f"megatron.bridge.models.model_provider.{s.meth}")
    ctx.expect(r.fn not in source_of(meth) and "finalize" not in source_of(meth), f"{s.meth} runs {r.fn}")
    cfg = plain_moe(ctx)
    cfg.model.tensor_model_parallel_size, cfg.model.expert_model_parallel_size = 2, 2
    setattr(cfg.model, s.etp, None)
    ctx.expect(_captured_etp(cfg.model).get(s.etp, "missing") is None, f"{s.meth} does not pass an unset {s.etp} as None")
    from megatron.core import parallel_state

    fallback = [n for n in ast.walk(_tree(parallel_state.initialize_model_parallel)) if isinstance(n, ast.If) and ast.unparse(n.test) == f"{s.etp} is None" and ast.unparse(n.body[0]) == f"{s.etp} = {s.tp}"]
    ctx.expect(len(fallback) == 1, f"megatron-core does not turn an unset {s.etp} into {s.tp}")
    setattr(cfg.model, s.etp, 3)
    ctx.expect(_captured_etp(cfg.model).get(s.etp) == 3, f"{s.meth} does not pass an explicit {s.etp}")
    t = ctx.read("Set `{fix:code}` (or the size you want) in the recipe when a layout must not depend on the path.")
    target, value = assignment(t.fix)
    ctx.expect(target == f"cfg.model.{s.etp}", f"{t.fix} sets another field")
    ctx.expect(f"{s.etp} = {value!r}" in source_of(fn), f"{t.fix} is not the value Bridge's default writes")
    cfg = plain_moe(ctx)
    cfg.model.tensor_model_parallel_size, cfg.model.sequence_parallel, cfg.model.add_bias_linear = 2, True, False
    set_field(cfg, target, value)
    ctx.expect(_captured_etp(cfg.model).get(s.etp) == value, f"{t.fix} does not reach megatron-core on the provider path")
    passes(ctx, cfg, t.fix)
    ctx.expect(getattr(cfg.model, s.etp) == value, f"{t.fix} comes out {getattr(cfg.model, s.etp)!r} after validation")


@claim("moe-permute-fusion")
def permute_fusion(ctx: Context) -> None:
    import torch
    from megatron.core.transformer.moe import moe_utils, token_dispatcher

    r = ctx.read("`{field:code}` defaults to `{default:code}` in megatron-core's `{core:code}` and in Bridge's `{provider:code}`.")
    ctx.expect(r.core == "TransformerConfig" and r.provider == "GPTModelProvider", f"SKILL.md names {r.core} and {r.provider}")
    ctx.expect(core_default(r.field) is literal(r.default) and provider_default(r.field) is literal(r.default), f"{r.field} defaults to {core_default(r.field)!r} / {provider_default(r.field)!r}")
    s = ctx.read("The dispatchers pass it as `{kw:code}` to megatron-core's `{fn:code}`; with `{off:code}` that runs PyTorch code, which works without Transformer Engine.")
    ctx.expect(f"{s.kw}=self.config.{r.field}" in flat(source_of(token_dispatcher)), f"the dispatchers do not pass {r.field} as {s.kw}")
    fn = getattr(moe_utils, s.fn)
    ctx.expect(not getattr(moe_utils, "HAVE_TE", False), "Transformer Engine is installed; the check needs it absent")
    tokens, routing = torch.arange(8.0).reshape(4, 2), torch.tensor([[True, False], [False, True], [True, True], [False, True]])
    out = fn(tokens, routing, num_out_tokens=int(routing.sum()), **{s.kw: literal(s.off)})
    ctx.expect(out[0].shape[0] == int(routing.sum()), f"{s.fn} with {s.kw}={s.off} returns {out[0].shape}")
    try:
        fn(tokens, routing, num_out_tokens=int(routing.sum()), **{s.kw: not literal(s.off)})
    except ValueError:
        pass
    else:
        ctx.expect(False, f"{s.fn} with {s.kw}={not literal(s.off)} runs without Transformer Engine")
    t = ctx.read('`{on:code}` selects Transformer Engine\'s fused kernels, and without them megatron-core\'s `{cls:code}` raises `{exc:exc}` "{m:quote}".')
    ctx.expect(t.cls == r.core and literal(t.on) is (not literal(r.default)), f"SKILL.md names {t.cls} / {t.on}")
    refuses(ctx, with_change(ctx, **{r.field: literal(t.on)}), t.m, "core", t.exc)
    ctx.says("Bridge's training code does not read the flag.")
    readers = [p.name for p in _package_files("megatron.bridge") if "/training/" in p.as_posix() and r.field in p.read_text("utf-8", errors="replace")]
    ctx.expect(not readers, f"Bridge's training code reads {r.field} in {readers}")
    u = ctx.read("To rule the fused kernels out of a numerical difference, set `{fix:code}`.")
    target, value = assignment(u.fix)
    ctx.expect(target == f"cfg.model.{r.field}" and value is literal(s.off), f"{u.fix} does not turn {r.field} off")
    cfg = with_change(ctx, **{r.field: literal(t.on)})
    set_field(cfg, target, value)
    passes(ctx, cfg, u.fix)


@claim("moe-metrics-pp")
def metrics_pp(ctx: Context) -> None:
    from megatron.bridge.training.utils import train_utils
    from megatron.core.transformer.moe.moe_logging import MoEMetricsTracker

    r = ctx.read("Bridge's `{fn:code}` calls megatron-core's `{track:code}` with `{force:code}`, passing `{a:code}`, `{b:code}` and `{c:code}` from the model config, so a pipeline stage that recorded no MoE loss still enters the cross-stage reduction, with entries sized `{size:code}`.")
    calls = _calls_in(getattr(train_utils, r.fn), r.track)
    ctx.expect(len(calls) == 1, f"{r.fn} calls {r.track} {len(calls)} times")
    kw = {k.arg: k.value for k in calls[0].keywords}
    key, value = assignment(r.force)
    ctx.expect(key in kw and ast.literal_eval(kw[key]) == value, f"{r.fn} passes {key}={ast.unparse(kw[key]) if key in kw else 'nothing'}")
    ctx.expect(len({r.a, r.b, r.c}) == 3, "SKILL.md names one argument twice")
    for name in (r.b, r.c):
        ctx.expect(name in kw and f'getattr(config.model, "{name}"' in ast.unparse(kw[name]).replace("'", '"'), f"{r.fn} does not pass {name} from the model config's {name}")
    for name in (r.a, r.b, r.c):
        ctx.expect(name in kw and ("config.model" in ast.unparse(kw[name]) or name == "num_layers"), f"{r.fn} does not pass {name} from the model config")
    ctx.expect("config.model" in source_of(getattr(train_utils, r.fn)) and "num_layers" in source_of(getattr(train_utils, r.fn)), "num_layers does not come from the model config")
    report = flat(source_of(MoEMetricsTracker.report))
    ctx.expect(f"init_size={flat(r.size)}" in report and "ensure_initialized(name,init_size)" in report, f"report does not size entries {r.size}")
    ctx.expect(report.find("ensure_initialized") < report.find("self._sync_metrics("), "report reduces before it pre-creates the entries")
    s = ctx.read('A loop of your own that calls `{call:code}` with `{force2:code}` and no `{nl:code}` gets `{exc:exc}` "{m:quote}".')
    ctx.expect(s.call == "MoEMetricsTracker.report" and s.force2 == r.force and s.nl == r.a, f"SKILL.md names {s.call} / {s.force2} / {s.nl}")
    try:
        MoEMetricsTracker().report(loss_scale=1.0, iteration=1, **{key: value})
    except s.exc as error:
        ctx.expect(squash(error) == squash(s.m), f"report raised {error}")
    else:
        ctx.expect(False, f"report with {s.force2} and no {s.nl} passes")


# --- dispatchers.md ---------------------------------------------------------------------


@claim("moe-flex-num-sms")
def flex_num_sms(ctx: Context) -> None:
    from megatron.bridge.training import flex_dispatcher_backend as module

    r = ctx.read("Bridge's check of a flex backend reads only the GPU: `{fn:code}` calls `{props:code}` and looks at nothing of the network, NVSHMEM or DeepEP's buffers, so a DeepEP timeout in dispatch is not predicted by any Bridge check.")
    fn = getattr(module, r.fn)
    cuda_calls = {ast.unparse(n.func) for n in ast.walk(_tree(fn)) if isinstance(n, ast.Call) and ast.unparse(n.func).startswith("torch.")}
    ctx.expect(cuda_calls == {r.props}, f"{r.fn} calls {cuda_calls}")
    module_text = source_of(module).lower()
    ctx.expect(not any(word in module_text for word in ("nvshmem", "rdma", "buffer", "timeout", "ib_", "nccl_")), "the flex backend module reads network or buffer settings")
    from megatron.bridge.training import config as bridge_config

    ctx.expect(f"{r.fn}(" in source_of(bridge_config), f"Bridge's config does not call {r.fn}")
    s = ctx.read("The SMs the flex dispatcher's communication uses are set with `{field:code}` (default `{default:code}`: each backend's own default); `{old:code}` is deprecated, warns \"{m:quote}\" and is copied into it.")
    ctx.expect(core_default(s.field) is literal(s.default), f"{s.field} defaults to {core_default(s.field)!r}")
    cfg, caught = core_config(**{s.old: 24})
    ctx.expect(squash(s.m) in caught, f"{s.old} warns {caught}")
    ctx.expect(getattr(cfg, s.field) == 24, f"{s.old}=24 leaves {s.field} at {getattr(cfg, s.field)!r}")
    cfg, _ = core_config(**{s.old: 24, s.field: 16})
    ctx.expect(getattr(cfg, s.field) == 16, f"{s.old} overrides an explicit {s.field}")
    t = ctx.read("To train without DeepEP, call `{call:code}` or set `{fix:code}`.")
    node = ast.parse(t.call, mode="eval").body
    ctx.expect(ast.unparse(node.func) == "apply_flex_dispatcher_backend" and ast.unparse(node.args[0]) == "cfg.model", f"{t.call} is not apply_flex_dispatcher_backend on cfg.model")
    backend = ast.literal_eval(node.args[1])
    cfg = plain_moe(ctx)
    with gpu(9):
        module.apply_flex_dispatcher_backend(cfg.model, backend)
    ctx.expect(backend != "deepep" and (cfg.model.moe_token_dispatcher_type, cfg.model.moe_flex_dispatcher_backend) == ("flex", backend), f"{t.call} gives {cfg.model.moe_token_dispatcher_type}/{cfg.model.moe_flex_dispatcher_backend}")
    cfg = plain_moe(ctx)
    cfg.model.moe_token_dispatcher_type, cfg.model.moe_flex_dispatcher_backend = "flex", "deepep"
    target, value = assignment(t.fix)
    import typing

    from megatron.core.transformer.transformer_config import TransformerConfig

    typed = typing.get_args(typing.get_type_hints(TransformerConfig)["moe_token_dispatcher_type"])
    ctx.expect(value in typed and f'moe_token_dispatcher_type = "{value}"' in source_of(module._fallback_to_alltoall), f"{t.fix} is not the dispatcher Bridge falls back to")
    set_field(cfg, target, value)
    passes(ctx, cfg, t.fix)
    ctx.expect(cfg.model.moe_token_dispatcher_type == value and value != "flex", f"{t.fix} leaves the dispatcher at {cfg.model.moe_token_dispatcher_type!r}")


# --- overlap-internals.md ---------------------------------------------------------------


def _graph(ctx: Context, impl: str, modules: list[str], **fields):
    try:
        cfg, _ = core_config(cuda_graph_impl=impl, cuda_graph_modules=list(modules), **fields)
    except AssertionError as error:
        return squash(error), None
    return None, [m.name for m in cfg.cuda_graph_modules]


@claim("moe-cuda-graph-moe-modules")
def cuda_graph_moe_modules(ctx: Context) -> None:
    r = ctx.read('megatron-core checks the MoE graph modules for the per-layer `{field:code}` values `{local:code}` and `{te:code}`: `{moe:code}` with `{router:code}` fails with "{m1:quote}";')
    impls = (literal(r.local), literal(r.te))
    from megatron.core.transformer.transformer_config import TransformerConfig

    per_layer = [n for n in ast.walk(_tree(TransformerConfig.__post_init__)) if isinstance(n, ast.Compare) and ast.unparse(n.left) == "self.cuda_graph_impl" and isinstance(n.ops[0], ast.In) and isinstance(n.comparators[0], ast.Tuple)]
    ctx.expect(any({e.value for e in n.comparators[0].elts} == set(impls) and len(set(impls)) == 2 for n in per_layer), f"the per-layer graph checks are not for {impls}")
    moe, router = literal(r.moe), literal(r.router)
    for impl in impls:
        ctx.expect(_graph(ctx, impl, [moe, router])[0] == squash(r.m1), f"{impl}: {moe} with {router} gives {_graph(ctx, impl, [moe, router])}")
    ctx.expect(r.field == "cuda_graph_impl" and _graph(ctx, "full_iteration", [])[0] is None, f"SKILL.md names {r.field}")
    s = ctx.read('`{moe2:code}` needs drop-padding MoE (`{cap:code}` set and `{pad:code}`), else "{m2:quote}";')
    pad_field, pad_value = assignment(s.pad)
    drop = {s.cap: 1.0, pad_field: pad_value}
    for impl in impls:
        ctx.expect(_graph(ctx, impl, [literal(s.moe2)])[0] == squash(s.m2), f"{impl}: {s.moe2} alone gives {_graph(ctx, impl, [literal(s.moe2)])}")
        ctx.expect(_graph(ctx, impl, [literal(s.moe2)], **drop)[0] is None, f"{impl}: {s.moe2} with drop-padding fails")
        ctx.expect(_graph(ctx, impl, [literal(s.moe2)], **{s.cap: 1.0})[0] == squash(s.m2), f"{impl}: {s.moe2} with a factor and no padding passes")
    t = ctx.read('with the alltoall dispatcher, a capacity factor without padding rules out `{pre:code}`: "{m3:quote}".')
    pre = literal(t.pre)
    for impl in impls:
        ctx.expect(_graph(ctx, impl, [router, pre], moe_token_dispatcher_type="alltoall", **{s.cap: 1.0})[0] == squash(t.m3), f"{impl}: alltoall with a factor and {pre} passes")
        ctx.expect(_graph(ctx, impl, [router, pre], moe_token_dispatcher_type="alltoall")[0] is None, f"{impl}: alltoall without a factor rejects {pre}")
        ctx.expect(_graph(ctx, impl, [router, pre], moe_token_dispatcher_type="alltoall", **drop)[0] is None, f"{impl}: alltoall with drop-padding rejects {pre}")
    u = ctx.read('`{pre2:code}` without `{router2:code}` fails with "{m4:quote}" under `{te2:code}`, while `{local2:code}` adds the missing `{router3:code}` itself.')
    ctx.expect(literal(u.pre2) == pre and literal(u.router2) == literal(u.router3) == router, "SKILL.md names other modules")
    ctx.expect(_graph(ctx, literal(u.te2), [pre])[0] == squash(u.m4), f"{u.te2}: {pre} alone gives {_graph(ctx, literal(u.te2), [pre])}")
    error, modules = _graph(ctx, literal(u.local2), [pre])
    ctx.expect(error is None and router in modules, f"{u.local2}: {pre} alone gives {error or modules}")


@claim("moe-combined-1f1b-microbatch")
def combined_microbatch(ctx: Context) -> None:
    from megatron.core.pipeline_parallel import combined_1f1b

    r = ctx.read('The combined 1F1B schedule takes no per-microbatch activation checkpointing: `{fn:code}` asserts "{m:quote}", and no file of `{pkg:code}` passes that argument.')
    fn = getattr(combined_1f1b, r.fn)
    ctx.expect(squash(r.m) in raise_messages(fn, "AssertionError"), f"{r.fn} has no assertion {r.m!r}")
    argument = r.m.split()[0]
    asserts = [n for n in ast.walk(_tree(fn)) if isinstance(n, ast.Assert) and ast.unparse(n.test) == f"{argument} is None"]
    ctx.expect(len(asserts) == 1, f"{r.fn} does not assert {argument} is None")
    users = [p.name for p in _package_files(r.pkg) if argument in p.read_text("utf-8", errors="replace")]
    ctx.expect(not users, f"{r.pkg} mentions {argument} in {users}")
    s = ctx.read('Full recomputation with the overlap is refused in the pinned release; to save activation memory with the overlap on, recompute selected modules other than `{moe:code}`:')
    cfg = enabled(ctx)
    cfg.model.recompute_granularity, cfg.model.recompute_method, cfg.model.recompute_num_layers = "full", "uniform", 1
    from .moe import outcome

    ctx.expect(outcome(cfg)[0] is not None, "full recomputation passes with the overlap")
    cfg = enabled(ctx)
    cfg.model.recompute_granularity, cfg.model.recompute_modules = "selective", [literal(s.moe)]
    ctx.expect(f"disable {literal(s.moe)} in recompute_modules" in squash(outcome(cfg)[0]), f"selective recomputation of {s.moe} passes with the overlap")
    cfg = ctx.apply(enabled(ctx))
    passes(ctx, cfg, "the selective block")
    ctx.expect(getattr(cfg.model, FLAG) is True and literal(s.moe) not in cfg.model.recompute_modules and cfg.model.recompute_granularity == "selective", f"the block leaves {FLAG}={getattr(cfg.model, FLAG)}, modules {cfg.model.recompute_modules}")


@claim("moe-delay-wgrad-mlm-floor")
def delay_wgrad_mlm_floor(ctx: Context) -> None:
    from megatron.bridge.training import comm_overlap
    from packaging.version import Version

    r = ctx.read('Megatron-LM\'s argument check `{fn:code}`, which Bridge\'s training path does not call, sets a higher floor for the same pair: with `{a:code}` and `{b:code}` it asserts "{m:quote}".')
    fn = resolve_symbol(r.fn)
    tree = _tree(fn)
    found = None
    for outer in ast.walk(tree):
        if isinstance(outer, ast.If) and ast.unparse(outer.test) == f"args.{r.a}":
            for inner in ast.walk(outer):
                if inner in outer.body and isinstance(inner, ast.If) and ast.unparse(inner.test) == f"args.{r.b}":
                    for node in inner.body:
                        if isinstance(node, ast.Assert) and isinstance(node.test, ast.Call) and ast.unparse(node.test.func) == "is_te_min_version":
                            found = (node.test.args[0].value, squash(ast.literal_eval(node.msg)))
                            break
                    if found:
                        break
            if found:
                break
    ctx.expect(found is not None and found[1] == squash(r.m), f"{r.fn} asserts {found} for {r.a} with {r.b}")
    ctx.expect(squash(r.m).endswith(f"when enabling {r.a}") and squash(r.m).startswith(r.b), f"the message does not name {r.b} with {r.a}")
    stated = re.search(r">= ([0-9.]+)", r.m)
    ctx.expect(stated is not None and stated.group(1) == found[0], f"the message does not state the floor {found[0]}")
    callers = [p.name for p in _package_files("megatron.bridge") if re.search(r"\bvalidate_args\(", p.read_text("utf-8", errors="replace"))]
    ctx.expect(not callers, f"Bridge calls validate_args in {callers}")
    bridge = re.findall(r"TE version >= ([0-9.]+) is required for overlap_grad_reduce", source_of(comm_overlap))
    ctx.expect(len(bridge) == 1 and Version(found[0]) > Version(bridge[0]), f"Bridge's floor {bridge} is not below {found[0]}")
