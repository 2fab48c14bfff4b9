"""A fitted model on disk: one NetCDF DataTree with everything needed to use it again.

Layout of the file:

- ``/posterior``, ``/sample_stats``: the draws (nutpie's output);
- ``/fit_data``: the tidy table the model was fitted on (all rows, with ``excluded``);
- ``/groups``: the fitted groups (design columns, ``label``, scales);
- ``/decode_profile`` (fits with ``--decode-profile``): each group's decode-iteration time
  by batch size, NaN-padded (group x profile_point);
- root attributes: ``bayesspec_model``, ``bayesspec_model_version``, ``model_config``
  (JSON), ``model_id`` (hash), ``bayesspec_version``, ``bayesspec_fit_format``,
  ``sampler_settings`` (JSON), ``created``, and ``resolved_options`` (JSON: what each
  option left at "auto" resolved to on these data and why, e.g. the acceptance law).

Loading (:func:`bayesspec.bayes.load_fit`) refuses a file written by another model
version or fit format, so a posterior is never read with a meaning it was not fitted
under.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from bayesspec import _installed_version as _package_version
from bayesspec.data import row_group_labels
from bayesspec.errors import BadInput, FitFileError
from bayesspec.inference import (convergence_verdict, dataset_to_frame, frame_to_dataset,
                        record_variable_diagnostics, with_design_advice)
from bayesspec.outputs import atomic_path

FIT_FORMAT = "1"

# Group-selection options of the CLI and the group column each one matches.
SELECTORS = {"verifier": "verifier", "drafter": "drafter", "prefill": "prefill_tokens",
             "decode": "decode_tokens", "k": "k", "alpha": "alpha", "gpu": "gpu",
             "engine_version": "engine_version"}


def is_fit_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` looks like a fit file (an HDF5/netCDF-4 file, by its first bytes),
    as opposed to a data table."""
    try:
        with open(path, "rb") as handle:
            return handle.read(8) == b"\x89HDF\r\n\x1a\n"
    except OSError:
        return False


