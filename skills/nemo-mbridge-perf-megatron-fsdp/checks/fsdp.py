"""Checks for this skill (claim ids match its SKILL.md markers).

Each check reads its values from the skill's own sentences (`ctx.read` templates) and
compares them with what the pinned release does: it applies the settings the sentence
names, expects the exception type and the exact message it quotes, and reads names,
defaults and orders from the library's classes and source. The helpers below turn what
a backticked span says (`cfg.x.y=True`, `ValueError: message`) into values to use.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import inspect
import io
import os
import re
import shlex
import sys
import tempfile
import textwrap
import types
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any
from unittest import mock

from runner.claims.kit import TE_ONLY_MODULES, preserved_environ, resolve, tiny_config
from runner.claims.kit import get_field as lookup
from runner.claims.kit import set_field as assign
from runner.claims.kit import (
    ClaimFailed,
    Context,
    assignment,
    claim,
    comparison,
    raised,
    resolve_symbol,
    source_of,
)

ENABLE = "fsdp-enable-override"
CONFIG_MODULE = "megatron.bridge.training.config"
CHECKPOINTS = "/tmp/mbskills-claim-check"


# --- reading what a backticked span says ----------------------------------------------


def _squash(text: Any) -> str:
    return " ".join(str(text).split())


def block_assignments(code: str) -> dict[str, Any]:
    """The literal assignments of a python code block, target -> value, in order."""
    out = {}
    for node in ast.parse(code).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            with contextlib.suppress(ValueError):
                out[ast.unparse(node.targets[0])] = ast.literal_eval(node.value)
    return out


def relative(path: str) -> list[str]:
    """`cfg.checkpoint.save` or `checkpoint.save` -> ['checkpoint', 'save']."""
    parts = path.strip().split(".")
    return parts[1:] if parts[0] == "cfg" else parts


def symbol(text: str, module: str = CONFIG_MODULE) -> Any:
    """A name the skill writes as `validate()`, `ConfigContainer.validate()` or a dotted
    path: resolved in `module` unless it is a full path itself."""
    name = text.strip().removesuffix("()")
    if name.startswith("megatron."):
        return resolve_symbol(name)
    if "." not in name and module == CONFIG_MODULE and not hasattr(resolve_symbol(module), name):
        name = f"ConfigContainer.{name}"  # a method, as in `validate()`
    return resolve_symbol(f"{module}.{name}")


def raises_exactly(ctx: Context, action: Callable[[], Any], kind: type[BaseException], message: str, *, leading: bool = False) -> BaseException:
    """The exception `kind` with exactly `message` (a leading `... ` quotes its end only;
    with `leading`, the message may go on after the quoted sentence)."""
    error = ctx.expect_raises(action, kind, message)
    got, want = _squash(error), _squash(message)
    if want.startswith("... "):
        same = got.endswith(want[4:])
    elif leading:
        same = got == want or (want[-1:] in ".!" and got.startswith(want + " "))
    else:
        same = got == want
    ctx.expect(same, f"{kind.__name__} says {str(error)!r}, not {message!r}")
    return error


def printed(action: Callable[[], Any]) -> list[str]:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        action()
    return [_squash(line) for line in buffer.getvalue().splitlines()]


def passes(ctx: Context, action: Callable[[], Any], what: str) -> None:
    try:
        action()
    except (AssertionError, ValueError) as error:
        raise ClaimFailed(f"{what} fails validation: {type(error).__name__}: {error}") from None


def function_ast(obj: Any) -> ast.FunctionDef:
    return ast.parse(textwrap.dedent(inspect.getsource(obj))).body[0]


@functools.cache
def _distribution_files(name: str) -> frozenset[Path]:
    return frozenset(Path(str(f.locate())).resolve() for f in metadata.files(name) or [])


def shipped_by(obj: Any, distribution: str) -> bool:
    return Path(inspect.getsourcefile(obj)).resolve() in _distribution_files(distribution)


def distinct(ctx: Context, names: list[str], what: str) -> None:
    normal = [".".join(relative(n)) for n in names]
    ctx.expect(len(set(normal)) == len(normal), f"SKILL.md names {what} twice: {names}")


# --- configs ---------------------------------------------------------------------------


def fsdp_config(ctx: Context, **layout):
    """A tiny config with the skill's own enablement block applied."""
    return ctx.sibling(ENABLE).apply(tiny_config(**layout))


def recipe_config(factory: Callable[[], Any]):
    """A recipe's ConfigContainer (its checkpoint, DDP, optimizer and precision settings)
    around the tiny GPT, so it builds and validates offline."""
    cfg = factory()
    tiny = tiny_config()
    cfg.model, cfg.tokenizer = tiny.model, tiny.tokenizer
    cfg.dataset.seq_length = tiny.model.seq_length
    return cfg


def bools(cfg: Any, sections: set[str]) -> dict[str, bool]:
    out = {}
    for section in sections:
        obj = getattr(cfg, section)
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if isinstance(value, bool):
                out[f"{section}.{f.name}"] = value
    return out


# --- the claims --------------------------------------------------------------------------


@claim(ENABLE)
def enable_override(ctx: Context) -> None:
    from megatron.core.distributed import DistributedDataParallelConfig

    intro = ctx.read(
        "Megatron FSDP is megatron-core's own fully sharded data parallel wrapper, and Bridge switches it on"
        " through the DDP config it exposes as `{ddp:code}`. The override, on any `{container:code}` (a recipe's or your own):"
    )
    wrapper = resolve_symbol("megatron.training.models.dist_utils._ddp_wrap").__globals__["FullyShardedDataParallel"]
    ctx.expect(shipped_by(wrapper, "megatron-core"), "the Megatron FSDP wrapper is not megatron-core's")
    container = symbol(intro.container)
    ctx.expect(isinstance(tiny_config(), container), f"a Bridge config is no {intro.container}")
    ctx.expect(isinstance(lookup(tiny_config(), intro.ddp), DistributedDataParallelConfig), f"{intro.ddp} is not the DDP config")
    block = block_assignments(ctx.code(0))
    ctx.expect(block.get(f"{intro.ddp}.use_megatron_fsdp") is True, f"the override does not switch Megatron FSDP on through {intro.ddp}")
    for target in block:
        lookup(tiny_config(), target)  # a misspelt field would only add an attribute

    from megatron.bridge.recipes.common import _pretrain_common

    for whose, cfg in (("your own", tiny_config()), ("a recipe's", recipe_config(_pretrain_common))):
        ctx.apply(cfg)
        cfg.checkpoint.save = cfg.checkpoint.save or CHECKPOINTS  # the override must hold with saving on
        passes(ctx, lambda cfg=cfg: resolve(cfg), f"the override on {whose} config")
        for target, value in block.items():
            ctx.expect(lookup(cfg, target) == value, f"on {whose} config, validation turns the override's {target} = {value!r} into {lookup(cfg, target)!r}")

    from megatron.core.distributed.fsdp.src.megatron_fsdp.fully_shard import (
        ShardingStrategy,
    )

    r = ctx.read(
        "`{field:code}` defaults to `{default:code}`, which shards nothing; `{s1:code}` shards the optimizer state,"
        " `{s2:code}` the gradients too, and `{s3:code}`, the setting above, the parameters as well (like ZeRO-{zero:int})."
    )
    fields = {f.name: f for f in dataclasses.fields(DistributedDataParallelConfig)}
    ctx.expect(r.field in fields, f"DistributedDataParallelConfig has no field {r.field}")
    ctx.expect(fields[r.field].default == r.default, f"{r.field} defaults to {fields[r.field].default!r}, not {r.default!r}")
    names = [r.default, r.s1, r.s2, r.s3]
    members = ShardingStrategy.__members__
    for name in names:
        ctx.expect(name.upper() in members, f"{name} is not one of Megatron FSDP's sharding strategies {[m.lower() for m in members]}")
    levels = [members[name.upper()].value for name in names]
    ctx.expect(levels == list(range(len(members))), f"SKILL.md lists the strategies {names} out of the order in which they shard more (levels {levels})")
    doc = {}
    for part in _squash(ShardingStrategy.__doc__).split(" - `")[1:]:
        head = re.match(r"(\d+)` or `(\w+)`", part)
        if head:
            doc[head.group(2)] = part
    shards = {r.default: "not sharded", r.s1: "optimizer state is sharded", r.s2: "gradients are sharded", r.s3: "parameters are sharded"}
    for name, words in shards.items():
        ctx.expect(words in doc.get(name, ""), f"megatron-core does not say of {name} that its {words}")
    ctx.expect(f"`ZeRO-{r.zero}`" in doc[r.s3] and r.zero == members[r.s3.upper()].value, f"megatron-core does not liken {r.s3} to ZeRO-{r.zero}")
    ctx.expect(block.get(f"{intro.ddp}.{r.field}") == r.s3, f"the override does not set {r.field} to {r.s3}")


