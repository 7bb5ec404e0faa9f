"""Checks for this skill (claim ids match its SKILL.md markers).

Each check reads its values from the skill's sentences and compares them with what the
pinned release does on a CPU: the enablement block applied to a small GPT made MoE, then
Bridge's own `runtime_config_update()` (CommOverlapConfig.setup(), then cfg.validate() and
megatron-core's TransformerConfig checks). A quoted message must equal the one raised, and
come from the library the sentence names (Bridge or megatron-core). What needs a GPU is
simulated by standing in for `torch.cuda`'s device query; what needs DeepEP or a built
model is read from the installed source.
"""

from __future__ import annotations

import ast
import inspect
import logging
import traceback
from types import SimpleNamespace
from unittest import mock

from runner.claims.kit import (
    ClaimFailed,
    Context,
    assignment,
    call,
    claim,
    collect_warnings,
    comparison,
    function_source,
    get_field,
    literal,
    quiet,
    resolve,
    resolve_symbol,
    set_field,
    source_of,
    threshold,
    tiny_config,
)

ENABLE = "moe-enable-override"
FLAG = "overlap_moe_expert_parallel_comm"
DELAY = "delay_wgrad_compute"
WORLD = 8


def squash(text: object) -> str:
    return " ".join(str(text).split())


def comm_overlap_module():
    from megatron.bridge.training import comm_overlap

    return comm_overlap


def enabled(ctx: Context):
    """The enablement block applied to the tiny GPT: the layout every pitfall starts from."""
    return ctx.sibling(ENABLE).apply(tiny_config())


def model_only(ctx: Context):
    """The same layout with the flag on the model and no CommOverlapConfig: megatron-core's checks alone."""
    cfg = enabled(ctx)
    cfg.comm_overlap = None
    setattr(cfg.model, FLAG, True)
    return cfg


def model_only_with(ctx: Context, change):
    cfg = model_only(ctx)
    change(cfg)
    return cfg


def overlap_config(**fields):
    return comm_overlap_module().CommOverlapConfig(**fields)


def outcome(cfg, world: int = WORLD) -> tuple[BaseException | None, str]:
    """Resolve `cfg`; the exception it raised (or None) and which library raised it."""
    try:
        with quiet():
            resolve(cfg, world_size=world)
    except Exception as error:  # noqa: BLE001 - the exception is the observation
        frames = traceback.extract_tb(error.__traceback__)
        where = frames[-1].filename.replace("\\", "/") if frames else ""
        origin = "bridge" if "megatron/bridge/" in where else "core" if "megatron/core/" in where else where
        return error, origin
    return None, ""


def refuses(ctx: Context, cfg, message: str, origin: str, kind: type[BaseException] = AssertionError) -> BaseException:
    """`cfg` fails validation with exactly `message`, raised by `origin` (bridge or core)."""
    error, where = outcome(cfg)
    ctx.expect(error is not None, f"the layout passes validation; the skill says it fails with {message!r}")
    ctx.expect(isinstance(error, kind) and squash(error) == squash(message), f"validation raised {type(error).__name__}: {squash(error)!r}, not {kind.__name__}: {message!r}")
    ctx.expect(where == origin, f"{message!r} is raised by {where}, not by {'Bridge' if origin == 'bridge' else 'megatron-core'}")
    return error


def passes(ctx: Context, cfg, what: str):
    error, where = outcome(cfg)
    ctx.expect(error is None, f"{what} fails validation ({where}): {type(error).__name__}: {squash(error)}")
    return cfg


# --- enabling ---------------------------------------------------------------------------


@claim(ENABLE)
def enable_override(ctx: Context) -> None:
    r = ctx.read("A MoE GPT with {experts:int} experts, top-{topk:int} routing and EP={ep:int}, in {dtype:bf16|fp16}, on {world:int} GPUs gets the EP all-to-all overlap from this block:")
    cfg = ctx.apply(tiny_config())
    m = cfg.model
    got = (m.num_moe_experts, m.moe_router_topk, m.expert_model_parallel_size)
    ctx.expect(got == (r.experts, r.topk, r.ep), f"the block sets (experts, top-k, EP) = {got}; the sentence says ({r.experts}, {r.topk}, {r.ep})")
    ctx.expect(not (m.bf16 or m.fp16), "the block's model is already half precision before mixed precision applies")
    ctx.expect(cfg.comm_overlap.tp_comm_overlap is False, "the block asks for TP overlap too; the sentence is about the EP overlap alone")
    passes(ctx, cfg, "the enablement block")
    ctx.expect(getattr(m, r.dtype) is True, f"after runtime_config_update the model is not {r.dtype}")
    ctx.expect(getattr(m, FLAG) is True, f"the block does not get {FLAG} from Bridge")
    # Megatron carves expert parallelism out of the data-parallel ranks: EP must divide them.
    ctx.expect(r.world % r.ep == 0 and cfg.data_parallel_size == r.world, f"{r.world} GPUs with EP={r.ep} resolve to data-parallel size {cfg.data_parallel_size}")


