"""What a claim check needs from the pinned Megatron-Bridge on a CPU machine.

- `install_te_placeholders()`: Megatron-Bridge 0.6.2 imports Transformer Engine
  unconditionally in exactly two modules that the training config layer pulls in
  (`TE_ONLY_MODULES`); older releases in a few more (`TE_ONLY_BY_RELEASE`, chosen by the
  installed megatron-bridge version, for `mbskills drift`). TE cannot be installed without
  CUDA, so those modules are replaced by placeholders whose every use raises; megatron-core
  itself still sees TE as absent, as on any machine without it. Only those names are
  intercepted: any other import error surfaces unchanged.
- `tiny_config()`: a ConfigContainer around a 2-layer GPT (hidden 64), NullTokenizer and
  mock data, so no recipe reads a config from a model hub.
- `resolve()`: Bridge's own `runtime_config_update()` with WORLD_SIZE set, the way a real
  launch reaches validation, with os.environ restored afterwards.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
import types
from typing import Any, Iterator

from ..core import MbskillsError

TE_ONLY_MODULES = frozenset({"megatron.bridge.peft.lora_layers", "megatron.bridge.models.gpt_full_te_layer_autocast_spec"})
# What older releases import TE in as well, by version prefix; found by running the claims
# on each release without TE (`mbskills drift`). 0.5.x, both gone in 0.6.0:
# peft/lora.py's top-level `import transformer_engine.pytorch as te` (the config layer
# imports it), and diffusion/models/wan/utils.py's `import transformer_engine_torch`
# (`import megatron.bridge.recipes` reaches it through the Wan recipe).
TE_ONLY_BY_RELEASE: dict[str, frozenset[str]] = {
    "0.5.": frozenset({"megatron.bridge.peft.lora", "megatron.bridge.diffusion.models.wan.utils"}),
}


def te_only_modules(release: str | None = None) -> frozenset[str]:
    """TE_ONLY_MODULES plus what `release` (default: the installed megatron-bridge) adds."""
    if release is None:
        release = versions()["megatron-bridge"]
    extra = [names for prefix, names in TE_ONLY_BY_RELEASE.items() if release.startswith(prefix)]
    return TE_ONLY_MODULES.union(*extra)


class NeedsTransformerEngine(MbskillsError, ImportError):
    """Raised by any use of a placeholder; an ImportError, as Bridge's own guards expect."""


class _Placeholder:
    def __init__(self, name: str, message: str | None = None) -> None:
        self._name = name
        self._message = message or f"{name} needs Transformer Engine, which is not installed"

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise NeedsTransformerEngine(self._message)

    __call__ = _fail

    def __getattr__(self, item: str) -> Any:
        self._fail()

    def __mro_entries__(self, bases: tuple) -> tuple:
        self._fail()


def _module_getattr(module_name: str, message: str | None = None):
    """A placeholder module's `__getattr__`: a placeholder for every public name, and the
    AttributeError a real module gives for a dunder it lacks (`__file__`, `__path__`), so
    that tools walking sys.modules see a module without a file, not a placeholder."""

    def getattr_(attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(f"module {module_name!r} has no attribute {attr!r}")
        return _Placeholder(f"{module_name}.{attr}", message.format(name=f"{module_name}.{attr}") if message else None)

    return getattr_


class _PlaceholderFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names: frozenset[str] = TE_ONLY_MODULES) -> None:
        self.names = names

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(name, self) if name in self.names else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name, "placeholder: this module needs Transformer Engine")
        module.__getattr__ = _module_getattr(spec.name)  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def install_te_placeholders() -> bool:
    """Intercept the installed release's TE-only modules when TE is absent; True if
    installed now or before."""
    if any(isinstance(finder, _PlaceholderFinder) for finder in sys.meta_path):
        return True
    if importlib.util.find_spec("transformer_engine") is not None:
        return False
    sys.meta_path.insert(0, _PlaceholderFinder(te_only_modules()))
    return True