@claim("fsdp-validate-side-effects")
def validate_side_effects(ctx: Context) -> None:
    r = ctx.read(
        "`{validate:code}` finishes the job: for a config with either FSDP flag set, it sets **both** `{flag_a:code}`"
        " and `{flag_b:code}` to {on:bool} and turns the distributed optimizer {state:on|off} (`{opt_a:code}` and `{opt_b:code}`)."
    )
    s = ctx.read(
        "Validation runs last, after `{setup:code}`, which derives the data-parallel overlap (`{o1:code}`, `{o2:code}`,"
        " `{o3:code}`) only when `{dist_opt:code}` is already {already:bool}. So on a config of your own with a `{cls:code}`"
        " attached, set `{fix:code}` yourself, or the resolved config carries none of them."
    )
    w = ctx.read("The Megatron FSDP wrapper later turns `{w1:code}` on for `{s1:code}` and `{w2:code}` on for `{s2:code}` and `{s3:code}` by itself.")
    method = symbol(r.validate)
    ctx.expect(method is resolve_symbol(f"{CONFIG_MODULE}.ConfigContainer.validate"), f"{r.validate} is not what runtime_config_update validates with")
    flags, optimizer = [r.flag_a, r.flag_b], [r.opt_a, r.opt_b]
    named = flags + optimizer
    distinct(ctx, named, "a field")
    sections = {relative(n)[0] for n in named} | {"dist", "ddp", "optimizer"}
    expected = {**{".".join(relative(f)): r.on for f in flags}, **{".".join(relative(o)): r.state == "on" for o in optimizer}}
    for flag in flags:
        cfg = tiny_config()
        assign(cfg, flag, True)
        before = bools(cfg, sections)
        resolve(cfg)
        after = bools(cfg, sections)
        got = {name: after.get(name) for name in expected}
        ctx.expect(got == expected, f"with only {flag} set, validate() leaves {got}, not {expected}")
        changed = {name for name in after if after[name] != before.get(name)} | {".".join(relative(flag))}
        ctx.expect(changed == set(expected), f"with only {flag} set, validate() changes {sorted(changed)}, not the fields SKILL.md names")
    cfg = fsdp_config(ctx)
    resolve(cfg)
    ctx.expect(all(lookup(cfg, name) == value for name, value in expected.items()), "validate() does not set those fields for the skill's override")
    _overlap_needs_distributed_optimizer(ctx, s, w, flags[-1])


def _overlap_needs_distributed_optimizer(ctx: Context, s: Any, w: Any, flag: str) -> None:
    """CommOverlapConfig.setup() runs before validate() turns the distributed optimizer on."""
    from megatron.bridge.training.comm_overlap import CommOverlapConfig

    ctx.expect(s.setup == "CommOverlapConfig.setup()" and s.cls == "CommOverlapConfig", f"SKILL.md names {s.setup} / {s.cls}")
    update = source_of(resolve_symbol(f"{CONFIG_MODULE}.runtime_config_update"))
    ctx.expect(0 <= update.find("cfg.comm_overlap.setup(") < update.find("cfg.validate()"), "runtime_config_update does not run setup() before validate()")
    fix_target, fix_value = assignment(s.fix)
    ctx.expect(relative(fix_target) == relative(s.dist_opt) and fix_value is s.already is True, f"{s.fix} does not set {s.dist_opt} to {s.already}")
    fields = [s.o1, s.o2, s.o3]
    derived = {"overlap_grad_reduce": True, "overlap_param_gather": True, "bucket_size": 128 * 1024 * 1024}
    ctx.expect(sorted(fields) == sorted(derived), f"SKILL.md names {fields}, setup() derives {sorted(derived)}")
    for by_hand in (False, True):
        cfg = tiny_config()
        assign(cfg, flag, True)
        if by_hand:
            assign(cfg, fix_target, fix_value)
        cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=False)
        resolve(cfg, world_size=4)
        got = {name: getattr(cfg.ddp, name) for name in fields}
        want = derived if by_hand else {name: None if name == "bucket_size" else False for name in fields}
        ctx.expect(got == want and cfg.ddp.use_distributed_optimizer is True, f"with {fix_target} {'set' if by_hand else 'unset'} the resolved DDP config has {got}, not {want}")
    # the wrapper, afterwards: MegatronFSDP's own defaults per strategy
    core = source_of(resolve_symbol("megatron.core.distributed.fsdp.src.megatron_fsdp.megatron_fsdp.MegatronFSDP.__init__"))
    squashed = " ".join(core.split())
    ctx.expect(f'if self.data_parallel_sharding_strategy == "{w.s1}": # Default to overlapped parameter gather when fully-sharding. self.ddp_config.{w.w1} = True' in squashed, f"MegatronFSDP does not turn {w.w1} on for {w.s1}")
    ctx.expect(f'if self.ddp_config.data_parallel_sharding_strategy in ["{w.s2}", "{w.s3}"]: # Default to overlapped gradient reduce-scatter when sharding gradients. self.ddp_config.{w.w2} = True' in squashed or f'if self.ddp_config.data_parallel_sharding_strategy in ["{w.s3}", "{w.s2}"]: # Default to overlapped gradient reduce-scatter when sharding gradients. self.ddp_config.{w.w2} = True' in squashed, f"MegatronFSDP does not turn {w.w2} on for {w.s2} and {w.s3}")
    ctx.expect({w.w1, w.w2} == {"overlap_param_gather", "overlap_grad_reduce"} and w.w1 != w.w2, f"the wrapper sentence names {w.w1} and {w.w2}")