@claim("moe-set-through-comm-overlap")
def set_through_comm_overlap(ctx: Context) -> None:
    r = ctx.read("**Set both flags on the `{cls:code}`.**")
    CommOverlapConfig = comm_overlap_module().CommOverlapConfig
    ctx.expect(r.cls == CommOverlapConfig.__name__, f"SKILL.md names {r.cls!r}")
    s = ctx.read("When `{attr:code}` is set and its `{flag:code}` is left `{unset:code}`, `{method:code}` writes `{written:code}` over a `{model_set:code}`, and the same happens to `{other:code}`.")
    ctx.expect(s.attr == "cfg.comm_overlap" and s.method == f"{r.cls}.setup()", f"SKILL.md names {s.attr} and {s.method}")
    target, value = assignment(s.model_set)
    ctx.expect(target == f"cfg.model.{s.flag}" and value is True, f"{s.model_set} does not set the model's {s.flag} on")
    ctx.expect(s.other != s.flag and s.other in {f.name for f in __import__("dataclasses").fields(CommOverlapConfig)}, f"{s.other} is not another CommOverlapConfig field")
    cfg = enabled(ctx)
    cfg.comm_overlap = overlap_config(tp_comm_overlap=False)
    ctx.expect(getattr(cfg.comm_overlap, s.flag) is literal(s.unset) and getattr(cfg.comm_overlap, s.other) is literal(s.unset), f"a CommOverlapConfig leaves {s.flag} at {getattr(cfg.comm_overlap, s.flag)!r}, not {s.unset}")
    set_field(cfg, target, value)
    setattr(cfg.model, s.other, True)
    passes(ctx, cfg, "the model flags with an unset CommOverlapConfig")
    for name in (s.flag, s.other):
        ctx.expect(getattr(cfg.model, name) == literal(s.written) != value, f"setup() leaves cfg.model.{name} at {getattr(cfg.model, name)!r}, the skill says it writes {s.written}")
    o = ctx.read("Only with `{none:code}` are the model fields used as they are.")
    none_target, none_value = assignment(o.none)
    cfg = enabled(ctx)
    set_field(cfg, none_target, none_value)
    set_field(cfg, target, value)
    passes(ctx, cfg, f"the model flag with {o.none}")
    ctx.expect(getattr(cfg.model, s.flag) is value, f"with {o.none} the model's {s.flag} came out {getattr(cfg.model, s.flag)!r}")
    t = ctx.read("`{cls2:code}` has no default for `{required:code}`, so `{bad:code}` raises `{exc:exc}`; pass `{fix:code}` when you want no TP overlap.")
    ctx.expect(t.cls2 == r.cls, f"SKILL.md names {t.cls2!r}")
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(CommOverlapConfig)}
    ctx.expect(t.required in fields and fields[t.required].default is dataclasses.MISSING and fields[t.required].default_factory is dataclasses.MISSING, f"{r.cls}.{t.required} has a default")
    name, kwargs = call(t.bad)
    ctx.expect(name == r.cls and t.required not in kwargs, f"{t.bad} is not a {r.cls} without {t.required}")
    ctx.expect_raises(lambda: CommOverlapConfig(**kwargs), t.exc, t.required)
    fix_name, fix_value = assignment(t.fix)
    ctx.expect(fix_name == t.required and fix_value is False, f"the fix sets {t.fix}, not {t.required}=False (no TP overlap)")
    cfg = enabled(ctx)
    cfg.comm_overlap = CommOverlapConfig(**kwargs, **{fix_name: fix_value})
    passes(ctx, cfg, f"{r.cls} with {t.fix}")
    ctx.expect(cfg.model.tp_comm_overlap is False and getattr(cfg.model, s.flag) is True, f"with {t.fix} Bridge resolves tp_comm_overlap={cfg.model.tp_comm_overlap}, {s.flag}={getattr(cfg.model, s.flag)}")


def _package_files(package: str):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec(package)
    return sorted(Path(spec.origin).parent.rglob("*.py"))


@claim("moe-model-field-names")
def model_field_names(ctx: Context) -> None:
    import dataclasses

    from megatron.bridge.models import GPTModelProvider

    r = ctx.read("`{bogus:code}` is no field of the model config, although some recipes assign it: the assignment adds an attribute that nothing reads.")
    ctx.expect(r.bogus.startswith("cfg.model."), f"{r.bogus} is not a cfg.model attribute")
    name = r.bogus.removeprefix("cfg.model.")
    fields = {f.name for f in dataclasses.fields(GPTModelProvider)}
    ctx.expect(name not in fields, f"{name} is a field of GPTModelProvider")
    assigned, read = [], []
    for package in ("megatron.bridge", "megatron.core"):
        for path in _package_files(package):
            text = path.read_text("utf-8", errors="replace")
            if name not in text:
                continue
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.Attribute) and node.attr == name:
                    (assigned if isinstance(node.ctx, ast.Store) else read).append(path)
                elif isinstance(node, ast.Constant) and node.value == name:
                    read.append(path)  # getattr(cfg, "name") and the like
    ctx.expect(any("recipes" in path.parts for path in assigned), f"no recipe assigns {name}")
    ctx.expect(not read, f"{name} is read in {sorted({p.name for p in read})[:3]}")
    s = ctx.read("The model's fields are `{f1:code}` and `{f2:code}`.")
    ctx.expect({s.f1, s.f2} == {FLAG, DELAY} and {s.f1, s.f2} <= fields, f"SKILL.md names {s.f1} and {s.f2}")


@claim("moe-checked-twice")
def checked_twice(ctx: Context) -> None:
    r = ctx.read("Bridge checks the layout in `{method:code}` during `{fn:code}`, before `{validate:code}` runs the model's `{finalize:code}`, where megatron-core checks the same conditions again in its own words.")
    ctx.expect(r.method == "CommOverlapConfig.setup()", f"SKILL.md names {r.method}")
    update = source_of(resolve_symbol(f"megatron.bridge.training.config.{r.fn.split('(')[0]}"))
    setup_at, validate_at = update.find("cfg.comm_overlap.setup("), update.find(r.validate)
    ctx.expect(0 <= setup_at < validate_at, f"{r.fn} does not run {r.method} before {r.validate}")
    validate = function_source("megatron.bridge.training.config", "validate")
    ctx.expect(f"self.model.{r.finalize}" in validate, f"{r.validate} does not call the model's {r.finalize}")
    setup_source = source_of(comm_overlap_module().CommOverlapConfig._get_model_comm_overlap_cfgs)
    from megatron.core.transformer.transformer_config import TransformerConfig

    core_source = source_of(TransformerConfig.__post_init__)
    bare = lambda text: "".join(text.split()).replace("model_cfg.", "").replace("self.", "")  # noqa: E731
    for condition in ("expert_model_parallel_size>1", "bf16or", "mtp_num_layersin(None,0,1", "notmoe_shared_expert_overlap", "recompute_granularity!="):
        ctx.expect(condition in bare(setup_source) and condition in bare(core_source), f"{condition!r} is not checked by both Bridge and megatron-core")
    s = ctx.read("Bridge checks only what the `{cls:code}` asks for; a flag set on the model with `{none:code}` meets megatron-core's checks alone.")
    ctx.expect(s.cls == "CommOverlapConfig" and assignment(s.none) == ("cfg.comm_overlap", None), f"SKILL.md names {s.cls} and {s.none}")
    cfg = enabled(ctx)
    cfg.model.expert_model_parallel_size = 1
    error, where = outcome(cfg)
    ctx.expect(error is not None and where == "bridge", f"EP=1 asked for through {s.cls} is refused by {where or 'nobody'}")
    cfg = model_only(ctx)
    cfg.model.expert_model_parallel_size = 1
    error, where = outcome(cfg)
    ctx.expect(error is not None and where == "core", f"EP=1 with the flag on the model and {s.none} is refused by {where or 'nobody'}, not megatron-core alone")


