"""Statistics for eval results (intervals, pass@k, paired comparisons, rater agreement,
clustered errors, power and multiplicity), used by calibration, the report and `plan`.
Standard library only; scipy checks them in the tests."""

from .design import Clustered, Components, Plan, benjamini_hochberg, cases_needed, clustered_mean, detection_probability, holm, minimum_detectable_effect, plan, planned_sd_difference, variance_components
from .measures import cohen_kappa, confusion_matrix, mcnemar_exact, paired_bootstrap, pass_at_k, pass_hat_k, precision_recall, sign_test, wilson_interval, wilson_over_clusters

__all__ = [
    "Clustered",
    "Components",
    "Plan",
    "benjamini_hochberg",
    "cases_needed",
    "clustered_mean",
    "cohen_kappa",
    "confusion_matrix",
    "detection_probability",
    "holm",
    "mcnemar_exact",
    "minimum_detectable_effect",
    "paired_bootstrap",
    "pass_at_k",
    "pass_hat_k",
    "plan",
    "planned_sd_difference",
    "precision_recall",
    "sign_test",
    "variance_components",
    "wilson_interval",
    "wilson_over_clusters",
]