@claim("fsdp-dist-flag-exists")
def dist_flag_exists(ctx: Context) -> None:
    r = ctx.read("`{field:code}` exists as well: `{bridge:code}` inherits it from megatron-core's `{core:code}`.")
    section, name = relative(r.field)
    bridge, core = resolve_symbol(r.bridge), resolve_symbol(r.core)
    ctx.expect(type(getattr(tiny_config(), section)) is bridge, f"cfg.{section} is not a {r.bridge}")
    ctx.expect(bridge is not core and issubclass(bridge, core), f"{r.bridge} does not inherit {r.core}")
    ctx.expect(shipped_by(core, "megatron-core"), f"{r.core} is not megatron-core's")
    ctx.expect(name in {f.name for f in dataclasses.fields(bridge)}, f"{r.bridge} has no field {name}")
    defined_in = next((k for k in bridge.__mro__ if name in vars(k).get("__annotations__", {})), None)
    ctx.expect(defined_in is not bridge and defined_in is not None and issubclass(core, defined_in), f"{name} is defined by {defined_in}, not inherited from {r.core}")

    b = ctx.read(
        "The model builder, `{builder:code}`, reads this flag, not the DDP one, to choose the wrapper, and `{validate:code}`"
        " copies the DDP flag into it, so setting either one turns Megatron FSDP on."
    )
    builder = source_of(resolve_symbol(b.builder))
    ctx.expect(f"{name}={r.field}" in builder and f"{name}=cfg.ddp.{name}" not in builder, f"{b.builder} does not pass {r.field} as {name}")
    provider = source_of(resolve_symbol("megatron.bridge.models.model_provider.get_model"))
    ctx.expect("_ddp_wrap(" in provider and f"{name}={name}" in provider, "the model builder's flag no longer reaches _ddp_wrap, which picks the wrapper")
    ctx.expect(symbol(b.validate) is resolve_symbol(f"{CONFIG_MODULE}.ConfigContainer.validate"), f"{b.validate} is not ConfigContainer.validate")
    for flag in (f"cfg.ddp.{name}", r.field):
        cfg = tiny_config()
        assign(cfg, flag, True)
        resolve(cfg)
        ctx.expect(lookup(cfg, r.field) is True and cfg.ddp.use_megatron_fsdp is True, f"setting only {flag} does not turn Megatron FSDP on")

    s = ctx.read("This skill sets `{mine:code}`, next to the other FSDP settings, and leaves the copy to validation.")
    block = block_assignments(ctx.sibling(ENABLE).code(0))
    ctx.expect(block.get(s.mine) is True and r.field not in block, f"the override does not set {s.mine} (alone)")
    owner = s.mine.rsplit(".", 1)[0]
    ctx.expect(sum(t.startswith(owner + ".") for t in block) >= 3, f"{s.mine} is not next to the override's other FSDP settings")


@claim("fsdp-average-in-collective")
def average_in_collective(ctx: Context) -> None:
    from megatron.core.distributed import DistributedDataParallelConfig

    r = ctx.read(
        "`{setting:code}` is what validation enforces anyway: with the default `{switch:code}`, a {given:bool} value is"
        ' switched off and validation prints "{message:quote}". Setting it {mine:bool} yourself keeps that line out of the log and the intent clear.'
    )
    field, enforced = assignment(r.setting)
    switch, default = assignment(r.switch)
    defaults = {f.name: f.default for f in dataclasses.fields(DistributedDataParallelConfig)}
    ctx.expect(defaults.get(relative(switch)[-1], object()) == default, f"{switch} does not default to {default}")
    ctx.expect(r.given != enforced, f"SKILL.md says a {r.given} value is switched off to {enforced}")

    def run(value: Any, switched: Any) -> tuple[Any, list[str]]:
        cfg = fsdp_config(ctx)
        assign(cfg, f"cfg.ddp.{field}", value)
        assign(cfg, switch, switched)
        lines = printed(lambda: resolve(cfg))
        return lookup(cfg, f"cfg.ddp.{field}"), lines

    value, lines = run(r.given, default)
    ctx.expect(value == enforced, f"validation keeps {field}={value}")
    ctx.expect(_squash(r.message) in lines, f"validation does not print {r.message!r}; it prints {lines}")
    value, lines = run(r.given, not default)
    ctx.expect(value == r.given, f"with {switch} not at its default, validation still changes {field}")
    value, lines = run(r.mine, default)
    ctx.expect(value == r.mine and _squash(r.message) not in lines, f"with {field}={r.mine} validation still prints {r.message!r}")


@claim("fsdp-ckpt-format")
def ckpt_format(ctx: Context) -> None:
    from megatron.bridge.training.config import CheckpointConfig

    r = ctx.read(
        "**Checkpoint format.** Whenever `{save:code}` or `{load:code}` is set, validation requires `{required:code}`"
        " and otherwise fails with `{error:code}`; with neither set, the format is not checked."
    )
    d = ctx.read(
        "The default format is `{default:code}`, and `{common:code}`, the shared base of Bridge's pretrain recipes, keeps it"
        " while presetting both `{r_save:code}` and `{r_load:code}` (to `{where:code}` in the working directory), so on a"
        " recipe config that keeps those presets this assertion is the first thing Megatron FSDP trips over."
    )
    fix = ctx.read("Fix: `{fix:code}`.")
    fmt_field, required = assignment(r.required)
    kind, message = raised(r.error)
    distinct(ctx, [r.save, r.load], "a checkpoint setting")
    defaults = {f.name: f.default for f in dataclasses.fields(CheckpointConfig)}
    ctx.expect(defaults.get(fmt_field) == d.default, f"CheckpointConfig.{fmt_field} defaults to {defaults.get(fmt_field)!r}, not {d.default!r}")
    for where in (r.save, r.load):
        cfg = fsdp_config(ctx)
        assign(cfg, f"checkpoint.{fmt_field}", d.default)
        assign(cfg, where, CHECKPOINTS)
        raises_exactly(ctx, lambda cfg=cfg: resolve(cfg), kind, message)
        cfg = fsdp_config(ctx)
        assign(cfg, f"checkpoint.{fmt_field}", required)
        assign(cfg, where, CHECKPOINTS)
        passes(ctx, lambda cfg=cfg: resolve(cfg), f"{where} with {r.required}")
    unsaved = fsdp_config(ctx)
    assign(unsaved, f"checkpoint.{fmt_field}", d.default)
    passes(ctx, lambda: resolve(unsaved), f"{fmt_field}={d.default!r} with neither {r.save} nor {r.load}")

    distinct(ctx, [d.r_save, d.r_load], "a checkpoint setting")
    ctx.expect({".".join(relative(n)) for n in (d.r_save, d.r_load)} == {".".join(relative(n)) for n in (r.save, r.load)}, "the recipe sentence names other settings than the rule")
    common = symbol(d.common)
    from megatron.bridge import recipes

    call = f"{d.common.rsplit('.', 1)[-1].removesuffix('()')}()"
    families = {p.relative_to(Path(recipes.__file__).parent).parts[0] for p in Path(recipes.__file__).parent.rglob("*.py") if p.name != "common.py" and "pretrain" in p.read_text("utf-8") and call in p.read_text("utf-8")}
    ctx.expect(len(families) >= 3, f"only the recipes of {sorted(families)} start from {d.common}")
    preset = common()
    expected = os.path.join(os.getcwd(), d.where)
    for where in (d.r_save, d.r_load):
        ctx.expect(lookup(preset, where) == expected, f"{d.common} sets {where} to {lookup(preset, where)!r}, not {expected!r}")
    ctx.expect(lookup(preset, f"checkpoint.{fmt_field}") == d.default, f"{d.common} does not keep {fmt_field}={d.default!r}")
    recipe = recipe_config(common)
    recipe.ddp.use_megatron_fsdp = True  # Megatron FSDP on, nothing else changed
    raises_exactly(ctx, lambda: resolve(recipe), kind, message)
    recipe = recipe_config(common)
    recipe.ddp.use_megatron_fsdp = True
    target, value = assignment(fix.fix)
    assign(recipe, target, value)
    passes(ctx, lambda: resolve(recipe), f"a recipe config with {fix.fix}")