# --- what the overlap needs -------------------------------------------------------------


def bridge_and_core(ctx: Context, change, bridge: str, core: str | None = None, *, core_reaches: bool = True) -> None:
    """`change` applied to the enabled layout fails in Bridge with `bridge`, and with the
    flag on the model alone in megatron-core with `core` (the same words when None).
    `core_reaches=False`: megatron-core stops such a layout earlier, on another rule."""
    cfg = enabled(ctx)
    change(cfg)
    refuses(ctx, cfg, bridge, "bridge")
    if not core_reaches:
        error, where = outcome(model_only_with(ctx, change))
        ctx.expect(error is not None and where == "core", f"with the flag on the model alone the layout passes ({where})")
        return
    cfg = model_only(ctx)
    change(cfg)
    refuses(ctx, cfg, bridge if core is None else core, "core")


@claim("moe-needs-ep")
def needs_ep(ctx: Context) -> None:
    r = ctx.read("Each item quotes Bridge's `{exc:code}`, then megatron-core's where it words it differently.")
    ctx.expect(r.exc == AssertionError.__name__, f"Bridge's checks raise AssertionError, not {r.exc}")
    i = ctx.read('- **Expert parallelism**: `{cond:code}`, else "{bridge:quote}" (megatron-core: "{core:quote}").')
    field, op, bound = comparison(i.cond)
    good, bad = threshold(op, bound)
    ctx.expect(field == "expert_model_parallel_size", f"SKILL.md compares {field}")
    bridge_and_core(ctx, lambda cfg: setattr(cfg.model, field, bad), i.bridge, i.core)
    ctx.expect(squash(i.bridge) != squash(i.core), "the two messages are the same; the item quotes megatron-core's only where it differs")
    cfg = enabled(ctx)
    setattr(cfg.model, field, good)
    passes(ctx, cfg, f"{field}={good}")


@claim("moe-torch-floor")
def torch_floor(ctx: Context) -> None:
    from packaging.version import Version

    r = ctx.read('- **torch {version:version} or newer**: with an older torch Bridge stops with "{m:quote}".')
    ctx.expect(f"< {r.version}" in r.m, f"the message does not name the floor {r.version}")
    for installed, fails in ((r.version, False), (below(r.version), True)):
        cfg = enabled(ctx)
        with mock.patch.object(comm_overlap_module(), "is_torch_min_version", lambda wanted, *a, _t=installed, **k: Version(_t) >= Version(wanted)):
            error, where = outcome(cfg)
        stopped = where == "bridge" and squash(error) == squash(r.m)
        ctx.expect(stopped is fails, f"with torch {installed} Bridge {'stops' if stopped else 'passes'} the overlap")


@claim("moe-needs-experts")
def needs_experts(ctx: Context) -> None:
    i = ctx.read('- **More than one expert**: `{cond:code}`, else "{bridge:quote}".')
    field, op, bound = comparison(i.cond)
    good, bad = threshold(op, bound)
    ctx.expect(field == "num_moe_experts" and (op, bound) in ((">", 1), (">=", 2)), f"SKILL.md says {i.cond}; the heading says more than one expert")

    def fewer(cfg) -> None:
        cfg.model.num_moe_experts = bad
        cfg.model.moe_router_topk = 1
        cfg.model.moe_router_pre_softmax = True  # megatron-core's own rule for top-1 routing

    cfg = enabled(ctx)
    fewer(cfg)
    error = refuses(ctx, cfg, i.bridge, "bridge")
    line = traceback.extract_tb(error.__traceback__)[-1].lineno
    cfg = enabled(ctx)
    cfg.model.num_moe_experts = good
    passes(ctx, cfg, f"{good} experts")
    d = ctx.read("A dense model (`{dense:code}`) fails the same line with `{exc:exc}`, not this message.")
    target, value = assignment(d.dense)
    cfg = enabled(ctx)
    setattr(cfg.model, target, value)
    error, where = outcome(cfg)
    ctx.expect(isinstance(error, d.exc) and where == "bridge", f"{d.dense} raised {type(error).__name__} in {where}, not {d.exc.__name__} in Bridge")
    ctx.expect(traceback.extract_tb(error.__traceback__)[-1].lineno == line and squash(error) != squash(i.bridge), f"{d.dense} fails elsewhere than the experts check")