def _first_words(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters at a word boundary, marked when cut."""
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0].rstrip(" ,;:(=")
    return f"{cut} ..."


def _not_a_fit_file(path: Path) -> str:
    """Why a file that is not HDF5 is no fit file, and what to do: a data table (CSV or
    Parquet) is what `fit` makes a fit file from."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError as error:
        return f"cannot read: {error.strerror}"
    if not head.strip():
        return "empty file, not a fit file"
    if head.startswith(b"PAR1") or path.suffix.lower() in (".csv", ".parquet", ".pq") or (
            b"\x00" not in head and b"," in head.split(b"\n", 1)[0]):
        return (f"a data table, not a fit file: fit it first (`bayesspec fit {path.name} -o "
                "fit.nc`), then ask the fit file")
    return "not a fit file (a fit file is the NetCDF that `bayesspec fit -o` writes)"


def read_tree(path: str | os.PathLike) -> xr.DataTree:
    """A fit file's tree, checked to be a bayesspec fit of this fit format (which model
    made it, and whether this bayesspec has that model's version, is checked by the model
    classes: :func:`bayesspec.bayes.load_fit`)."""
    path = Path(path)
    if not path.exists():
        raise FitFileError("no such fit file", file=str(path))
    if not is_fit_file(path):
        raise FitFileError(_not_a_fit_file(path), file=str(path))
    try:
        tree = _open_tree(path)
    except Exception as error:
        text = str(error)
        if "truncated file" in text:
            raise FitFileError(f"the fit file is truncated ({path.stat().st_size} bytes): an "
                               "interrupted copy or write? copy it again, or refit",
                               file=str(path)) from None
        reason = _first_words(text.splitlines()[0], 80) if text else type(error).__name__
        raise FitFileError(f"not a readable fit file ({reason})", file=str(path)) from None
    attrs = tree.attrs
    if attrs.get("bayesspec_model") is None or "posterior" not in tree.children:
        raise FitFileError("not a bayesspec fit file (no model name or posterior)",
                           file=str(path))
    if attrs.get("bayesspec_fit_format") != FIT_FORMAT:
        raise FitFileError(f"fit format {attrs.get('bayesspec_fit_format')} is not "
                           f"supported by this bayesspec (format {FIT_FORMAT}); refit",
                           file=str(path))
    return tree


def _open_tree(path: Path) -> xr.DataTree:
    """The file's tree, read whole: with h5py directly (:mod:`bayesspec.inference.netcdf_read`, the
    same tree several times faster) when the file uses only what bayesspec writes, else
    with xarray, whose errors then name what is wrong with the file."""
    from bayesspec.inference.netcdf_read import read_datatree

    try:
        return read_datatree(path)
    except Exception:  # noqa: BLE001 - xarray reads it, or says why it cannot
        return _open_tree_with_xarray(path)


def _open_tree_with_xarray(path: Path) -> xr.DataTree:
    tree = xr.open_datatree(path, engine="h5netcdf")
    tree.load()
    return tree


def stacked_samples(values: xr.DataArray) -> np.ndarray:
    """The values of ``values.stack(sample=("chain", "draw"))``, samples last, without
    building its index (most of an answer's reading time where a law reads many
    variables): the same values in the same memory layout, so sums over draws add alike."""
    others = [d for d in values.dims if d not in ("chain", "draw")]
    data = values.transpose(*others, "chain", "draw").values
    return np.reshape(data, data.shape[:len(others)] + (-1,))


class Fit:
    """A posterior plus the data, groups and identity of the model that produced it.

    Made by a model's ``fit`` (:meth:`bayesspec.bayes.LatencyModel.fit`) or read back by
    :func:`bayesspec.bayes.load_fit`; answers through its model's prediction contract
    (:meth:`law`, :meth:`group_curve`)."""

    def __init__(self, tree: xr.DataTree, model, path: str | None = None):
        self.tree = tree
        self._model = model
        self.path = path

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_sampling(cls, model, data: pd.DataFrame, tree: xr.DataTree,
                      settings: dict | None = None) -> "Fit":
        inputs = model.inputs
        tree = tree.copy()
        data = data.copy()
        data["group"] = row_group_labels(data, inputs.groups)
        tree["fit_data"] = xr.DataTree(frame_to_dataset(data.reset_index(drop=True), "row"))
        tree["groups"] = xr.DataTree(frame_to_dataset(inputs.groups, "group"))
        if "profile_sizes" in inputs.extras:
            # each group's decode-iteration profile (NaN-padded; bayesspec.data.decode_profile),
            # so that the fit answers without the profile file
            tree["decode_profile"] = xr.DataTree(xr.Dataset({
                "batch_size": (("group", "profile_point"), inputs.extras["profile_sizes"]),
                "decode_iteration_s": (("group", "profile_point"),
                                       inputs.extras["profile_times"])}))
        if "setups" in inputs.extras:
            tree["setups"] = xr.DataTree(frame_to_dataset(inputs.extras["setups"], "setup_row"))
        tree.attrs.update({
            "bayesspec_model": model.name,
            "bayesspec_model_version": model.version,
            "model_config": json.dumps(model.config, sort_keys=True),
            "model_id": model.identity,
            "bayesspec_version": _package_version(),
            "bayesspec_fit_format": FIT_FORMAT,
            "sampler_settings": json.dumps(settings or {}, sort_keys=True, default=str),
            "source_file": str(data.attrs.get("source_file", "")),
            "model_record": json.dumps(model.recorded, sort_keys=True),
            # what each "auto" option became for these data (bayes.options)
            "resolved_options": json.dumps(getattr(model, "resolved", {}), default=str),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        })
        return cls(tree, model)

    # ---------------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike) -> None:
        """Write atomically: a temporary file in the same folder, then a rename."""
        path = Path(path)
        folder = path.parent if str(path.parent) else Path(".")
        if not folder.is_dir():
            raise BadInput("output folder does not exist", file=str(path))
        # the per-variable diagnostics go with the draws: answering from the file then
        # reads the verdict instead of importing ArviZ to recompute it
        record_variable_diagnostics(self.tree)
        with atomic_path(path) as temporary:
            self._writable_tree().to_netcdf(temporary, engine="h5netcdf")
        self.path = str(path)

    def _writable_tree(self) -> xr.DataTree:
        """Drop what NetCDF cannot hold (object-typed sampler messages)."""
        tree = self.tree.copy()
        for name in ("sample_stats", "warmup_sample_stats"):
            if name in tree.children:
                stats = tree[name].to_dataset()
                keep = [v for v in stats.data_vars if stats[v].dtype != object]
                tree[name] = xr.DataTree(stats[keep])
        return tree

    # ---------------------------------------------------------------- contents
    @property
    def model_name(self) -> str:
        return str(self.tree.attrs["bayesspec_model"])

    @property
    def model_config(self) -> dict:
        return json.loads(self.tree.attrs.get("model_config", "{}"))

    @property
    def auto_choices(self) -> dict:
        """What each option left at "auto" resolved to on the fitted data:
        {option: {"value": ..., "why": str}} ({} for fits that resolved none, or older
        files)."""
        return json.loads(self.tree.attrs.get("resolved_options", "{}") or "{}")

    @property
    def model_record(self) -> dict:
        """What the model's build recorded (e.g. prior centres from catalog cards)."""
        return json.loads(self.tree.attrs.get("model_record", "{}"))

    def model(self):
        """The model that made this fit (an instance of its class, with its config and
        what its build recorded)."""
        return self._model

    @cached_property
    def data(self) -> pd.DataFrame:
        return dataset_to_frame(self.tree["fit_data"].to_dataset())

    @cached_property
    def groups(self) -> pd.DataFrame:
        return dataset_to_frame(self.tree["groups"].to_dataset())

    @cached_property
    def setups(self) -> pd.DataFrame:
        """SD setups (verifier, drafter, lengths) of a speculative fit; empty otherwise."""
        if "setups" not in self.tree.children:
            return pd.DataFrame()
        return dataset_to_frame(self.tree["setups"].to_dataset())

    def decode_profile(self, group: int):
        """The group's decode-iteration profile (batch sizes, seconds per iteration), or
        None when the fit has none for it (``fit --decode-profile``)."""
        if "decode_profile" not in self.tree.children:
            return None
        from bayesspec.data.decode_profile import group_profile

        table = self.tree["decode_profile"].to_dataset()
        return group_profile(np.asarray(table["batch_size"].values, dtype=float),
                             np.asarray(table["decode_iteration_s"].values, dtype=float),
                             group)

    @property
    def posterior(self) -> xr.Dataset:
        return self.tree["posterior"].to_dataset()

    def draws(self, name: str, group: int | None = None, *,
              setup: int | None = None) -> np.ndarray:
        """Draws of a posterior variable, chains stacked first: shape (samples, ...)."""
        values = self.posterior[name]
        if group is not None:
            values = values.isel(group=group)
        if setup is not None:
            values = values.isel(setup=setup)
        return np.asarray(np.moveaxis(stacked_samples(values), -1, 0), dtype=float)

    @cached_property
    def diagnostics(self) -> dict:
        """The convergence verdict (:func:`bayesspec.inference.convergence_verdict`):
        decision quantities judged apart from the rest. The per-variable R-hat and ESS
        are computed once and kept in the tree's attrs (saved with the fit)."""
        record_variable_diagnostics(self.tree)
        model = self.model()
        return with_design_advice(convergence_verdict(self.tree, model.decision_variables()),
                                  self.data, getattr(model, "curve_parameters", 2))

    # ---------------------------------------------------------------- predictions
    def law(self, selection: dict | None = None, *, metric: str | None = None,
            admit_unmeasured: bool = True):
        """The :class:`~bayesspec.prediction.Law` of the setup the group options in
        ``selection`` name (the model's prediction contract); ``metric`` (e.g. "p99",
        "ttft_p99") asks for the law of a latency summary instead of the mean. Its
        ceilings admit a limit the data did not measure above each configuration's
        highest fitted rate (:mod:`bayesspec.prediction.ceilings`); ``admit_unmeasured``
        False gives the fitted law alone."""
        from bayesspec.prediction.ceilings import answering_law

        model = self.model()
        law = model.law(self, dict(selection or {}), metric=metric)
        if not admit_unmeasured:
            return law
        if metric is not None and not getattr(model, "has_mean", lambda _: True)(self):
            # the unmeasured limit is a batch of the mean law's; a fit of percentiles
            # alone has none, and its summaries answer with their own law's ceiling
            return law
        mean_law = None if metric is None else model.law(self, dict(selection or {}))
        return answering_law(self, law, mean_law)

    def group_curve(self, group: int, *, admit_unmeasured: bool = True):
        """One fitted group's :class:`~bayesspec.prediction.Curve`, its ceiling admitting
        a limit the data did not measure above its highest fitted rate (``admit_unmeasured``
        False: the fitted law alone)."""
        from bayesspec.prediction.ceilings import answering_curve

        curve = self.model().group_curve(self, group)
        return answering_curve(self, group, curve) if admit_unmeasured else curve

    def rps_measured_max(self, groups) -> float:
        """The highest rate the data reached in these groups (indices), saturated points
        included: what the server was actually seen to sustain."""
        labels = set(self.groups["label"].iloc[np.atleast_1d(groups)])
        rows = self.data.loc[self.data["group"].isin(labels), "rps"]
        return float(rows.max()) if len(rows) else float("nan")

    # ---------------------------------------------------------------- notebooks
    def __repr__(self) -> str:
        data = self.data
        excluded = int(data["excluded"].sum()) if "excluded" in data.columns else 0
        verdict = self.diagnostics
        status = "NOT CONVERGED" if not verdict["converged"] else verdict["status"]
        where = f" from {self.path}" if self.path else ""
        return (f"<bayesspec Fit{where}: {self.model_name} model, {len(self.groups)} groups, "
                f"{len(data)} rows ({excluded} set aside); {status}: R-hat max "
                f"{verdict['rhat_max']:.4g}, bulk ESS min {verdict['ess_bulk_min']:.4g}, "
                f"{verdict['divergences']} divergences>")

    def _repr_html_(self) -> str:
        import html

        verdict = self.diagnostics
        colour = "#b71c1c" if not verdict["converged"] else "#1b5e20"
        status = "NOT CONVERGED" if not verdict["converged"] else verdict["status"]
        data = self.data
        excluded = int(data["excluded"].sum()) if "excluded" in data.columns else 0
        head = (f"<p><b>bayesspec Fit</b>{' ' + html.escape(self.path) if self.path else ''}: "
                f"{html.escape(self.model_name)} model, {len(self.groups)} groups, {len(data)} "
                f"rows ({excluded} set aside); <b style=\"color:{colour}\">"
                f"{html.escape(status)}</b>: {html.escape(verdict['text'])}</p>")
        return head + self.summary().to_html(float_format=lambda v: f"{v:.4g}")

    def summary(self, prob: float = 0.9) -> pd.DataFrame:
        """Per fitted group: C1, C2 and the saturation rate 1/C2 (posterior median and the
        equal-tailed ``prob`` interval, the tool's default 0.9) and the highest rate
        measured; ``attrs`` hold the probability and the convergence verdict."""
        from bayesspec.reporting.summary import summary_document

        document = summary_document(self, prob=prob)
        rows = []
        for entry in document["groups"]:
            row = {"group": entry["label"]}
            for key in ("verifier", "drafter", "k", "alpha", "prefill_tokens",
                        "decode_tokens", "gpu", "engine_version"):
                if key in entry:
                    row[key] = entry[key]
            for name, key in (("C1", "C1"), ("C2", "C2"), ("saturation_rps", "saturation_rps")):
                u = entry[key]
                row.update({f"{name}": u["median"], f"{name}_lo": u["lo"],
                            f"{name}_hi": u["hi"]})
            row["rps_measured_max"] = entry["rps_measured_max"]
            rows.append(row)
        frame = pd.DataFrame(rows).set_index("group")
        frame.attrs.update(prob=prob, model=self.model_name,
                           convergence=document["convergence"]["text"])
        return frame

    def plot_collapse(self):
        """Every group on y = 1/(1 - x) (matplotlib Figure)."""
        from bayesspec.reporting.plots import collapse_plot

        return collapse_plot(self)

    def plot_groups(self, per_figure: int = 16) -> list:
        """Each group's data and fitted curve with its band (matplotlib Figures)."""
        from bayesspec.reporting.plots import group_fit_plots

        return group_fit_plots(self, per_figure=per_figure)

    def plot_speedup(self, alpha: float, ks=None, *, rps_max: float | None = None,
                     prob: float = 0.9, **selection):
        """Speedup of SD over dense decoding against the rate, bands for several k
        (default: the fitted ones), at acceptance ``alpha`` (matplotlib Figure);
        ``selection``: group options (verifier=, prefill=, decode=) when the fit holds
        several setups. Marked as ``speedup`` and ``crossover`` mark them: each k dashed
        past its own highest fitted rate (or throughout when not measured), an
        extrapolated RPS* hollow."""
        from bayesspec.reporting.plots import speedup_bands_plot

        law = self.law(selection)
        if ks is None:
            ks = sorted({int(k) for k in self.groups["k"] if int(k) > 0}) or [1, 2, 4]
        top = rps_max if rps_max is not None else fitted_top(law)
        return speedup_bands_plot(law, alpha, ks, rps_max=top, prob=prob)

    def plot_kstar(self, alphas=None, rps=None, **selection):
        """The best draft length k* over acceptance and rate (matplotlib Figure; needs
        the speculative model)."""
        from bayesspec.decisions import kstar_table
        from bayesspec.reporting.plots import kstar_map_plot

        law = self.law(selection)
        alphas = np.round(np.arange(0.5, 0.951, 0.05), 2) if alphas is None else alphas
        if rps is None:
            top = fitted_top(law)
            rps = np.linspace(top / 24, top, 24)
        return kstar_map_plot(kstar_table(law, alphas, rps))

    def plot_slo(self, targets: dict, rps=None, *, slo_prob: float = 0.9,
                 prob: float = 0.9, **selection):
        """Latency summaries against SLO targets, e.g. ``{"ttft_p99": 0.08}`` seconds
        (matplotlib Figure; needs the tails model)."""
        from bayesspec.decisions import slo_decision
        from bayesspec.reporting.plots import slo_plot

        mean_law = self.law(selection)
        laws = {metric: self.law(selection, metric=metric) for metric in targets}
        if rps is None:
            top = fitted_top(mean_law)
            rps = np.linspace(top / 12, top, 12)
        document = slo_decision(laws, mean_law, targets, rps, slo_prob=slo_prob, prob=prob)
        return slo_plot(laws, document, fit=self, prob=prob)

    # ---------------------------------------------------------------- groups
    def select_setup(self, **criteria) -> int:
        """Index of the single SD setup matching the criteria (k and alpha are ignored)."""
        criteria = {k: v for k, v in criteria.items() if k not in {"k", "alpha"}}
        return self.select_group(_table=self.setups, _label="setup", **criteria)

    def select_group(self, _table: pd.DataFrame | None = None, _label: str = "label",
                     **criteria) -> int:
        """Index of the single group matching the non-None criteria (CLI group options)."""
        groups = self.groups if _table is None else _table
        mask = np.ones(len(groups), dtype=bool)
        for option, value in criteria.items():
            if value is None:
                continue
            column = SELECTORS[option]
            if column not in groups.columns:
                raise BadInput(f"the fit has no '{column}' column", argument=option)
            mask &= _matches(groups[column], value)
        matches = np.flatnonzero(mask)
        if len(matches) == 1:
            return int(matches[0])
        labels = groups[_label].tolist()
        if len(matches) == 0:
            shown = "; ".join(labels[:8]) + (" ..." if len(labels) > 8 else "")
            raise BadInput(f"no fitted group matches the group options; groups: {shown}")
        varying = [option for option, column in SELECTORS.items()
                   if column in groups.columns
                   and groups.loc[mask, column].astype(str).nunique() > 1]
        shown = "; ".join(groups.loc[mask, _label].tolist()[:6])
        raise BadInput(f"{len(matches)} fitted groups match ({shown}{' ...' if len(matches) > 6 else ''});"
                       f" choose one with " + " ".join(f"--{o}" for o in varying))


def fitted_top(law) -> float:
    """The highest rate a setup's curves were fitted up to (else its dense ceiling)."""
    tops = [law.measured(None, 0)["rps_fitted_max"]]
    tops += [c.rps_fitted_max for c in law.measured_configurations]
    tops = [t for t in tops if np.isfinite(t)]
    return float(max(tops)) if tops else float(np.median(law.dense.ceiling))


def _matches(column: pd.Series, value) -> np.ndarray:
    if pd.api.types.is_numeric_dtype(column):
        try:
            number = float(value)
        except (TypeError, ValueError):
            return np.zeros(len(column), dtype=bool)
        return np.isclose(column.astype(float).to_numpy(), number, rtol=1e-9, atol=1e-12)
    text = str(value).strip().lower()
    return column.astype(str).str.strip().str.lower().eq(text).to_numpy()