LLAMA3_8B_CONFIG = {  # the fields of meta-llama/Meta-Llama-3-8B's config.json that Bridge reads
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
}


@claim("fsdp-recipe-needs-hub")
def recipe_needs_hub(ctx: Context) -> None:
    import json

    import huggingface_hub.constants as hub
    from megatron.bridge.models.hf_pretrained import safe_config_loader

    r = ctx.read(
        "`{recipe:code}` is one of those recipes, and it reads the Hugging Face config of `{repo:code}` while it builds,"
        " so it needs network access or a cached copy of that config."
    )
    o = ctx.read("Offline (`{offline:code}`) with nothing cached it raises `{error:code}` before any FSDP setting is looked at.")
    recipe = symbol(r.recipe)
    body = source_of(recipe)
    ctx.expect("_pretrain_common()" in body, f"{r.recipe} is not built on _pretrain_common()")
    ctx.expect(f'from_hf_pretrained("{r.repo}")' in body, f"{r.recipe} does not read {r.repo} from the Hub")
    variable, value = assignment(o.offline)
    ctx.expect(hasattr(hub, variable) and f'os.environ.get("{variable}")' in inspect.getsource(hub), f"huggingface_hub reads no {variable}")
    ctx.expect(hub._is_true(str(value)), f"{o.offline} does not switch huggingface_hub offline")
    kind, message = raised(o.error)
    with tempfile.TemporaryDirectory() as cache, contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(hub, variable, hub._is_true(str(value))))  # what the variable sets at import
        stack.enter_context(mock.patch.object(hub, "HF_HUB_CACHE", cache))
        stack.enter_context(mock.patch.dict(os.environ, {"MEGATRON_CONFIG_LOCK_DIR": cache}))
        stack.enter_context(mock.patch.object(safe_config_loader.time, "sleep"))  # its retries, without the back-off
        raises_exactly(ctx, recipe, kind, message, leading=True)
        repo = Path(cache) / f"models--{r.repo.replace('/', '--')}"
        snapshot = repo / "snapshots" / ("0" * 40)
        snapshot.mkdir(parents=True)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text("0" * 40)
        (snapshot / "config.json").write_text(json.dumps(LLAMA3_8B_CONFIG))
        try:
            built = recipe()  # the cached copy: builds with no network
        except Exception as error:  # noqa: BLE001 - any failure to build is the claim failing
            raise ClaimFailed(f"{r.recipe} does not build from a cached config: {type(error).__name__}: {error}") from None
    ctx.expect(built.checkpoint.save is not None and built.checkpoint.save == built.checkpoint.load, f"{r.recipe} does not preset checkpoint.save and checkpoint.load")
    ctx.expect(built.checkpoint.ckpt_format == "torch_dist", f"{r.recipe} presets ckpt_format {built.checkpoint.ckpt_format!r}")


@claim("fsdp-torch-fsdp2-late-failure")
def torch_fsdp2_late_failure(ctx: Context) -> None:
    from megatron.core.distributed import DistributedDataParallelConfig

    r = ctx.read(
        "**Megatron FSDP with PyTorch FSDP2.** The two are mutually exclusive, but `{validate:code}`"
        " {verdict:does **not** reject|rejects} `{a:code}` together with `{b:code}`: the mutual-exclusion check reads only"
        " `{checked:code}`, and runs {when:before|after} validation sets it."
    )
    late = ctx.read("The pair then fails later, when the model is wrapped: `{wrap:code}` raises `{error:code}`")
    mis = ctx.read("With `{save:code}` or `{load:code}` set and `{fmt:code}`, validation does fail, but with the misleading `{error:code}`.")
    fix = ctx.read("Fix: remove `{remove:code}`.")
    early = ctx.read("To make validation itself catch the pair, also set `{setting:code}`; then `{validate:code}` raises `{error:code}`")
    validate = resolve_symbol(f"{CONFIG_MODULE}.ConfigContainer.validate")
    ctx.expect(symbol(r.validate) is validate and symbol(early.validate) is validate, "SKILL.md names another validate()")
    pair = [assignment(r.a), assignment(r.b)]
    distinct(ctx, [t for t, _ in pair], "a flag")

    def paired(*extra: tuple[str, Any]):
        cfg = fsdp_config(ctx)
        for target, value in [*pair, *extra]:
            assign(cfg, target, value)
        return cfg

    cfg = paired()
    if r.verdict == "rejects":
        ctx.expect_raises(lambda cfg=cfg: resolve(cfg), ValueError, "")
    else:
        passes(ctx, lambda cfg=cfg: resolve(cfg), f"{r.a} with {r.b}")

    exclusive_kind, exclusive = raised(early.error)
    tree = function_ast(validate)
    guard = next(
        (n for n in ast.walk(tree) if isinstance(n, ast.If) and any(isinstance(s, ast.Raise) and _squash(exclusive) in _squash(ast.unparse(s)) for s in n.body)),
        None,
    )
    ctx.expect(guard is not None, f"validate() has no check raising {exclusive!r}")
    read = set(re.findall(r"self\.(\w+)\.use_megatron_fsdp", ast.unparse(guard.test)))
    ctx.expect(read == {relative(r.checked)[0]} and relative(r.checked)[1] == "use_megatron_fsdp", f"the mutual-exclusion check reads {ast.unparse(guard.test)!r}, not only {r.checked}")
    setter = f"self.{'.'.join(relative(r.checked))} = True"
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"]
    methods = {n.lineno: getattr(type(tiny_config()), n.func.attr, None) for n in calls}
    sets = [line for line, method in methods.items() if inspect.isfunction(method) and setter in source_of(method)]
    ctx.expect(bool(sets), f"validate() calls nothing that sets {r.checked}")
    ctx.expect((guard.lineno < min(sets)) == (r.when == "before"), f"the mutual-exclusion check does not run {r.when} validation sets {r.checked}")

    wrap = symbol(late.wrap, "megatron.training.models.dist_utils")
    ctx.expect(wrap is resolve_symbol("megatron.bridge.models.common.unimodal._ddp_wrap"), f"{late.wrap} is not the wrap Bridge uses")
    kind, message = raised(late.error)
    flags = {relative(t)[-1]: v for t, v in pair}
    raises_exactly(ctx, lambda: wrap([], False, DistributedDataParallelConfig(), False, **flags, pg_collection=None), kind, message)

    fmt_field, fmt = assignment(mis.fmt)
    kind, message = raised(mis.error)
    distinct(ctx, [mis.save, mis.load], "a checkpoint setting")
    for where in (mis.save, mis.load):
        cfg = paired((where, CHECKPOINTS), (f"checkpoint.{fmt_field}", fmt))
        raises_exactly(ctx, lambda cfg=cfg: resolve(cfg), kind, message)

    cfg = paired((f"dist.{fix.remove}", False))
    passes(ctx, lambda cfg=cfg: resolve(cfg), f"the pair with {fix.remove} removed")
    ctx.expect(not cfg.dist.use_torch_fsdp2 and cfg.dist.use_megatron_fsdp, f"removing {fix.remove} does not leave Megatron FSDP alone")

    cfg = paired(assignment(early.setting))
    raises_exactly(ctx, lambda cfg=cfg: resolve(cfg), exclusive_kind, exclusive)