@claim("moe-needs-dispatcher")
def needs_dispatcher(ctx: Context) -> None:
    import dataclasses

    from megatron.bridge.models import GPTModelProvider

    i = ctx.read('- **The alltoall or flex dispatcher**: the model\'s default `{field:code}` is `{default:code}`, which fails with "{bridge:quote}" (megatron-core: "{core:quote}").')
    fields = {f.name: f for f in dataclasses.fields(GPTModelProvider)}
    ctx.expect(i.field in fields and fields[i.field].default == literal(i.default), f"GPTModelProvider.{i.field} defaults to {fields.get(i.field) and fields[i.field].default!r}, not {i.default}")
    bridge_and_core(ctx, lambda cfg: setattr(cfg.model, i.field, literal(i.default)), i.bridge, i.core)
    for name in ("alltoall", "flex"):
        ctx.expect(f"'{name}'" in i.bridge and name in i.core, f"the messages do not name the {name} dispatcher")


@claim("moe-needs-half-precision")
def needs_half_precision(ctx: Context) -> None:
    i = ctx.read('- **{a:bf16|fp16} or {b:bf16|fp16}**: an fp32 model fails with "{bridge:quote}".')
    ctx.expect(i.a != i.b, "SKILL.md names one precision twice")

    def fp32(cfg) -> None:
        cfg.mixed_precision = None
        cfg.model.bf16 = cfg.model.fp16 = False

    cfg = enabled(ctx)
    fp32(cfg)
    refuses(ctx, cfg, i.bridge, "bridge")
    m = ctx.read("Mixed precision is applied before the check, so `{mp:code}` on an fp32 model passes.")
    target, value = assignment(m.mp)
    update = source_of(resolve_symbol("megatron.bridge.training.config.runtime_config_update"))
    ctx.expect(0 <= update.find("cfg.mixed_precision.setup(") < update.find("cfg.comm_overlap.setup("), "runtime_config_update applies mixed precision after the overlap checks")
    for precision in (i.a, i.b):
        cfg = enabled(ctx)
        fp32(cfg)
        set_field(cfg, target, value.replace(value.split("_")[0], precision) if precision not in value else value)
        passes(ctx, cfg, f"an fp32 model with {precision} mixed precision")
        ctx.expect(getattr(cfg.model, FLAG) is True, f"{FLAG} is off with {precision} mixed precision")


@claim("moe-pp-needs-vpp")
def pp_needs_vpp(ctx: Context) -> None:
    i = ctx.read('- **Virtual pipeline stages with PP**: with `{cond:code}`, `{vpp:code}` must be set, else "{bridge:quote}".')
    field, op, bound = comparison(i.cond)
    pp, flat = threshold(op, bound)
    ctx.expect(field == "pipeline_model_parallel_size", f"SKILL.md compares {field}")

    def layout(cfg, pipeline: int, virtual: int | None) -> None:
        setattr(cfg.model, field, pipeline)
        setattr(cfg.model, i.vpp, virtual)
        cfg.model.num_layers = max(2, pipeline * (virtual or 1))

    bridge_and_core(ctx, lambda cfg: layout(cfg, pp, None), i.bridge)
    for pipeline, virtual in ((pp, 2), (flat, None)):
        cfg = enabled(ctx)
        layout(cfg, pipeline, virtual)
        passes(ctx, cfg, f"PP={pipeline}, VPP={virtual}")
    ctx.says("megatron-core's pipeline schedule without interleaving has no overlap path;")
    from megatron.core.pipeline_parallel import schedules

    ctx.expect(FLAG not in source_of(schedules.forward_backward_pipelining_without_interleaving), "the non-interleaved schedule reads the overlap flag")
    s = ctx.read("`{flat_schedule:code}` and the interleaved schedule switch to the combined 1F1B schedule when the flag is on and the step is not forward-only.")
    for function, combined in ((getattr(schedules, s.flat_schedule, None), "combined_1f1b_schedule_for_no_pipelining("), (schedules.forward_backward_pipelining_with_interleaving, "combined_1f1b_schedule_for_interleaved_pipelining(")):
        ctx.expect(function is not None, f"megatron-core has no schedule {s.flat_schedule}")
        body = source_of(function)
        ctx.expect(f"config.{FLAG} and not forward_only" in body and combined in body, f"{function.__name__} does not switch to {combined} on the flag outside forward-only steps")


@claim("moe-no-recompute")
def no_recompute(ctx: Context) -> None:
    ctx.says("- **No recomputation of the layer**:")
    r = ctx.read('`{full:code}` fails with "{m1:quote}", any `{method:code}` with "{m2:quote}", any `{layers:code}` with "{m3:quote}", and `{module:code}` in `{modules:code}` with "{m4:quote}".')
    target, value = assignment(r.full)
    ctx.expect(target == "recompute_granularity", f"SKILL.md sets {target}")
    # megatron-core refuses full recomputation without a method before its overlap rules
    bridge_and_core(ctx, lambda cfg: setattr(cfg.model, target, value), r.m1, core_reaches=False)
    cases = []
    for method in ("uniform", "block"):
        cases.append((lambda cfg, method=method: setattr(cfg.model, r.method, method), r.m2))
    cases.append((lambda cfg: setattr(cfg.model, r.layers, 1), r.m3))
    cases.append((lambda cfg: (setattr(cfg.model, "recompute_granularity", "selective"), setattr(cfg.model, r.modules, ["core_attn", literal(r.module)])), r.m4))
    for change, message in cases:
        bridge_and_core(ctx, change, message)
    ctx.says("Selective recomputation of other modules passes.")
    for modules in (None, ["core_attn"], ["layernorm", "mlp"]):
        cfg = enabled(ctx)
        cfg.model.recompute_granularity = "selective"
        setattr(cfg.model, r.modules, modules)
        passes(ctx, cfg, f"selective recomputation of {modules or 'the default modules'}")


@claim("moe-no-shared-expert-overlap")
def no_shared_expert_overlap(ctx: Context) -> None:
    r = ctx.read('- **No shared-expert overlap**: `{bad:code}` fails with "{m:quote}"; set it `{fix:code}`.')
    target, value = assignment(r.bad)

    def shared(cfg, on) -> None:
        cfg.model.moe_shared_expert_intermediate_size = 64
        setattr(cfg.model, target, on)

    bridge_and_core(ctx, lambda cfg: shared(cfg, value), r.m)
    cfg = enabled(ctx)
    shared(cfg, literal(r.fix))
    passes(ctx, cfg, f"a shared expert with {target}={r.fix}")
    ctx.expect(literal(r.fix) is not value, "the fix sets the value that fails")


