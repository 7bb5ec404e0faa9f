"""Statistics for eval results (intervals, pass@k, paired comparisons, rater agreement),
used by calibration and the report. Standard library only; scipy checks them in the tests."""

from .measures import cohen_kappa, confusion_matrix, mcnemar_exact, paired_bootstrap, pass_at_k, pass_hat_k, precision_recall, sign_test, wilson_interval, wilson_over_clusters

__all__ = ["cohen_kappa", "confusion_matrix", "mcnemar_exact", "paired_bootstrap", "pass_at_k", "pass_hat_k", "precision_recall", "sign_test", "wilson_interval", "wilson_over_clusters"]