@claim("fsdp-tp-pp-dp-mapping")
def tp_pp_dp_mapping(ctx: Context) -> None:
    from megatron.bridge.training.config import DistributedInitConfig

    r = ctx.read("**Rank ordering.** `{setting:code}` fails validation with `{error:code}`. Fix: leave it at its default, {default:bool}.")
    target, value = assignment(r.setting)
    kind, message = raised(r.error)
    cfg = fsdp_config(ctx)
    assign(cfg, target, value)
    raises_exactly(ctx, lambda cfg=cfg: resolve(cfg), kind, message)
    defaults = {f.name: f.default for f in dataclasses.fields(DistributedInitConfig)}
    name = relative(target)[-1]
    ctx.expect(defaults.get(name, object()) == r.default, f"{name} does not default to {r.default}")
    cfg = fsdp_config(ctx)
    assign(cfg, target, r.default)
    passes(ctx, lambda cfg=cfg: resolve(cfg), f"{name}={r.default}")


NEWER_THAN_HOPPER = re.compile(r"^(?!h100$)[a-z]+\d+$")  # recipe folders per GPU: b200, gb200, gb300, r100, ...


@claim("fsdp-cuda-device-max-connections")
def cuda_device_max_connections(ctx: Context) -> None:
    r = ctx.read(
        "**{heading}.** With `{env:code}` in the environment, validation fails with `{error:code}` Recipes that set it"
        " through `{env_vars:code}` count too: `{updater:code}` applies `{env_vars_again:code}` to the process (a value"
        " already in the {winner:shell|config} wins) before it calls `{validate:code}`."
    )
    name, value = assignment(r.env)
    ctx.expect(r.heading == name, f"the pitfall is headed {r.heading}, but is about {name}")
    kind, message = raised(r.error)
    raises_exactly(ctx, lambda: resolve(fsdp_config(ctx), environ={name: str(value)}), kind, message)
    ctx.expect(r.env_vars == r.env_vars_again, f"SKILL.md names {r.env_vars} and {r.env_vars_again}")
    recipe = fsdp_config(ctx)
    assign(recipe, r.env_vars, {name: value})
    raises_exactly(ctx, lambda: resolve(recipe), kind, message)
    update = symbol(r.updater)
    ctx.expect(update is resolve_symbol(f"{CONFIG_MODULE}.runtime_config_update"), f"{r.updater} is not Bridge's runtime_config_update")
    steps = source_of(update)
    apply_env = source_of(resolve_symbol(f"{CONFIG_MODULE}.apply_environment_variables"))
    ctx.expect(f"{r.env_vars}.items()" in apply_env and "os.environ.setdefault(" in apply_env, f"apply_environment_variables does not apply {r.env_vars} to the process")
    validate_call = f"cfg.{r.validate.removesuffix('()')}()"
    ctx.expect(0 <= steps.find("apply_environment_variables(cfg)") < steps.find(validate_call), f"{r.updater} does not apply {r.env_vars} before {validate_call}")
    shell = fsdp_config(ctx)
    assign(shell, r.env_vars, {name: value})
    if r.winner == "shell":
        passes(ctx, lambda: resolve(shell, environ={name: "8"}), f"{name}=8 in the shell with {name}={value} in {r.env_vars}")
    else:
        raises_exactly(ctx, lambda: resolve(shell, environ={name: "8"}), kind, message)

    p = ctx.read(
        "Tensor- and context-parallel communication overlap on Hopper and earlier GPUs wants it at {prefer:int}"
        " (megatron-core's own argument checks assert that for TP or CP when FSDP is off), but Bridge's FSDP assertion"
        " does not look at the parallel layout: with TP or CP on, FSDP's requirement decides."
    )
    core = source_of(resolve_symbol("megatron.training.arguments.validate_args"))
    hopper = 9  # compute capability 9.x; Blackwell is 10
    ctx.expect(
        f"get_device_arch_version() < {hopper + 1}" in core
        and "if args.use_torch_fsdp2 or args.use_megatron_fsdp:" in core
        and f"assert os.environ.get('{name}') == \"{p.prefer}\"" in core,
        f"megatron-core's validate_args does not ask for {name}={p.prefer} with TP or CP on Hopper and earlier",
    )
    checks = function_ast(resolve_symbol(f"{CONFIG_MODULE}.ConfigContainer._validate_and_apply_megatron_fsdp_configs"))
    asserts = [ast.unparse(n.test) for n in ast.walk(checks) if isinstance(n, ast.Assert) and name in ast.unparse(n.test)]
    ctx.expect(len(asserts) == 1 and "parallel" not in asserts[0], f"Bridge's FSDP assertion on {name} reads {asserts}")
    for layout, extra in (({"tp": 2, "sp": True}, {}), ({}, {"model.context_parallel_size": 2})):
        cfg = fsdp_config(ctx, **layout)
        for target, setting in extra.items():
            assign(cfg, target, setting)
        raises_exactly(ctx, lambda cfg=cfg: resolve(cfg, environ={name: str(p.prefer)}), kind, message)

    f = ctx.read("Fix: unset it, or set it above {threshold:int} as the recipes for GPUs newer than Hopper do (all of them use {used:int}).")
    passes(ctx, lambda: resolve(fsdp_config(ctx)), f"{name} unset")
    raises_exactly(ctx, lambda: resolve(fsdp_config(ctx), environ={name: str(f.threshold)}), kind, message)
    for above in (f.threshold + 1, f.used):
        ctx.expect(above > f.threshold, f"{above} is not above {f.threshold}")
        passes(ctx, lambda above=above: resolve(fsdp_config(ctx), environ={name: str(above)}), f"{name}={above}")
    import megatron.bridge

    used = set()
    pattern = re.compile(rf'"{name}":\s*(\d+)')
    for folder in ("recipes", "perf_recipes"):
        for path in (Path(megatron.bridge.__file__).parent / folder).rglob("*.py"):
            if NEWER_THAN_HOPPER.match(path.parent.name):
                used |= {int(v) for v in pattern.findall(path.read_text("utf-8"))}
    ctx.expect(used == {f.used}, f"the recipes for GPUs newer than Hopper set {name} to {sorted(used)}, not all {f.used}")


