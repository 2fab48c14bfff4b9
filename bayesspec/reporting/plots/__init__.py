"""Figures. Each function takes a Fit (or a decision document), draws with matplotlib
(Agg) and returns the Figure; plotting never happens inside the models, and
:func:`save_figure` writes atomically.

One module per subject: :mod:`~bayesspec.reporting.plots.common` (saving, bands, the
colour of each draft length, the conventions every figure follows),
:mod:`~bayesspec.reporting.plots.fits` (a fitted law against its data),
:mod:`~bayesspec.reporting.plots.concurrency` (a closed-loop sweep on its concurrency axis),
:mod:`~bayesspec.reporting.plots.speculative` (speedup, cost ratios, the k* map),
:mod:`~bayesspec.reporting.plots.checks` (SBC, hold-out, posterior predictive check),
:mod:`~bayesspec.reporting.plots.compare` (two fits), :mod:`~bayesspec.reporting.plots.slo`
and :mod:`~bayesspec.reporting.plots.acceptance`. Every figure is importable from here.
"""

from bayesspec.reporting.plots.common import (BAND_PROB, FITTED_LABEL, FITTED_STYLE,
                                              K_ZERO_COLOUR, MEASURED_LABEL, MEASURED_STYLE,
                                              figure_png, k_colour, save_figure)
from bayesspec.reporting.plots.acceptance import acceptance_plot
from bayesspec.reporting.plots.checks import holdout_plot, predictive_check_plot, sbc_ecdf_plot
from bayesspec.reporting.plots.compare import compare_forest_plot
from bayesspec.reporting.plots.concurrency import closed_loop_groups, concurrency_plot
from bayesspec.reporting.plots.fits import (collapse_plot, expert_coverage_plot,
                                            group_fit_plots, joint_vs_per_config_plot,
                                            moe_low_load_plot)
from bayesspec.reporting.plots.slo import slo_plot
from bayesspec.reporting.plots.speculative import (cost_ratio_plot, kstar_map_plot,
                                                   speedup_bands_plot)

__all__ = ["BAND_PROB", "FITTED_LABEL", "FITTED_STYLE", "K_ZERO_COLOUR", "MEASURED_LABEL",
           "MEASURED_STYLE", "figure_png",
           "k_colour", "save_figure", "acceptance_plot", "holdout_plot",
           "predictive_check_plot", "sbc_ecdf_plot", "compare_forest_plot", "collapse_plot",
           "closed_loop_groups", "concurrency_plot",
           "expert_coverage_plot", "group_fit_plots", "joint_vs_per_config_plot",
           "moe_low_load_plot", "slo_plot", "cost_ratio_plot", "kstar_map_plot",
           "speedup_bands_plot"]