@claim("moe-mtp-one-layer")
def mtp_one_layer(ctx: Context) -> None:
    r = ctx.read('- **At most one MTP layer**: `{bad:code}` fails with "{m:quote}"; `{ok:code}` passes.')
    bad_field, bad = assignment(r.bad)
    ok_field, ok = assignment(r.ok)
    ctx.expect(bad_field == ok_field == "mtp_num_layers" and (ok, bad) == (1, 2), f"SKILL.md tests {r.ok} and {r.bad}; at most one layer is the boundary 1 | 2")
    bridge_and_core(ctx, lambda cfg: setattr(cfg.model, bad_field, bad), r.m)
    cfg = enabled(ctx)
    setattr(cfg.model, ok_field, ok)
    passes(ctx, cfg, r.ok)


@claim("moe-cuda-graph-scope")
def cuda_graph_scope(ctx: Context) -> None:
    r = ctx.read('- **No CUDA graphs over the experts**: with Transformer Engine CUDA graphs (`{impl:code}`), `{a:code}` or `{b:code}` in `{modules:code}` fails in megatron-core with "{m:quote}"; `{ok1:code}` and `{ok2:code}` pass.')
    target, value = assignment(r.impl)

    def graphs(cfg, module: str) -> None:
        setattr(cfg.model, target, value)
        setattr(cfg.model, r.modules, [module])
        if module == "moe":  # megatron-core graphs MoE layers only with drop-padding
            cfg.model.moe_expert_capacity_factor = 1.0
            cfg.model.moe_pad_expert_input_to_capacity = True
        if module == "mlp":  # and MLP graphs only where a dense layer exists
            cfg.model.moe_layer_freq = [0, 1]

    refused = {literal(r.a), literal(r.b)}
    ctx.expect(len(refused) == 2, "SKILL.md names one scope twice")
    for module in sorted(refused):
        cfg = enabled(ctx)
        graphs(cfg, module)
        refuses(ctx, cfg, r.m, "core")
    ctx.expect(literal(r.ok1) != literal(r.ok2), "SKILL.md names one passing scope twice")
    for module in (literal(r.ok1), literal(r.ok2)):
        cfg = enabled(ctx)
        graphs(cfg, module)
        passes(ctx, cfg, f"Transformer Engine graphs over {module}")
        ctx.expect(getattr(cfg.model, FLAG) is True, f"{FLAG} is off with graphs over {module}")


@claim("moe-companion-flags")
def companion_flags(ctx: Context) -> None:
    ctx.says("Two more model flags are tied to the overlap, and megatron-core checks both:")
    r = ctx.read('`{needs:code}` needs it ("{m1:quote}"), while `{excludes:code}` excludes it ("{m2:quote}").')
    needs, needs_value = assignment(r.needs)
    excludes, excludes_value = assignment(r.excludes)
    cfg = enabled(ctx)
    cfg.comm_overlap = None  # the flag off: nothing asks for the overlap
    setattr(cfg.model, needs, needs_value)
    refuses(ctx, cfg, r.m1, "core")
    cfg = enabled(ctx)
    setattr(cfg.model, needs, needs_value)
    passes(ctx, cfg, f"{r.needs} with the overlap")
    cfg = enabled(ctx)
    setattr(cfg.model, excludes, excludes_value)
    refuses(ctx, cfg, r.m2, "core")


# --- delayed weight gradients -----------------------------------------------------------


@claim("moe-delay-wgrad-needs-overlap")
def delay_wgrad_needs_overlap(ctx: Context) -> None:
    r = ctx.read('`{field:code}` needs the overlap: `{bad:code}` fails with "{m1:quote}".')
    ctx.expect(r.field == DELAY, f"SKILL.md names {r.field}")
    name, kwargs = call(r.bad)
    ctx.expect(name == "CommOverlapConfig" and kwargs == {"tp_comm_overlap": False, r.field: True}, f"{r.bad} asks for more than {r.field} without any overlap")
    cfg = enabled(ctx)
    cfg.comm_overlap = overlap_config(**kwargs)
    refuses(ctx, cfg, r.m1, "bridge")
    s = ctx.read('Splitting the two (overlap on the model, delay on the `{cls:code}`) passes Bridge\'s check, then `{method:code}` writes the overlap flag to `{written:code}` and megatron-core fails with "{m2:quote}".')
    ctx.expect(s.cls == name and s.method == "setup()", f"SKILL.md names {s.cls} and {s.method}")
    cfg = enabled(ctx)
    cfg.comm_overlap = overlap_config(**kwargs)
    setattr(cfg.model, FLAG, True)
    refuses(ctx, cfg, s.m2, "core")
    ctx.expect(getattr(cfg.model, FLAG) == literal(s.written) and getattr(cfg.model, DELAY) is True, f"after the split setup() left {FLAG}={getattr(cfg.model, FLAG)}, {DELAY}={getattr(cfg.model, DELAY)}")
    cfg = enabled(ctx)
    cfg.comm_overlap = overlap_config(**{**kwargs, FLAG: True})
    passes(ctx, cfg, "the overlap with delayed weight gradients")
    ctx.expect(getattr(cfg.model, DELAY) is True, f"{DELAY} did not reach the model")


def te_at(version: str):
    """Bridge's Transformer Engine version test as if `version` were installed."""
    from packaging.version import Version

    return mock.patch.object(comm_overlap_module(), "is_te_min_version", lambda wanted, *a, **k: Version(version) >= Version(wanted))