@claim("fsdp-weight-hash-check")
def weight_hash_check(ctx: Context) -> None:
    from megatron.bridge.training.config import TrainingConfig
    from megatron.core.distributed.fsdp.src.megatron_fsdp.fully_shard import (
        ShardingStrategy,
    )

    r = ctx.read(
        "**Weight-hash check.** With `{strategy:code}`, a non-{none:word} `{field:code}` fails validation with"
        " `{error:code}`, since parameters are sharded and replicas hold no full copy; the other strategies allow it."
        " Fix: set it to {fix:word}, its default."
    )
    unset, fix = ast.literal_eval(r.none), ast.literal_eval(r.fix)
    kind, message = raised(r.error)
    ctx.expect(10 != unset, "the check's interval is the unset value")
    strategies = [m.lower() for m in ShardingStrategy.__members__]
    ctx.expect(r.strategy in strategies, f"{r.strategy} is no sharding strategy")
    for strategy in strategies:
        cfg = fsdp_config(ctx)
        cfg.ddp.data_parallel_sharding_strategy = strategy
        assign(cfg, r.field, 10)  # any interval that is not the unset value
        if strategy == r.strategy:
            raises_exactly(ctx, lambda cfg=cfg: resolve(cfg), kind, message)
        else:
            passes(ctx, lambda cfg=cfg: resolve(cfg), f"{r.field} with {strategy}")
    cfg = fsdp_config(ctx)
    cfg.ddp.data_parallel_sharding_strategy = r.strategy
    assign(cfg, r.field, fix)
    passes(ctx, lambda cfg=cfg: resolve(cfg), f"{r.field}={fix!r}")
    defaults = {f.name: f.default for f in dataclasses.fields(TrainingConfig)}
    ctx.expect(relative(r.field)[0] == "train" and defaults.get(relative(r.field)[-1], object()) == fix, f"{r.field} does not default to {fix!r}")


@claim("fsdp-cpu-offloading")
def cpu_offloading(ctx: Context) -> None:
    r = ctx.read(
        "**Activation CPU offloading.** People reach for `{field:code}` next to FSDP to save memory. megatron-core's"
        ' `{where:code}` rejects it with `{exc:exc}` when `{pp:code}` ("{pp_message:quote}") or when activation'
        ' recomputation is on ("{recompute_message:quote}"). Fix: PP={pp_ok:int} and `{recompute_ok:code}` when'
        " offloading, or drop the offload."
    )
    where = resolve_symbol(f"megatron.core.transformer.transformer_config.{r.where}")
    ctx.expect(shipped_by(where, "megatron-core"), f"{r.where} is not megatron-core's")
    body = source_of(where)
    for message in (r.pp_message, r.recompute_message):
        ctx.expect(f"raise {r.exc.__name__}(" in body and _squash(message) in body, f"{r.where} does not raise {r.exc.__name__}({message!r})")
    size, operator, bound = comparison(r.pp)
    recompute, recompute_value = assignment(r.recompute_ok)

    def offloaded(**model: Any):
        cfg = fsdp_config(ctx)
        assign(cfg, r.field, True)
        for key, value in model.items():
            assign(cfg, f"model.{key}", value)
        return cfg

    rejected = bound if operator == ">=" else bound + 1
    raises_exactly(ctx, lambda: resolve(offloaded(**{size: rejected})), r.exc, r.pp_message)
    passes(ctx, lambda: resolve(offloaded(**{size: rejected - 1})), f"{size}={rejected - 1} with {r.field}")
    passes(ctx, lambda: resolve(offloaded(**{size: r.pp_ok, recompute: recompute_value})), f"PP={r.pp_ok} and {r.recompute_ok} with {r.field}")
    raises_exactly(ctx, lambda: resolve(offloaded(**{recompute: "full", "recompute_method": "uniform", "recompute_num_layers": 1})), r.exc, r.recompute_message)


