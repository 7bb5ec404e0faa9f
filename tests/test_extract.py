"""The extractor reads an answer as the config it proposes: the same config written as
Python, YAML, Hydra overrides or a table gives the same facts; denied statements propose
nothing; nothing is ever run; and field assertions decide on those facts."""

from __future__ import annotations

import dataclasses

import pytest

from runner.grade.extract import SECTIONS, Call, Name, Opaque, extract
from runner.grade.fields import FIELD_CLEAR, FIELD_MISSING, FIELD_OTHER, FIELD_SET, run_fields, same
from runner.load import FieldRule

SAME_CONFIG = {
    "python": '```python\ncfg.ddp.use_megatron_fsdp = True\ncfg.ddp.data_parallel_sharding_strategy = "optim_grads_params"\ncfg.checkpoint.ckpt_format = "fsdp_dtensor"\ncfg.ddp.bucket_size = 128 * 1024 * 1024\n```\n',
    "yaml": "```yaml\nddp:\n  use_megatron_fsdp: true\n  data_parallel_sharding_strategy: optim_grads_params\n  bucket_size: 134217728\ncheckpoint:\n  ckpt_format: fsdp_dtensor\n```\n",
    "hydra": "```bash\ntorchrun --nproc-per-node 8 pretrain.py \\\n  ddp.use_megatron_fsdp=true ddp.data_parallel_sharding_strategy=optim_grads_params \\\n  checkpoint.ckpt_format=fsdp_dtensor ddp.bucket_size=134217728\n```\n",
    "table": "| field | value |\n| --- | --- |\n| `cfg.ddp.use_megatron_fsdp` | `True` |\n| `ddp.data_parallel_sharding_strategy` | `\"optim_grads_params\"` |\n| `checkpoint.ckpt_format` | `fsdp_dtensor` |\n| `ddp.bucket_size` | `134217728` |\n",
    "prose": "Set `cfg.ddp.use_megatron_fsdp = True`, set ddp.data_parallel_sharding_strategy to \"optim_grads_params\", use `checkpoint.ckpt_format=\"fsdp_dtensor\"` and `ddp.bucket_size = 134_217_728`.\n",
    "constructor": "```python\nfrom megatron.core.distributed import DistributedDataParallelConfig\ncfg = ConfigContainer(\n    ddp=DistributedDataParallelConfig(use_megatron_fsdp=True, data_parallel_sharding_strategy='optim_grads_params', bucket_size=2**27),\n    checkpoint=CheckpointConfig(ckpt_format='fsdp_dtensor'),\n)\n```\n",
}
EXPECTED = {"ddp.use_megatron_fsdp": True, "ddp.data_parallel_sharding_strategy": "optim_grads_params", "checkpoint.ckpt_format": "fsdp_dtensor", "ddp.bucket_size": 134217728}


@pytest.mark.parametrize("form", sorted(SAME_CONFIG))
def test_every_form_of_the_same_config_gives_the_same_facts(form):
    facts = extract(SAME_CONFIG[form])
    assert not facts.problems
    for path, value in EXPECTED.items():
        found = facts.about(path)
        assert found, f"{form}: {path} not found in {facts.facts}"
        assert same(value, found[-1].value), f"{form}: {path} = {found[-1].value!r}"


def test_facts_carry_their_line_and_source():
    answer = "Intro line.\n\n```yaml\nddp:\n  use_megatron_fsdp: true\n```\n"
    (fact,) = extract(answer).facts
    assert (fact.path, fact.value, fact.line, fact.source) == ("ddp.use_megatron_fsdp", True, 5, "yaml")


def test_a_syntax_error_is_named_with_its_line():
    answer = "Fix:\n\n```python\ncfg.ddp.use_megatron_fsdp = True\ncfg.checkpoint.ckpt_format = (\n```\n"
    facts = extract(answer)
    assert [(p.kind, p.line) for p in facts.problems] == [("syntax", 5)]
    assert not facts.about("ddp.use_megatron_fsdp")  # nothing from a block that does not parse


