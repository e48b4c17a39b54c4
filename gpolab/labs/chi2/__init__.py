"""``gpolab chi2``: the χ² lab (:mod:`gpolab.labs.chi2.lab`), the weighted-χ² limit of n·Δ(θ_n)
under SGD with η_i = β/i ([U] arXiv 2603.01162, Thm 8)."""

from __future__ import annotations

from gpolab.kit.command import lab_command

# shown at the end of --help; tests/runner/test_help_examples.py parses and resolves each
EXAMPLES = ("gpolab chi2 --quick", "gpolab chi2 --estimator loo --G 8 --B 4 --seeds 2000")

register = lab_command(
    "chi2",
    help="asymptotic weighted chi-square law of the SGD suboptimality gap (2603.01162 Thm 8)",
    description="Run SGD (steps beta/i) on the Gaussian-policy testbed for many seeds and "
    "compare n*gap with its predicted limit sum_k w_k chi2_1: predicted weights and mean, "
    "empirical mean with a 95% CI, Kolmogorov-Smirnov test against the Imhof CDF.  Writes the "
    "results, samples and law tables (parquet and csv), config.toml, chi2_qq.png and chi2_ecdf.png "
    "to --out.  Seeds are split over one CPU device per core (GPOLAB_CPU_DEVICES sets the count).",
)