@claim("fsdp-code-anchors")
def code_anchors(ctx: Context) -> None:
    container = type(tiny_config())
    v = ctx.read("- `{validate:code}`: the FSDP/FSDP2 exclusion check, then `{helper:code}` when either FSDP flag is set.")
    validate = resolve_symbol(v.validate)
    ctx.expect(validate is container.validate, f"{v.validate} is not ConfigContainer.validate")
    tree = function_ast(validate)
    exclusion = next((n for n in ast.walk(tree) if isinstance(n, ast.If) and {"use_megatron_fsdp", "use_torch_fsdp2"} <= set(re.findall(r"\w+", ast.unparse(n.test))) and any(isinstance(s, ast.Raise) for s in n.body)), None)
    helper = next((n for n in ast.walk(tree) if isinstance(n, ast.If) and any(isinstance(s, ast.Expr) and ast.unparse(s) == f"self.{v.helper}()" for s in n.body)), None)
    ctx.expect(exclusion is not None and helper is not None, f"validate() has no FSDP/FSDP2 exclusion check or no guarded call of {v.helper}")
    ctx.expect(exclusion.lineno < helper.lineno, f"validate() calls {v.helper} before the exclusion check")
    ctx.expect(ast.unparse(helper.test) == "self.dist.use_megatron_fsdp or self.ddp.use_megatron_fsdp", f"validate() calls {v.helper} under {ast.unparse(helper.test)!r}, not when either FSDP flag is set")

    a = ctx.read(
        "- `{apply:code}`: sets both flags and the distributed optimizer; with `{pao:code}` it sets `{decoupled:code}`;"
        " it turns `{avg:code}` off (see above) and `{reuse:code}` off on both `{reuse_a:code}` and `{reuse_b:code}`."
        " It then asserts on `{a1:code}`, `{a2:code}`, `{a3:code}` (which needs `{needs:code}`; with `{needs2:code}` it is"
        " turned on instead), `{a4:code}` and `{a5:code}`, in that order."
    )
    apply = resolve_symbol(a.apply)
    ctx.expect(apply is getattr(container, v.helper), f"{a.apply} is not the {v.helper} that validate() calls")
    tree = function_ast(apply)
    statements = [ast.unparse(n) for n in tree.body]
    sets = [statements.index(s) for s in ("self.dist.use_megatron_fsdp = True", "self.ddp.use_megatron_fsdp = True", "self.ddp.use_distributed_optimizer = True", "self.optimizer.use_distributed_optimizer = True") if s in statements]
    asserts = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Assert)), key=lambda n: n.lineno)
    ctx.expect(len(sets) == 4, f"{a.apply} does not set both flags and the distributed optimizer")
    names = [a.a1, a.a2, a.a3, a.a4, a.a5]
    order = []
    for name in names:
        hits = [i for i, n in enumerate(asserts) if re.search(rf"\b{re.escape(name)}\b", ast.unparse(n.test))]
        ctx.expect(bool(hits), f"{a.apply} asserts nothing on {name}")
        order.append(hits[0])
    ctx.expect(order == sorted(order), f"{a.apply} asserts on {names} in another order")
    ctx.expect(max(sets) < min(i for i, n in enumerate(tree.body) if any(isinstance(x, ast.Assert) for x in ast.walk(n))), f"{a.apply} asserts before it sets the flags")
    # the side effects, observed on a real config, each under the condition the source gives it
    ctx.expect(sorted(relative(w)[0] for w in (a.reuse_a, a.reuse_b)) == ["ddp", "optimizer"], f"{a.reuse} is turned off on cfg.ddp and cfg.optimizer, not {a.reuse_a} and {a.reuse_b}")
    guards = {ast.unparse(n.test): {ast.unparse(s) for s in n.body} for n in ast.walk(tree) if isinstance(n, ast.If)}
    ctx.expect(f"self.{'.'.join(relative(a.decoupled))} = True" in guards.get(f"self.{'.'.join(relative(a.pao))}", set()), f"{a.apply} does not set {a.decoupled} under {a.pao}")
    cfg = tiny_config()
    assign(cfg, "ddp.use_megatron_fsdp", True)
    assign(cfg, a.pao, True)
    for where in (a.reuse_a, a.reuse_b):
        setattr(lookup(cfg, where), a.reuse, True)
    cfg.ddp.fp8_param_gather = True  # megatron-core's DDP config asserts this for the reuse flag
    cfg.ddp.average_in_collective = True
    with preserved_environ():
        apply(cfg)
    ctx.expect(lookup(cfg, a.decoupled) is True, f"with {a.pao} the FSDP helper leaves {a.decoupled}={lookup(cfg, a.decoupled)!r}")
    ctx.expect(cfg.ddp.average_in_collective is False and a.avg == "average_in_collective", f"the helper leaves {a.avg} on")
    ctx.expect(all(getattr(lookup(cfg, w), a.reuse) is False for w in (a.reuse_a, a.reuse_b)), f"the helper leaves {a.reuse} on")
    cfg = tiny_config()
    assign(cfg, "ddp.use_megatron_fsdp", True)
    with preserved_environ():
        apply(cfg)
    ctx.expect(lookup(cfg, a.decoupled) is False, f"without {a.pao} the helper sets {a.decoupled} too")
    ctx.expect(a.needs == a.needs2, f"the sentence names {a.needs} and {a.needs2}")
    cfg = tiny_config()
    assign(cfg, "ddp.use_megatron_fsdp", True)
    setattr(cfg.ddp, a.needs, True)
    with preserved_environ():
        apply(cfg)
    ctx.expect(getattr(cfg.ddp, a.a3, None) is True, f"with {a.needs} the helper leaves {a.a3}={getattr(cfg.ddp, a.a3, None)!r}")
    distinct(ctx, names, "an assertion")

    u = ctx.read("- `{updater:code}`: applies `{env:code}`, mixed precision and comm overlap, then calls `{validate:code}`.")
    update = source_of(resolve_symbol(u.updater))
    apply_env = source_of(resolve_symbol(f"{CONFIG_MODULE}.apply_environment_variables"))
    ctx.expect(f"{u.env}.items()" in apply_env, f"apply_environment_variables does not apply {u.env}")
    steps = ["apply_environment_variables(cfg)", "cfg.mixed_precision.setup(", "cfg.comm_overlap.setup(", f"cfg.{u.validate}"]
    positions = [update.find(step) for step in steps]
    ctx.expect(min(positions) >= 0 and positions == sorted(positions), f"{u.updater} does not run {' -> '.join(steps)} in that order")

    w = ctx.read(
        "- `{wrap:code}` (megatron-core; Bridge re-exports it as `{reexport:code}`): picks the wrapper, `{w1:code}` when"
        " `{f1:code}` is set, `{w2:code}` when `{f2:code}` is, `{w3:code}` otherwise."
    )
    wrap = resolve_symbol(w.wrap)
    ctx.expect(shipped_by(wrap, "megatron-core"), f"{w.wrap} is not megatron-core's")
    ctx.expect(resolve_symbol(w.reexport) is wrap and w.reexport.rsplit(".", 1)[0] != w.wrap.rsplit(".", 1)[0], f"{w.reexport} is not a re-export of {w.wrap}")
    ctx.expect(shipped_by(sys.modules[w.reexport.rsplit(".", 1)[0]], "megatron-bridge"), f"{w.reexport} is not Bridge's")
    chain, node = [], next(n for n in function_ast(wrap).body if isinstance(n, ast.If))
    while True:
        picked = next(ast.unparse(s.value) for s in node.body if isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) == "DP")
        chain.append((ast.unparse(node.test), picked))
        if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
            node = node.orelse[0]
            continue
        chain.append((None, next(ast.unparse(s.value) for s in node.orelse if isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) == "DP")))
        break
    said = [(w.f1, w.w1), (w.f2, w.w2), (None, w.w3)]
    ctx.expect(chain == said, f"{w.wrap} picks {chain}, not {said}")

    c = ctx.read("- `{cls:code}`: the Megatron FSDP wrapper itself.")
    ctx.expect(resolve_symbol(c.cls) is wrap.__globals__[w.w1], f"{c.cls} is not the {w.w1} that {w.wrap} wraps Megatron FSDP models in")

    d = ctx.read("- `{cls:code}`: the class behind `{ddp:code}`, with the override's `{g1:code}`, `{g2:code}` and `{g3:code}`.")
    ddp_class = resolve_symbol(d.cls)
    ctx.expect(type(lookup(tiny_config(), d.ddp)) is ddp_class, f"{d.ddp} is not a {d.cls}")
    block = block_assignments(ctx.sibling(ENABLE).code(0))
    sets_on_ddp = {t.rsplit(".", 1)[1] for t in block if t.rsplit(".", 1)[0] == d.ddp}
    ctx.expect(sets_on_ddp == {d.g1, d.g2, d.g3} and len({d.g1, d.g2, d.g3}) == 3, f"the override sets {sorted(sets_on_ddp)} on {d.ddp}, not {[d.g1, d.g2, d.g3]}")
    ctx.expect({d.g1, d.g2, d.g3} <= {f.name for f in dataclasses.fields(ddp_class)}, f"{d.cls} lacks one of {[d.g1, d.g2, d.g3]}")