@pytest.mark.parametrize(
    "code, why, line",
    [
        ('import os\nos.system("touch /tmp/x")', "calls os.system", 5),
        ('with open("/tmp/x", "w") as f:\n    f.write("1")', "calls open", 4),
        ("import subprocess\nsubprocess.run(['id'])", "imports subprocess", 4),
        ("cfg.__class__.__init__ = None", "touches __", 4),
        ('eval("1")', "calls eval", 4),
    ],
)
def test_code_that_reaches_the_system_is_refused_with_its_line(code, why, line):
    answer = "Try:\n```python\ncfg.ddp.use_megatron_fsdp = True\n" + code + "\n```\n"
    problems = extract(answer).problems
    assert problems and problems[0].kind == "refused" and problems[0].line == line
    assert why in problems[0].text


def test_bindings_are_followed():
    answer = "```python\nimport torch\nfrom megatron.bridge.training.comm_overlap import CommOverlapConfig\ncfg = llama3_8b_pretrain_config()\nddp = cfg.ddp\nddp.overlap_grad_reduce = True\noverlap = CommOverlapConfig(tp_comm_overlap=True, tp_comm_bootstrap_backend='nccl')\ncfg.comm_overlap = overlap\ncfg.model.params_dtype = torch.bfloat16\nos.environ['CUDA_DEVICE_MAX_CONNECTIONS'] = '1'\ncfg.train.global_batch_size = gbs\n```\n"
    facts = extract(answer)
    assert facts.about("ddp.overlap_grad_reduce")[-1].value is True
    assert facts.about("comm_overlap")[-1].value == Call("CommOverlapConfig", (("tp_comm_overlap", True), ("tp_comm_bootstrap_backend", "nccl")))
    assert facts.about("comm_overlap.tp_comm_overlap")[-1].derived
    assert facts.about("model.params_dtype")[-1].value == Name("torch.bfloat16")
    assert facts.about("env.CUDA_DEVICE_MAX_CONNECTIONS")[-1].value == "1"
    assert isinstance(facts.about("train.global_batch_size")[-1].value, Opaque)


def test_a_diff_proposes_its_added_lines_only():
    answer = '```diff\n- cfg.checkpoint.ckpt_format = "torch_dist"\n+ cfg.checkpoint.ckpt_format = "fsdp_dtensor"\n```\n'
    assert [f.value for f in extract(answer).about("checkpoint.ckpt_format")] == ["fsdp_dtensor"]


@pytest.mark.parametrize(
    "sentence",
    [
        'Do not set `checkpoint.ckpt_format = "torch_dist"`.',
        'The default `checkpoint.ckpt_format = "torch_dist"` fails validation once save is set.',
        'Use fsdp_dtensor instead of `checkpoint.ckpt_format = "torch_dist"`.',
        'You will find posts that set `checkpoint.ckpt_format = "torch_dist"` here.',
        'Setting `checkpoint.ckpt_format = "torch_dist"` looks tempting. It does not work with FSDP.',
        '`checkpoint.ckpt_format = "torch_dist"` (the default) is what trips it.',
        '`checkpoint.ckpt_format = "torch_dist"` doesn\'t work here.',
        'The recipe then sets `checkpoint.ckpt_format = "torch_dist"` for you.',
        'The warning is raised due to `checkpoint.ckpt_format = "torch_dist"`.',
    ],
)
def test_denied_prose_proposes_nothing(sentence):
    facts = extract(sentence)
    assert facts.facts and all(f.negated for f in facts.facts)
    assert run_fields((FieldRule("checkpoint.ckpt_format", "equals", "torch_dist"),), facts)[0] == FIELD_MISSING


def test_the_last_proposed_value_counts():
    facts = extract("First `ddp.bucket_size = 1000`.\n\n```python\ncfg.ddp.bucket_size = 134217728\n```\n")
    assert run_fields((FieldRule("ddp.bucket_size", "equals", 134217728),), facts)[0] == FIELD_SET


