"""The Transformer Engine placeholder: intercepts exactly two modules, hides nothing else.

Runs in a fresh interpreter so that sys.meta_path changes do not leak into other tests.
"""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

PROBE = r"""
import importlib, sys
from runner.claims.environment import TE_ONLY_MODULES, NeedsTransformerEngine, install_te_placeholders
assert install_te_placeholders() is True
assert install_te_placeholders() is True  # idempotent
finders = [f for f in sys.meta_path if type(f).__name__ == "_PlaceholderFinder"]
assert len(finders) == 1, finders
assert finders[0].names == TE_ONLY_MODULES  # the pinned release: exactly the two
lora = importlib.import_module("megatron.bridge.peft.lora_layers")
try:
    lora.LoRALinear(1, 2)
except NeedsTransformerEngine as e:
    print("USE_RAISES", e)
try:
    class Sub(lora.LoRALinear):
        pass
except NeedsTransformerEngine:
    print("SUBCLASS_RAISES")
try:
    importlib.import_module("megatron.bridge.no_such_module_xyz")
except ModuleNotFoundError:
    print("OTHER_ERRORS_SURFACE")
from megatron.bridge.training import comm_overlap
print("HAVE_TE", comm_overlap.HAVE_TE)
print("MODULES", sorted(TE_ONLY_MODULES))
"""


def test_placeholders_only_cover_the_two_te_modules():
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=REPO, timeout=300)
    out = result.stdout
    assert result.returncode == 0, result.stderr[-2000:]
    assert "USE_RAISES megatron.bridge.peft.lora_layers.LoRALinear needs Transformer Engine" in out
    assert "SUBCLASS_RAISES" in out and "OTHER_ERRORS_SURFACE" in out
    assert "HAVE_TE False" in out


def test_skill_scripts_carry_the_same_module_list():
    from runner.claims.environment import TE_ONLY_MODULES
    import importlib.util

    for script in sorted(REPO.glob("skills/*/scripts/*.py")):
        spec = importlib.util.spec_from_file_location(f"probe_{script.stem}", script)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        assert module._TE_ONLY_MODULES == TE_ONLY_MODULES, script


def test_older_releases_get_the_further_modules_they_import_te_in():
    # Found with `mbskills drift`: 0.5.x imports TE at the top of two more modules.
    from importlib.metadata import version

    from runner.claims.environment import TE_ONLY_MODULES, te_only_modules

    assert te_only_modules("0.6.2") == te_only_modules("0.6.0") == TE_ONLY_MODULES
    for release in ("0.5.0", "0.5.1"):
        assert te_only_modules(release) == TE_ONLY_MODULES | {"megatron.bridge.peft.lora", "megatron.bridge.diffusion.models.wan.utils"}
    assert te_only_modules() == te_only_modules(version("megatron-bridge"))


def test_a_placeholder_module_has_no_dunder_placeholders():
    # tools that walk sys.modules (Hypothesis, coverage, debuggers) read __file__ and the like
    import types

    from runner.claims.environment import _module_getattr

    module = types.ModuleType("fake.te")
    module.__getattr__ = _module_getattr("fake.te")
    assert getattr(module, "__file__", None) is None and not hasattr(module, "__path__")
    assert type(module.Linear).__name__ == "_Placeholder"