class _AbsentPackageFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Placeholders for whole top-level packages that are absent (the GPU tier's `pulp`)."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(name, self) if name in self.names else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name, "placeholder: this package is not installed")
        module.__getattr__ = _module_getattr(spec.name, "{name}: " + spec.name + " is not installed (placeholder)")  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def install_absent_placeholders(names: tuple[str, ...]) -> list[str]:
    """Placeholders for those of `names` (top-level packages) that cannot be imported.

    For a package that another one imports at module level but whose use is never reached,
    e.g. ModelOpt's `import pulp` for a NAS searcher that pretrain() does not run. Any use
    of the placeholder raises an ImportError. Returns the names now covered."""
    absent = frozenset(n for n in names if n not in sys.modules and importlib.util.find_spec(n) is None)
    if absent:
        sys.meta_path.insert(0, _AbsentPackageFinder(absent))
    return sorted(absent)


# Variables Bridge's validation reads: the caller's shell must not decide a check.
VALIDATION_ENV = ("CUDA_DEVICE_MAX_CONNECTIONS", "WORLD_SIZE")


@contextlib.contextmanager
def preserved_environ() -> Iterator[None]:
    """runtime_config_update writes cfg.env_vars into os.environ; undo that after a check.

    Inside, the variables that validation reads start unset.
    """
    saved = dict(os.environ)
    for name in VALIDATION_ENV:
        os.environ.pop(name, None)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def quiet(stderr: bool = False) -> Iterator[None]:
    """Keep Megatron's prints, log handlers and Python warnings out of the report.

    Root-logger records still reach handlers that checks add (collect_warnings). With
    `stderr`, for the import: handlers that Megatron and torch create then bind to a
    buffer, so their import-time notes (no CUDA, no TE) stay out of the terminal.
    """
    import io
    import warnings

    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    root.handlers = [logging.NullHandler()]  # not empty: logging's last-resort handler would print
    root.setLevel(logging.WARNING)
    # Some of their loggers carry their own handlers; the checks only read root-logger records.
    noisy = {name: logging.getLogger(name).level for name in ("megatron", "torch")}
    for name in noisy:
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
            if stderr:
                stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
            stack.enter_context(warnings.catch_warnings())
            warnings.simplefilter("ignore")
            yield
    finally:
        # Megatron may install its own handlers while importing; drop those, restore ours.
        root.handlers = saved_handlers
        root.setLevel(saved_level)
        for name, level in noisy.items():
            logging.getLogger(name).setLevel(level)


class WarningCollector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def collect_warnings() -> Iterator[list[str]]:
    collector = WarningCollector()
    root = logging.getLogger()
    root.addHandler(collector)
    try:
        yield collector.messages
    finally:
        root.removeHandler(collector)


def tiny_config(
    *,
    tp: int = 1,
    sp: bool = False,
    pp: int = 1,
    vpp: int | None = None,
    distributed_optimizer: bool = False,
    comm_overlap: Any = None,
) -> Any:
    from megatron.bridge.models import GPTModelProvider
    from megatron.bridge.training.config import (
        CheckpointConfig,
        ConfigContainer,
        LoggerConfig,
        MockGPTDatasetConfig,
        OptimizerConfig,
        SchedulerConfig,
        TokenizerConfig,
        TrainingConfig,
    )
    from megatron.core.distributed import DistributedDataParallelConfig

    seq_length, vocab = 64, 256
    return ConfigContainer(
        model=GPTModelProvider(
            num_layers=max(2, pp * (vpp or 1)),
            hidden_size=64,
            num_attention_heads=max(4, tp),
            seq_length=seq_length,
            vocab_size=vocab,
            tensor_model_parallel_size=tp,
            sequence_parallel=sp,
            pipeline_model_parallel_size=pp,
            virtual_pipeline_model_parallel_size=vpp,
            apply_rope_fusion=False,
        ),
        train=TrainingConfig(global_batch_size=128, micro_batch_size=1, train_iters=10),
        optimizer=OptimizerConfig(optimizer="adam", lr=1e-4, use_distributed_optimizer=distributed_optimizer),
        scheduler=SchedulerConfig(lr_decay_style="constant", lr_warmup_iters=0),
        dataset=MockGPTDatasetConfig(seq_length=seq_length, random_seed=1234, reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False),
        logger=LoggerConfig(),
        tokenizer=TokenizerConfig(tokenizer_type="NullTokenizer", vocab_size=vocab),
        checkpoint=CheckpointConfig(),
        ddp=DistributedDataParallelConfig(use_distributed_optimizer=distributed_optimizer),
        comm_overlap=comm_overlap,
    )


def resolve(cfg: Any, world_size: int = 8, environ: dict[str, str] | None = None) -> Any:
    """runtime_config_update(cfg) at `world_size` ranks, with extra environment variables."""
    from megatron.bridge.training.config import runtime_config_update

    with preserved_environ():
        os.environ["WORLD_SIZE"] = str(world_size)
        os.environ.update(environ or {})
        runtime_config_update(cfg)
    return cfg


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("megatron-bridge", "megatron-core", "torch"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out