@pytest.mark.parametrize(
    "rule, answer, kind",
    [
        (FieldRule("ddp.use_megatron_fsdp", "equals", True), "`cfg.ddp.use_megatron_fsdp = True`", FIELD_SET),
        (FieldRule("ddp.use_megatron_fsdp", "equals", True), "`cfg.ddp.use_megatron_fsdp = False`", FIELD_OTHER),
        (FieldRule("ddp.use_megatron_fsdp", "equals", True), "Turn on Megatron FSDP.", FIELD_MISSING),
        (FieldRule("ddp.use_megatron_fsdp", "equals", True), "| `use_megatron_fsdp` | `True` |", FIELD_SET),  # a bare field in a table
        (FieldRule("ddp.use_megatron_fsdp", "equals", True), "Bridge then sets use_megatron_fsdp=True itself.", FIELD_MISSING),  # a bare field in prose explains
        (FieldRule("comm_overlap", "not_equals", None), "`cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=False)`", FIELD_SET),
        (FieldRule("comm_overlap.tp_comm_overlap", "equals", False), "Attach `cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=False)`.", FIELD_SET),
        (FieldRule("model.moe_aux_loss_coeff", "equals", 0.01), "set model.moe_aux_loss_coeff to 1e-2", FIELD_SET),
        (FieldRule("model.moe_router_load_balancing_type", "equals", "aux_loss"), "set model.moe_router_load_balancing_type to e.g. 'aux_loss'", FIELD_MISSING),
        (FieldRule("env.PYTORCH_CUDA_ALLOC_CONF", "absent", None), "```python\ncfg.env_vars.pop('PYTORCH_CUDA_ALLOC_CONF')\n```", FIELD_SET),
        (FieldRule("env.NVTE_FLAG", "absent", None), "```bash\nunset NVTE_FLAG\n```", FIELD_SET),
        (FieldRule("checkpoint.ckpt_format", "never", "torch_dist"), "```python\ncfg.checkpoint.ckpt_format = 'torch_dist'\ncfg.checkpoint.ckpt_format = 'fsdp_dtensor'\n```", FIELD_OTHER),
        (FieldRule("model.expert_model_parallel_size", "includes", 8), "```python\ncfg.model.expert_model_parallel_size = 8\n```\nOr keep EP small: `cfg.model.expert_model_parallel_size = 2`.", FIELD_SET),
        (FieldRule("model.expert_model_parallel_size", "includes", 8), "`cfg.model.expert_model_parallel_size = 4`", FIELD_OTHER),
        (FieldRule("comm_overlap", "constructs", "CommOverlapConfig"), "```python\ncfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=False)\n```", FIELD_SET),
        (FieldRule("comm_overlap", "constructs", "CommOverlapConfig"), "```python\ncfg.comm_overlap = None\n```", FIELD_OTHER),
        (FieldRule("model.recompute_modules", "excludes", "moe"), "```python\ncfg.model.recompute_modules = ['core_attn', 'layernorm']\n```", FIELD_SET),
        (FieldRule("model.recompute_modules", "excludes", "moe"), "```yaml\nmodel:\n  recompute_modules: [moe, layernorm]\n```", FIELD_OTHER),
        (FieldRule("ddp.nccl_ub", "never", False, code_only=True), "```python\ncfg.ddp.nccl_ub = True\n```\n`cfg.ddp.nccl_ub = False` would pass validation too.", FIELD_CLEAR),
        (FieldRule("ddp.fsdp_double_buffer", "equals", False), "```python\ncfg.ddp.fsdp_double_buffer = False\n```\nWith max-pool on, `ddp.fsdp_double_buffer = True` is set in post-init.", FIELD_SET),  # code outranks prose
        (FieldRule("dist.use_torch_fsdp2", "not_equals", True), "`cfg.dist.use_torch_fsdp2 = True`", FIELD_OTHER),
        (FieldRule("dist.use_torch_fsdp2", "not_equals", True), "`cfg.ddp.use_megatron_fsdp = True`", FIELD_CLEAR),
        (FieldRule("dist.use_torch_fsdp2", "absent", None), "`cfg.dist.use_torch_fsdp2 = False`", FIELD_OTHER),
        (FieldRule("model.moe_token_dispatcher_type", "one_of", ("alltoall", "flex")), "model.moe_token_dispatcher_type: flex", FIELD_SET),
        (FieldRule("model.moe_token_dispatcher_type", "one_of", ("alltoall", "flex")), "`model.moe_token_dispatcher_type = 'allgather'`", FIELD_OTHER),
        (FieldRule("train.global_batch_size", "equals", 64), "```python\ncfg.train.global_batch_size = gbs\n```", FIELD_MISSING),
    ],
)
def test_field_assertions(rule, answer, kind):
    assert run_fields((rule,), extract(answer))[0] == kind