def with_delay(ctx: Context):
    cfg = enabled(ctx)
    cfg.comm_overlap = overlap_config(tp_comm_overlap=False, **{FLAG: True, DELAY: True})
    return cfg


def below(version: str) -> str:
    parts = [int(p) for p in version.split(".")]
    return f"{parts[0]}.{parts[1] - 1}.99" if parts[1] else f"{parts[0] - 1}.99.0"


@claim("moe-delay-wgrad-te-floor")
def delay_wgrad_te_floor(ctx: Context) -> None:
    from megatron.core.utils import get_te_version

    r = ctx.read('With `{field:code}`, Bridge requires Transformer Engine {version:version} or newer when `{ddp:code}` is on: "{m:quote}" (the message runs two words together; without Transformer Engine the version reads {zero:version}).')
    ctx.expect(r.field == DELAY, f"SKILL.md names {r.field}")
    ctx.expect(f"using{r.field}" in r.m.replace(" ", "") and f"using{r.field}" in r.m, f"the quoted message does not run 'using' and {r.field} together")
    ctx.expect(str(get_te_version()) == r.zero, f"without Transformer Engine megatron-core reports version {get_te_version()}, not {r.zero}")
    ctx.expect(f">= {r.version} " in r.m and r.m.endswith(f"Current TE version: {r.zero}"), f"the message does not state the floor {r.version} and the version {r.zero}")

    flag_name = r.ddp.rsplit(".", 1)[-1]
    cfg = with_delay(ctx)
    set_field(cfg, r.ddp, True)
    refuses(ctx, cfg, r.m, "bridge")
    for installed, fails in ((r.version, False), (below(r.version), True)):
        cfg = with_delay(ctx)
        set_field(cfg, r.ddp, True)
        with te_at(installed):
            error, where = outcome(cfg)
        stopped = error is not None and where == "bridge" and flag_name in str(error)
        ctx.expect(stopped is fails, f"with Transformer Engine {installed} Bridge {'passes' if not stopped else 'stops'} {flag_name} with {r.field}")
    s = ctx.read("The same floor holds with `{gaf:code}`.")
    target, value = assignment(s.gaf)
    cfg = with_delay(ctx)
    setattr(cfg.model, target, value)
    refuses(ctx, cfg, r.m.replace(r.ddp.rsplit(".", 1)[-1], target), "bridge")
    for installed, fails in ((r.version, False), (below(r.version), True)):
        cfg = with_delay(ctx)
        setattr(cfg.model, target, value)
        with te_at(installed):
            error, where = outcome(cfg)
        ctx.expect((error is not None and where == "bridge" and target in str(error)) is fails, f"with Transformer Engine {installed}, {target} with {r.field} is {'refused' if not fails else 'accepted'}")


@claim("moe-delay-wgrad-cuda-graph")
def delay_wgrad_cuda_graph(ctx: Context) -> None:
    r = ctx.read('With `{field:code}` and Transformer Engine CUDA graphs (`{impl:code}`) whose `{modules:code}` include `{attn:code}`, Bridge requires Transformer Engine {v1:version} or newer: "{m1:quote}".')
    ctx.expect(r.field == DELAY, f"SKILL.md names {r.field}")
    target, value = assignment(r.impl)

    def graphs(cfg, modules) -> None:
        setattr(cfg.model, target, value)
        setattr(cfg.model, r.modules, modules)

    cfg = with_delay(ctx)
    graphs(cfg, [literal(r.attn)])
    refuses(ctx, cfg, r.m1, "bridge")
    ctx.expect(f">= {r.v1}" in r.m1, f"the message does not state {r.v1}")
    for installed, fails in ((r.v1, False), (below(r.v1), True)):
        cfg = with_delay(ctx)
        graphs(cfg, [literal(r.attn)])
        with te_at(installed):
            error, where = outcome(cfg)
        stopped = where == "bridge" and squash(error) == squash(r.m1)
        ctx.expect(stopped is fails, f"with Transformer Engine {installed} Bridge {'stops' if stopped else 'passes'} the attention graphs with {r.field}")
    s = ctx.read('With whole-layer graphs megatron-core requires {v2:version}: "{m2:quote}".')
    cfg = with_delay(ctx)
    graphs(cfg, [])
    refuses(ctx, cfg, s.m2, "core")
    ctx.expect(f">= {s.v2} " in s.m2, f"the message does not state {s.v2}")
    from megatron.core.transformer import transformer_config as core_config
    from packaging.version import Version

    for installed, fails in ((s.v2, False), (below(s.v2), True)):
        cfg = with_delay(ctx)
        graphs(cfg, [])
        with mock.patch.object(core_config, "is_te_min_version", lambda wanted, *a, **k: Version(installed) >= Version(wanted)):
            error, where = outcome(cfg)
        stopped = where == "core" and DELAY in str(error) and "cuda graph" in str(error)
        ctx.expect(stopped is fails, f"with Transformer Engine {installed} megatron-core {'stops' if stopped else 'passes'} whole-layer graphs with {r.field}")


# --- the flex dispatcher ----------------------------------------------------------------


def gpu(major: int | None, name: str = "NVIDIA H100 80GB HBM3"):
    """torch.cuda as seen on a machine with one GPU of compute capability `major` (None: no GPU)."""
    import torch

    if major is None:

        def no_device(*a, **k):
            raise AssertionError("the device was queried although no GPU is visible")

        return mock.patch.multiple(torch.cuda, is_available=lambda: False, get_device_properties=no_device)
    return mock.patch.multiple(torch.cuda, is_available=lambda: True, get_device_properties=lambda *a, **k: SimpleNamespace(major=major, minor=0, name=name))


def _call_parts(text: str) -> tuple[str, list]:
    node = ast.parse(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call):
        raise ClaimFailed(f"SKILL.md writes {text!r} where a call belongs")
    return ast.unparse(node.func), [ast.unparse(a) for a in node.args]


