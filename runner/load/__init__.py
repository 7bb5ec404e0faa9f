"""Stage 1, load: the bundle, its skills and eval cases, the checks sidecars and the
labelled answers, read from disk with every value traceable to a file and line.
Nothing here asks a model or imports torch."""

from .bundle import SOURCE_CHECKOUT, bundle_cases, bundle_files, changed_files, fingerprint, resolve_bundle, select_cases
from .cases import AGENTSKILLS, FLAT, MAX_CASE_FILE_BYTES, Behaviour, Case, EvalsFile, case_files, check_case_file, files_root, load_cases, read_evals
from .census import CENSUS_DIR, Census, draw_heldout, load_census
from .admissions import ADMISSIONS, ADMIT_MIN_DECIDED, ADMIT_PRECISION, ROUNDS, Admissions, load_admissions, meets_bar
from .checks import Check, FieldRule, Scenario, load_checks, read_checks, sidecar_for
from .labelled import DEV, HELD_OUT, TRAINING, Labelled, load_labelled, require_labels
from .parsing import Located, SkillDocument, load_json, load_yaml, read_text, split_frontmatter
from .skills import CARD_FILE, EVALS_FILE, PRIVATE_DIRS, SKILL_FILE, Bundle, Skill, find_bundle, is_bundle, is_skill, load_skill, owning_skill_root

__all__ = [
    "CENSUS_DIR",
    "Census",
    "draw_heldout",
    "load_census",
    "AGENTSKILLS",
    "Behaviour",
    "Bundle",
    "CARD_FILE",
    "Case",
    "ADMISSIONS",
    "ADMIT_MIN_DECIDED",
    "ADMIT_PRECISION",
    "meets_bar",
    "ROUNDS",
    "Admissions",
    "load_admissions",
    "Check",
    "FieldRule",
    "Scenario",
    "EVALS_FILE",
    "PRIVATE_DIRS",
    "EvalsFile",
    "FLAT",
    "DEV",
    "HELD_OUT",
    "Labelled",
    "TRAINING",
    "Located",
    "SKILL_FILE",
    "SOURCE_CHECKOUT",
    "Skill",
    "SkillDocument",
    "MAX_CASE_FILE_BYTES",
    "bundle_cases",
    "bundle_files",
    "changed_files",
    "case_files",
    "check_case_file",
    "files_root",
    "find_bundle",
    "fingerprint",
    "is_bundle",
    "is_skill",
    "load_cases",
    "load_checks",
    "load_json",
    "load_labelled",
    "load_skill",
    "load_yaml",
    "owning_skill_root",
    "read_checks",
    "read_evals",
    "read_text",
    "require_labels",
    "resolve_bundle",
    "select_cases",
    "sidecar_for",
    "split_frontmatter",
]