@claim("fsdp-preflight-script")
def preflight_script(ctx: Context) -> None:
    s = ctx.read("Before any GPU time, run the preflight on your config (see [{path}]({target}); `{help:code}` lists its options).")
    r = ctx.read(
        "It reports the pitfalls above from the config's fields (`{f1:code}`, `{f2:code}`, `{f3:code}`, `{f4:code}`,"
        " `{f5:code}`) and, with `{flag:code}`, runs Bridge's own `{updater:code}` on a copy with the world size set, so no"
        " GPU is needed; on a machine without Transformer Engine it replaces the {count:one|two|three|four} Bridge"
        " modules that import TE with placeholders."
    )
    e = ctx.read("Exit status: {ok:int} no problem, {found:int} problems found, {bad:int} the config could not be loaded.")
    ctx.expect(s.path == s.target, f"the link shows {s.path} but points at {s.target}")
    script = ctx.load_script(s.target)
    saved_finders = list(sys.meta_path)  # main() installs its own TE placeholders

    def main(argv: list[str]) -> tuple[int, str]:
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), preserved_environ():
                status = script.main(argv)
        except SystemExit as done:
            status = done.code
        finally:
            sys.meta_path[:] = saved_finders
        return status, out.getvalue()

    status, text = main([s.help])
    ctx.expect(status == 0 and all(option in text for option in ("--config", "--world-size", r.flag)), f"{s.help} does not list the options")

    def clean():
        cfg = fsdp_config(ctx)
        cfg.checkpoint.save = CHECKPOINTS
        cfg.checkpoint.ckpt_format = "fsdp_dtensor"  # the subject here is the script, not the block
        return cfg

    breakers = {
        "ckpt_format": lambda c: setattr(c.checkpoint, "ckpt_format", "torch_dist"),
        "use_torch_fsdp2": lambda c: setattr(c.dist, "use_torch_fsdp2", True),
        "use_tp_pp_dp_mapping": lambda c: setattr(c.dist, "use_tp_pp_dp_mapping", True),
        "CUDA_DEVICE_MAX_CONNECTIONS": lambda c: c.env_vars.update(CUDA_DEVICE_MAX_CONNECTIONS=1),
        "check_weight_hash_across_dp_replicas_interval": lambda c: setattr(c.train, "check_weight_hash_across_dp_replicas_interval", 10),
    }
    fields = [r.f1, r.f2, r.f3, r.f4, r.f5]
    distinct(ctx, fields, "a field")
    ctx.expect(script.preflight(clean(), environ={}) == [], "the preflight reports a problem on the skill's own override")
    for field in fields:
        ctx.expect(field in breakers, f"SKILL.md says the preflight reports {field}, which is none of the pitfalls above")
        cfg = clean()
        breakers[field](cfg)
        found = [p.field.rsplit(".", 1)[-1] for p in script.preflight(cfg, environ={})]
        ctx.expect(found == [field], f"the preflight reported {found} for a broken {field}")
        with preserved_environ():
            rejected = script.run_bridge_validation(cfg, 8)
        ctx.expect(rejected is not None, f"Bridge's validation accepted a broken {field}, so the preflight's rule is stale")
    ctx.expect(f"{r.updater.removesuffix('()')}(copy.deepcopy(cfg))" in source_of(script.run_bridge_validation), f"the preflight does not run {r.updater} on a copy")
    ctx.expect(symbol(r.updater) is resolve_symbol(f"{CONFIG_MODULE}.runtime_config_update"), f"{r.updater} is not Bridge's")
    count = ["one", "two", "three", "four"].index(r.count) + 1
    ctx.expect(len(script._TE_ONLY_MODULES) == count and set(script._TE_ONLY_MODULES) == TE_ONLY_MODULES, f"the preflight replaces {sorted(script._TE_ONLY_MODULES)}, not the {r.count} modules Bridge imports TE in")

    command = shlex.split(ctx.code(0))
    ctx.expect(command[:2] == ["python", s.target], f"the command does not run {s.target}")
    spec = command[command.index("--config") + 1]
    module_name, _, function = spec.partition(":")

    def run_with_args(make, argv: list[str]) -> tuple[int, str]:
        module = types.ModuleType(module_name)
        setattr(module, function, lambda: make())
        parents = {".".join(module_name.split(".")[:i]): types.ModuleType(".".join(module_name.split(".")[:i])) for i in range(1, module_name.count(".") + 1)}
        with mock.patch.dict(sys.modules, {**parents, module_name: module}):
            return main(argv)

    def run_with(make) -> tuple[int, str]:
        return run_with_args(make, command[2:])

    status, text = run_with(clean)
    ctx.expect(status == e.ok and "bridge validation: passed" in text, f"the command exits {status} on the skill's override: {text[-300:]}")
    ctx.expect(r.flag in command, f"the command does not pass {r.flag}")
    without = [arg for arg in command if arg != r.flag]
    with mock.patch.object(script, "run_bridge_validation", side_effect=AssertionError("the preflight validated without the flag")):
        status, text = run_with_args(clean, without[2:])
    ctx.expect(status == e.ok and "bridge validation" not in text, f"without {r.flag} the preflight still runs Bridge's validation")
    broken = clean()
    breakers["use_tp_pp_dp_mapping"](broken)
    status, _ = run_with(lambda: broken)
    ctx.expect(status == e.found, f"the command exits {status}, not {e.found}, when it finds problems")
    status, _ = main(["--config", "mbskills_no_such_module:config"])
    ctx.expect(status == e.bad, f"the preflight exits {status}, not {e.bad}, when the config cannot be loaded")
    ctx.expect(len({e.ok, e.found, e.bad}) == 3, "SKILL.md gives two outcomes the same exit status")


@claim("fsdp-gpu-train-save-resume", tier="gpu")
def gpu_train_save_resume(ctx: Context) -> None:
    """CPU side of the GPU run (checks/gpu.py check_fsdp): the two configs it trains,
    built from the skill's block, pass Bridge's validation and save, then load, fsdp_dtensor;
    and the GPU check asserts what the sentence says."""
    from runner.claims import kit

    from . import gpu
    from .gpu import FSDP_ITERS, FSDP_SAVE_AT, fsdp_configs

    r = ctx.read(
        "Then, on GPUs, a short `{entry:code}` run with the override must log a finite loss at its last iteration, with"
        " the model wrapped by `{wrapper:code}`; a checkpoint it saves mid-run must be in `{fmt:code}` format (a PyTorch"
        " DCP folder with a `{marker:code}` file) without an assertion, and a run that loads it resumes at the saved"
        " iteration with the loss close to where it stopped."
    )
    entry = r.entry.removesuffix("()")
    # The module imports nvidia_resiliency_ext, which only the GPU tier installs: read its file.
    module = next((f for f in metadata.files("megatron-bridge") or [] if str(f) == "megatron/bridge/training/pretrain.py"), None)
    ctx.expect(module is not None and re.search(rf"^def {re.escape(entry)}\(", Path(str(module.locate())).read_text("utf-8"), re.MULTILINE) is not None, f"Bridge's megatron.bridge.training.pretrain has no {r.entry}")
    runs = source_of(kit.pretrain)
    ctx.expect(f"from megatron.bridge.training.pretrain import {entry} as bridge_{entry}" in runs and f"bridge_{entry}(cfg, forward_step" in runs, f"the GPU run does not call {r.entry}")
    check = source_of(gpu.check_fsdp)
    ctx.expect(f"isinstance(m, {r.wrapper})" in check and f"mcore_fsdp_adapter import {r.wrapper}" in check, f"the GPU run does not check the model is wrapped by {r.wrapper}")
    ctx.expect("finite(losses[-1])" in source_of(kit.check_losses), "the GPU run does not check the last loss is finite")
    ctx.expect(f'found_format == "{r.fmt}"' in check and f'(saved / "{r.marker}")' in check, f"the GPU run does not check a {r.fmt} checkpoint with a {r.marker} file")
    ctx.expect("resumed.start_step == FSDP_SAVE_AT" in check and "gap <= RESUME_LOSS_ATOL" in check, "the GPU run does not check the resume iteration and loss")
    for world_size in (1, 2):
        first, second = fsdp_configs(ctx, world_size, Path("/tmp/mbskills-gpu-plan/checkpoints"), te=False)
        for cfg in (first, second):
            resolve(cfg, world_size=world_size)
            ctx.expect(cfg.ddp.use_megatron_fsdp is True and cfg.dist.use_megatron_fsdp is True, f"the GPU run at world size {world_size} would not use Megatron FSDP")
            ctx.expect(cfg.checkpoint.ckpt_format == r.fmt, f"the GPU run would save and load {cfg.checkpoint.ckpt_format!r}, not {r.fmt}")
            ctx.expect(cfg.train.micro_batch_size * cfg.data_parallel_size == cfg.train.global_batch_size, "the GPU run's batch does not fit its data-parallel size")
        ctx.expect(first.checkpoint.save and first.checkpoint.save_interval == FSDP_SAVE_AT < FSDP_ITERS, "the first GPU run does not save mid-run")
        ctx.expect(second.checkpoint.load == first.checkpoint.save and second.checkpoint.ckpt_step == FSDP_SAVE_AT and not second.checkpoint.save, "the second GPU run does not load the first run's mid-run checkpoint")