@claim("moe-flex-backend")
def flex_backend(ctx: Context) -> None:
    r = ctx.read("`{call:code}` (from `{module:code}`; `{other:code}` likewise) sets `{dispatcher:code}` and `{backend_field:code}`, and turns `{shared:code}` off.")
    name, args = _call_parts(r.call)
    apply = resolve_symbol(f"{r.module}.{name}")
    ctx.expect(len(args) == 2 and args[0] == "cfg.model", f"{r.call} does not pass cfg.model and a backend")
    backends = [literal(args[1]), literal(r.other)]
    field, flex = assignment(r.dispatcher)

    logger = logging.getLogger(apply.__module__)

    def applied(backend: str, major: int | None, device: str = "NVIDIA H100 80GB HBM3"):
        cfg = enabled(ctx)
        setattr(cfg.model, r.shared, True)
        level = logger.level
        logger.setLevel(logging.WARNING)  # the report silences megatron's loggers; this one is the observation
        try:
            with gpu(major, device), collect_warnings() as warnings:
                apply(cfg.model, backend)
        finally:
            logger.setLevel(level)
        return cfg.model, warnings

    for backend in backends:
        model, _ = applied(backend, 9)
        ctx.expect((getattr(model, field), getattr(model, r.backend_field), getattr(model, r.shared)) == (flex, backend, False), f"{r.call} with {backend} on a Hopper GPU leaves ({field}, {r.backend_field}, {r.shared}) = ({getattr(model, field)!r}, {getattr(model, r.backend_field)!r}, {getattr(model, r.shared)!r})")
    s = ctx.read('Without a visible GPU it does so unchecked; with one it checks the GPU first: DeepEP runs on compute capability {d1:int} or {d2:int} and on GPUs whose names start with "{n1:quote}" or "{n2:quote}", HybridEP on compute capability {h1:int}, {h2:int} or {h3:int}.')
    for backend in backends:
        model, _ = applied(backend, None)
        ctx.expect(getattr(model, field) == flex and getattr(model, r.backend_field) == backend, f"without a GPU {backend} is not set")
    stated = {"deepep": {s.d1, s.d2}, "hybridep": {s.h1, s.h2, s.h3}}
    ctx.expect(set(backends) == set(stated), f"SKILL.md's backends are {backends}")
    for backend, majors in stated.items():
        runs = {major for major in range(6, 13) if getattr(applied(backend, major, "NVIDIA Some GPU")[0], field) == flex}
        ctx.expect(runs == majors, f"{backend} keeps the flex dispatcher on compute capability {sorted(runs)}, the skill says {sorted(majors)}")
    for device in (s.n1, s.n2):
        for name in (device, f"{device} SXM6 180GB"):  # the start of the name decides
            ctx.expect(getattr(applied("deepep", 10, name)[0], field) == flex, f"DeepEP falls back on {name}")
    t = ctx.read("On any other GPU it logs a warning and falls back to the alltoall dispatcher, so a {device:word} asked for DeepEP trains with alltoall.")
    model, warnings = applied("deepep", 10, f"NVIDIA {t.device}")
    ctx.expect(getattr(model, field) == "alltoall" and len(warnings) == 1 and "Falling back to alltoall" in warnings[0], f"DeepEP on a {t.device} gives {getattr(model, field)!r} with warnings {warnings}")
    ctx.expect(not any(t.device.startswith(n.removeprefix("NVIDIA ")) for n in (s.n1, s.n2)), f"{t.device} is one of the named GPUs")


@claim("moe-flex-validate")
def flex_validate(ctx: Context) -> None:
    r = ctx.read('A flex config set by hand is checked by `{validate:code}`: DeepEP on an unsupported GPU such as a {gpu:word} raises `{exc:exc}` "{m:quote}".')
    ctx.expect(r.validate == "cfg.validate()", f"SKILL.md names {r.validate}")
    device = f"NVIDIA {r.gpu}"

    def by_hand(backend: str = "deepep"):
        cfg = enabled(ctx)
        cfg.model.moe_token_dispatcher_type = "flex"
        cfg.model.moe_flex_dispatcher_backend = backend
        return cfg

    with gpu(10, device):
        cfg = by_hand()
        error, where = outcome(cfg)
    ctx.expect(isinstance(error, r.exc) and squash(error) == squash(r.m) and where == "bridge", f"flex with DeepEP on a {device} raised {type(error).__name__}: {squash(error)!r} in {where}")
    with gpu(9):
        passes(ctx, by_hand(), "flex with DeepEP on a Hopper GPU")
    s = ctx.read("That check reads the GPU, so on a machine without one any flex config fails validation with `{exc2:exc}`; check a layout without a GPU with the alltoall dispatcher.")
    from megatron.bridge.training import flex_dispatcher_backend

    check = source_of(flex_dispatcher_backend.validate_flex_dispatcher_backend)
    ctx.expect("torch.cuda.get_device_properties(0)" in check and "is_available" not in check, "the validation does not read the GPU unconditionally")
    import torch

    if not torch.cuda.is_available():  # the real query, as on the machine a user checks from
        for backend in ("deepep", "hybridep"):
            error, _ = outcome(by_hand(backend))
            ctx.expect(isinstance(error, s.exc2), f"flex with {backend} without a GPU raised {type(error).__name__}: {squash(error)}, not {s.exc2.__name__}")
    passes(ctx, enabled(ctx), "the alltoall layout without a GPU")
    ctx.expect(enabled(ctx).model.moe_token_dispatcher_type == "alltoall", "the enablement block does not use the alltoall dispatcher")


def raise_messages(obj, kind: str) -> list[str]:
    """The literal messages of every `raise kind(...)` and `assert ..., msg` in obj's source."""
    tree = ast.parse(inspect.getsource(obj).lstrip() if not inspect.isclass(obj) else inspect.getsource(obj))
    found = []

    def text(node) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = text(node.left), text(node.right)
            return left + right if left is not None and right is not None else None
        return None

    for node in ast.walk(tree):
        if kind == "AssertionError" and isinstance(node, ast.Assert) and node.msg is not None:
            found.append(text(node.msg))
        elif isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and getattr(node.exc.func, "id", None) == kind and node.exc.args:
            found.append(text(node.exc.args[0]))
    return [squash(m) for m in found if m]