def test_one_failing_path_fails_a_fields_table():
    rules = (FieldRule("ddp.overlap_grad_reduce", "equals", True), FieldRule("ddp.overlap_param_gather", "equals", True))
    assert run_fields(rules, extract("`ddp.overlap_grad_reduce = True`, `ddp.overlap_param_gather = False`"))[0] == FIELD_OTHER
    assert run_fields(rules, extract("`ddp.overlap_grad_reduce = True`"))[0] == FIELD_MISSING


@pytest.mark.parametrize("expected, got, result", [(True, "true", True), (True, "True", True), (1, "1", True), (True, 1, False), (134217728, 134217728.0, True), ("fsdp_dtensor", "fsdp_dtensor", True), ("torch.bfloat16", Name("torch.bfloat16"), True), (None, "null", True), ("x", Opaque("x"), False)])
def test_values_compare_across_forms(expected, got, result):
    assert same(expected, got) is result


def test_a_yaml_alias_bomb_is_left_as_text():
    bomb = "```yaml\na: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nddp:\n  use_megatron_fsdp: true\n```\n"
    assert extract(bomb).facts == []


def test_the_sections_are_those_of_the_installed_config_container():
    from runner.claims import install_te_placeholders, quiet

    install_te_placeholders()
    with quiet(stderr=True):
        from megatron.bridge.training.config import ConfigContainer
    installed = {f.name for f in dataclasses.fields(ConfigContainer) if not f.name.startswith("_")}
    assert installed == set(SECTIONS)


def test_each_allowed_constructor_is_the_installed_class_of_its_section():
    import importlib

    from runner.claims import install_te_placeholders, quiet
    from runner.core.bridge_names import CONFIG_PATH, CONSTRUCTORS, SETTABLE_SECTIONS

    install_te_placeholders()
    with quiet(stderr=True):
        from megatron.bridge.training.config import ConfigContainer
        hints = {f.name: f.type for f in dataclasses.fields(ConfigContainer)}
        for name, (module, section) in CONSTRUCTORS.items():
            if module is None:
                continue
            cls = getattr(importlib.import_module(module), name)
            assert dataclasses.is_dataclass(cls), name
            if section is not None:
                # the section's declared type names the class (a string annotation or the class)
                assert name in str(hints[section]), (name, section, hints[section])
    assert "model" not in SETTABLE_SECTIONS and "comm_overlap" in SETTABLE_SECTIONS
    assert CONFIG_PATH.match("ddp.bucket_size") and CONFIG_PATH.match("env.NCCL_NVLS_ENABLE") and CONFIG_PATH.match("comm_overlap")
    assert CONFIG_PATH.match("ddp") and not CONFIG_PATH.match("cfg.ddp.bucket_size") and not CONFIG_PATH.match("bucket_size")


@pytest.mark.parametrize(
    "table, expected",
    [
        ("| field | value |\n|---|---|\n| `model.moe_router_load_balancing_type` | `aux_loss` |\n", "aux_loss"),
        ("| Setting | Current | Change to |\n|---|---|---|\n| `cfg.model.moe_router_load_balancing_type` | `\"sinkhorn\"` | `\"aux_loss\"` (or `none`) |\n", "aux_loss"),
        ("| Setting | Your value | After validation | Condition |\n|---|---|---|---|\n| `cfg.model.moe_router_load_balancing_type` | `sinkhorn` | `aux_loss` | always |\n", None),
        ("| Setting | Current |\n|---|---|\n| `model.moe_router_load_balancing_type` | `sinkhorn` |\n", None),
    ],
)
def test_a_table_proposes_only_its_proposed_column(table, expected):
    found = extract("Here:\n\n" + table).about("model.moe_router_load_balancing_type")
    assert [f.value for f in found] == ([expected] if expected else [])


def test_includes_reads_a_fix_offered_in_prose_beside_code():
    answer = "```python\ncfg.model.mtp_num_layers = None\n```\nOr use `cfg.model.mtp_num_layers = 1`."
    assert run_fields((FieldRule("model.mtp_num_layers", "includes", 1),), extract(answer))[0] == FIELD_SET
    assert run_fields((FieldRule("model.mtp_num_layers", "equals", 1),), extract(answer))[0] == FIELD_OTHER
