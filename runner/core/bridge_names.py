"""Names of Megatron-Bridge 0.6.2's configuration, as data, for the stages that read answers
(grade.extract), check sidecars (load.checks) and apply answers (execute.worker). Standard
library only; tests/test_extract.py holds these against the installed classes."""

from __future__ import annotations

import re

# The fields of ConfigContainer: the sections an answer's config path starts with.
SECTIONS = frozenset({
    "env_vars", "rng", "rerun_state_machine", "train", "model", "optimizer", "optimizer_config_override_provider", "ddp",
    "validation", "scheduler", "dataset", "logger", "tokenizer", "checkpoint", "dist", "ft", "straggler", "nvrx_straggler",
    "profiling", "peft", "comm_overlap", "mixed_precision", "tensor_inspect", "inprocess_restart",
})

_BRIDGE_CONFIG = "megatron.bridge.training.config"
_COMM_OVERLAP = "megatron.bridge.training.comm_overlap"

# Constructors whose keyword arguments are data: name -> (module it lives in, the section an
# instance stands for, or None). Module None: only the extractor reads it (dict, and
# ConfigContainer/model providers, which the executor never builds from an answer).
CONSTRUCTORS: dict[str, tuple[str | None, str | None]] = {
    "CommOverlapConfig": (_COMM_OVERLAP, "comm_overlap"),
    "TransformerLayerTPOverlapCfg": (_COMM_OVERLAP, None),
    "BulkOverlapCfg": (_COMM_OVERLAP, None),
    "PipelineOverlapCfg": (_COMM_OVERLAP, None),
    "RingExchangeOverlapCfg": (_COMM_OVERLAP, None),
    "DistributedDataParallelConfig": ("megatron.core.distributed", "ddp"),
    "OptimizerConfig": (_BRIDGE_CONFIG, "optimizer"),
    "CheckpointConfig": (_BRIDGE_CONFIG, "checkpoint"),
    "TrainingConfig": (_BRIDGE_CONFIG, "train"),
    "DistributedInitConfig": (_BRIDGE_CONFIG, "dist"),
    "LoggerConfig": (_BRIDGE_CONFIG, "logger"),
    "SchedulerConfig": (_BRIDGE_CONFIG, "scheduler"),
    "RNGConfig": (_BRIDGE_CONFIG, "rng"),
    "ProfilingConfig": (_BRIDGE_CONFIG, "profiling"),
    "TokenizerConfig": (_BRIDGE_CONFIG, "tokenizer"),
    "ValidationConfig": (_BRIDGE_CONFIG, "validation"),
    "MixedPrecisionConfig": ("megatron.bridge.training.mixed_precision", "mixed_precision"),
    "GPTModelProvider": (None, "model"),
    "GPTProvider": (None, "model"),
    "ConfigContainer": (None, None),
    "dict": (None, None),
}

# Sections a scenario may replace whole (with a constructor or, for mixed_precision, a
# preset name): those an executable constructor stands for.
SETTABLE_SECTIONS = frozenset(section for module, section in CONSTRUCTORS.values() if module and section)

# A config path as a sidecar names it: env.NAME, a section, or a dotted path from a section.
_SECTION_ALTERNATION = "|".join(sorted(SECTIONS, key=len, reverse=True))
CONFIG_PATH = re.compile(rf"^(?:env\.[A-Za-z_]\w*|(?:{_SECTION_ALTERNATION})(?:\.[A-Za-z_]\w*)*)$")