@claim("moe-flex-packages")
def flex_packages(ctx: Context) -> None:
    import importlib.metadata
    import importlib.util

    from megatron.core.transformer.moe import token_dispatcher

    r = ctx.read('The backends come from packages Bridge does not install: building the model without them raises `{exc:exc}` "{m1:quote}" or "{m2:quote}".')
    requirements = " ".join(importlib.metadata.requires("megatron-bridge") or []).lower()
    ctx.expect("deep_ep" not in requirements and "deep-ep" not in requirements and "hybrid" not in requirements, "megatron-bridge's requirements include DeepEP")
    ctx.expect(importlib.util.find_spec("deep_ep") is None, "DeepEP is installed here, so the missing-package path is not what runs")
    for manager, message in ((token_dispatcher._DeepepManager, r.m1), (token_dispatcher._HybridEPManager, r.m2)):
        ctx.expect(squash(message) in raise_messages(manager, r.exc.__name__), f"{manager.__name__} raises no {r.exc.__name__} {message!r}")
    s = ctx.read('DeepEP also refuses a single rank across expert TP and EP: "{m3:quote}".')
    dispatcher = token_dispatcher.MoEFlexTokenDispatcher
    init = source_of(dispatcher.__init__)
    ctx.expect(squash(s.m3) in raise_messages(dispatcher.__init__, "AssertionError") and "self.tp_size * self.ep_size > 1" in init, f"the flex dispatcher does not assert {s.m3!r} on TP x EP > 1")
    ctx.expect("pg_collection.expt_tp" in source_of(token_dispatcher.MoETokenDispatcher.__init__), "the dispatcher's TP size is not the expert TP group's")


@claim("moe-forward-step")
def forward_step(ctx: Context) -> None:
    from megatron.core.pipeline_parallel import combined_1f1b

    r = ctx.read("With the overlap on, megatron-core calls the forward step with `{kw:code}` and expects a schedule plan back.")
    keyword, value = assignment(r.kw)
    step = "".join(source_of(combined_1f1b.combined_forward_backward_step).split())
    ctx.expect(f"{keyword}={value}" in step and "isinstance(f_schedule_plan,AbstractSchedulePlan)" in step, f"the combined 1F1B step does not call the forward step with {r.kw} and check the plan")
    s = ctx.read("Bridge's `{step:code}` accepts that argument; a custom step must accept it too and return `{plan:code}`.")
    function = resolve_symbol(s.step)
    parameter = inspect.signature(function).parameters.get(keyword)
    ctx.expect(parameter is not None and parameter.default is (not value), f"{s.step} has no {keyword} parameter defaulting to {not value}")
    method = s.plan.split("(")[0].removeprefix("model.")
    common = function_source(function.__module__, "_forward_step_common")
    ctx.expect(f"model.{method}(" in common and "return schedule_plan" in common, f"{s.step} does not return model.{method}(...)")
    from megatron.core.models.gpt.gpt_model import GPTModel

    ctx.expect(callable(getattr(GPTModel, method, None)), f"GPTModel has no {method}")


# --- the report script ------------------------------------------------------------------


@claim("moe-report-script")
def report_script(ctx: Context) -> None:
    import contextlib
    import io
    import shlex

    r = ctx.read("`{command:code}` builds that layout on a small GPT without a GPU, runs `{fn:code}` and prints what Bridge resolved for `{f1:code}` and `{f2:code}`, or the assertion that stops it.")
    words = shlex.split(r.command)
    ctx.expect(words[:2] == ["python", "scripts/moe_overlap_report.py"], f"SKILL.md runs {words[:2]}")
    script = ctx.load_script(words[1])
    ctx.expect({r.f1, r.f2} == {FLAG, DELAY}, f"SKILL.md names {r.f1} and {r.f2}")
    ctx.expect(r.fn == "runtime_config_update()" and "from megatron.bridge.training.config import runtime_config_update" in source_of(script), f"the script does not run Bridge's {r.fn}")
    block = ctx.sibling(ENABLE).read("A MoE GPT with {experts:int} experts, top-{topk:int} routing and EP={ep:int}, in {dtype:bf16|fp16}, on {world:int} GPUs gets the EP all-to-all overlap from this block:")
    argv = words[2:]
    options = dict(zip(argv[::2], argv[1::2]))
    stated = {"--experts": block.experts, "--topk": block.topk, "--ep": block.ep, "--world-size": block.world}
    ctx.expect({k: int(v) for k, v in options.items()} == stated, f"the command's layout {options} is not the block's {stated}")
    s = ctx.read("It exits {on:int} when the overlap is on, {off:int} when it is off or refused.")

    def run(arguments: list[str]) -> tuple[int, str]:
        out = io.StringIO()
        with quiet(), contextlib.redirect_stdout(out):
            status = script.main(arguments)
        return status, out.getvalue()

    status, printed = run(argv)
    ctx.expect(status == s.on and f"{r.f1} = True" in printed and f"{r.f2} = False" in printed, f"the script exits {status} and prints {printed!r} for the block's layout")
    status, printed = run([*argv[:-2], "--world-size", str(block.world), "--ep", "1"])
    ctx.expect(status == s.off and "only supported when expert_model_parallel_size > 1" in printed, f"with EP=1 the script exits {status} and prints {printed!r}")
    status, printed = run([*argv, "--no-overlap"])
    ctx.expect(status == s.off and f"{r.f1} = False" in printed, f"with the overlap off the script exits {status} and prints {printed!r}")
    ctx.expect(s.on != s.off, "SKILL.md gives both outcomes one exit status")
