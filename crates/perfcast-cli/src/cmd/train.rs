//! `perfcast train` and `perfcast eval`: fit regressors per module kind, score them, save them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use perfcast_core::{Metrics, ModuleKind, Phase};
use perfcast_data::DatasetDir;
use perfcast_data::outdir::{self, OutputKind};
use perfcast_models::eval::{
    ModelParams, PredictionCost, Split, cross_validate, holdout, kfold, prediction_cost, score,
};
use perfcast_models::{Regressor, SavedModel, TrainSet};
use serde::{Deserialize, Serialize};

use crate::Ui;
use crate::output::{Format, emit, emit_json, progress, sig3};
use crate::plot;

/// Arguments of `perfcast train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Dataset directory (one device: `device.json` + `<module>.parquet`); several, or a
    /// folder of them (`datasets/neusight`), train across devices: every family reads the
    /// device's spec and learns the roofline-normalised latency (`<family>-xdev`)
    #[arg(long, required = true, num_args = 1..)]
    data: Vec<PathBuf>,
    /// Model families, comma-separated: ridge, knn, trees, roofline, ridge-trees (trees on
    /// ridge's residuals), medn (multi-task encoder-decoder network), mlp (single-task MLP of
    /// the same size)
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ridge,knn,trees,roofline"
    )]
    models: Vec<String>,
    /// Output directory for the fitted models and the report
    #[arg(long)]
    out: PathBuf,
    /// Module kinds to train (default: every kind in the dataset)
    #[arg(long, value_delimiter = ',')]
    modules: Vec<ModuleKind>,
    /// Folds of the cross-validation on the training part
    #[arg(long, default_value_t = 5)]
    folds: usize,
    /// How rows are split: `random` rows, or whole configuration `group`s
    #[arg(long, default_value = "random")]
    split: Split,
    /// Share of rows (or groups) held out for the final test
    #[arg(long, default_value_t = 0.2)]
    test_share: f64,
    /// Seed of the splits
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Set a hyper-parameter, e.g. `--set trees.n_trees=600 --set ridge.degree=1` (repeatable)
    #[arg(long = "set", value_name = "MODEL.FIELD=VALUE")]
    set: Vec<String>,
    /// Replace an existing output directory
    #[arg(long)]
    force: bool,
    /// Auto-select a model per kind and write a bundle: a name (`checkpoints/<name>/`) or a
    /// directory path
    #[arg(long, value_name = "NAME|DIR")]
    bundle: Option<String>,
    /// Selection: largest one-row prediction time accepted, microseconds
    #[arg(long, value_name = "US")]
    max_predict_us: Option<f64>,
    /// Selection: largest model size accepted, KiB
    #[arg(long, value_name = "KB")]
    max_model_kb: Option<f64>,
    /// Selection: weight of prediction cost against accuracy; 0 picks the most accurate within
    /// the budgets; with the default 0.1 each doubling of prediction time must buy 10% lower
    /// MAPE
    #[arg(long, default_value_t = 0.1)]
    cost_weight: f64,
    /// Selection: use this model family for every kind (single selection, for comparison)
    #[arg(long, value_name = "MODEL")]
    select_only: Option<String>,
    /// Rows of which phase to train on: `inference` trains forward models only, and a GPU
    /// bundle then composes training steps from forward kernels (as NeuSight does)
    #[arg(long, value_enum, default_value_t)]
    phase: crate::cmd::devices_eval::PhaseChoice,
    /// Leave out the tables `perfcast datasets check` flags (a device whose linear and bmm
    /// GEMM efficiencies disagree beyond what the other devices show); by default they are
    /// reported and kept: leaving out the Tesla P4's linear table made the util model worse on
    /// every other NVIDIA GPU left out (T4 24.9 -> 36.1%)
    #[arg(long)]
    exclude_flagged: bool,
    /// Output format of the report
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// One model's results on one module kind.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelReport {
    /// Family.
    pub model: String,
    /// Cross-validated metrics on the training part.
    pub cv: Metrics,
    /// Metrics on the held-out part.
    pub test: Metrics,
    /// Held-out MAPE per phase, percent.
    pub test_mape_by_phase: BTreeMap<String, f64>,
    /// Cross-validated MAPE per phase (every training row predicted once, by the fold that
    /// held it out), percent: steadier than the held-out figure on small data.
    #[serde(default)]
    pub cv_mape_by_phase: BTreeMap<String, f64>,
    /// Prediction cost.
    pub cost: PredictionCost,
    /// Saved model file, relative to the output directory.
    pub file: String,
}

/// Results on one module kind.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KindReport {
    /// Kind.
    pub kind: ModuleKind,
    /// Training rows, held-out rows.
    pub rows: (usize, usize),
    /// Per model.
    pub models: Vec<ModelReport>,
    /// The model with the lowest held-out MAPE.
    pub best: String,
}

/// The whole report (`report.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainReport {
    /// Dataset trained on.
    pub data: PathBuf,
    /// Device name.
    pub device: String,
    /// Split and folds.
    pub split: Split,
    /// Folds.
    pub folds: usize,
    /// Held-out share.
    pub test_share: f64,
    /// Per kind.
    pub kinds: Vec<KindReport>,
    /// One network shared by every kind against one per kind, for each neural family trained
    /// (only when several kinds were trained).
    #[serde(default)]
    pub shared: Vec<SharedReport>,
    /// Auto-selection and the bundle written, with `--bundle`.
    #[serde(default)]
    pub selection: Option<SelectionReport>,
    /// Tables `perfcast datasets check` flagged: device, kind, whether left out.
    #[serde(default)]
    pub flagged: Vec<FlaggedTable>,
}

/// A dataset table the consistency check flagged.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlaggedTable {
    /// Device name.
    pub device: String,
    /// The table's kind.
    pub kind: ModuleKind,
    /// What the check found.
    pub why: String,
    /// Whether training left it out (`--exclude-flagged`).
    pub excluded: bool,
}

/// What auto-selection chose and how it compares with one family everywhere.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SelectionReport {
    /// Bundle directory written.
    pub bundle: PathBuf,
    /// Per kind: the choice and why.
    pub kinds: Vec<KindSelection>,
    /// Held-out metrics over every kind's rows pooled, with the chosen models.
    pub overall: Metrics,
    /// Mean one-row prediction time of the chosen models, microseconds.
    pub mean_predict_us: f64,
    /// Total size of the chosen models, bytes.
    pub total_size_bytes: usize,
    /// The same figures with one family for every kind (each family trained on every kind).
    pub single: Vec<SingleSelection>,
}

/// One kind's selection.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KindSelection {
    /// Kind.
    pub kind: ModuleKind,
    /// Chosen family, Pareto front and why.
    pub selection: perfcast_select::Selection,
    /// Held-out MAPE of the chosen model, percent.
    pub test_mape: f64,
}

/// Overall figures of one family used for every kind.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SingleSelection {
    /// Family.
    pub model: String,
    /// Held-out metrics over every kind's rows pooled.
    pub overall: Metrics,
    /// Mean one-row prediction time, microseconds.
    pub mean_predict_us: f64,
    /// Total size, bytes.
    pub total_size_bytes: usize,
}

/// Held-out MAPE of a neural family fitted once per kind and once for all kinds together.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SharedReport {
    /// Family (`medn` or `mlp`).
    pub model: String,
    /// Module kind.
    pub kind: ModuleKind,
    /// Held-out MAPE of the per-kind network, percent.
    pub per_kind_mape: f64,
    /// Held-out MAPE of the shared network, percent.
    pub shared_mape: f64,
}

fn phase_mapes(data: &TrainSet, pred: &[f64]) -> BTreeMap<String, f64> {
    let idx = data.schema.index("training");
    let mut out = BTreeMap::new();
    for phase in [Phase::Inference, Phase::Training] {
        let want = f64::from(u8::from(phase == Phase::Training));
        let (p, t): (Vec<f64>, Vec<f64>) = data
            .x
            .iter_rows()
            .zip(pred.iter().zip(&data.y))
            .filter(|(r, _)| idx.is_some_and(|i| r[i] == want))
            .map(|(_, (p, t))| (*p, *t))
            .unzip();
        if let Some(m) = Metrics::compute(&p, &t) {
            out.insert(phase.name().to_string(), m.mape);
        }
    }
    out
}

pub fn train(args: TrainArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    let params: Vec<ModelParams> = args
        .models
        .iter()
        .map(|m| ModelParams::by_name(m))
        .collect::<Result<_, _>>()?;
    let params = apply_overrides(params, &args.set)?;
    let budget = perfcast_select::Budget {
        max_predict_us: args.max_predict_us,
        max_model_kb: args.max_model_kb,
        cost_weight: args.cost_weight,
        only: args.select_only.clone(),
    };
    budget.validate()?;
    anyhow::ensure!(!params.is_empty(), "`--models` is empty");
    // Checked before any training: `--out` and `--bundle` replace only perfcast outputs of
    // their kind, never a folder holding the input data or each other (issue 21).
    let inputs: Vec<&std::path::Path> = args.data.iter().map(PathBuf::as_path).collect();
    outdir::check_destination(&args.out, OutputKind::Models, args.force, &inputs)?;
    if let Some(name) = &args.bundle {
        let bundle = bundle_dir(name);
        let mut taken = inputs.clone();
        taken.push(&args.out);
        outdir::check_destination(&bundle, OutputKind::Bundle, true, &taken)?;
    }
    let mut source = crate::cmd::devices_eval::TrainSource::open(&args.data)?;
    source.phase = args.phase.phase();
    let flagged = if source.cross_device() {
        source.flagged()?
    } else {
        Vec::new()
    };
    for (device, kind, why) in &flagged {
        ui.info(format!(
            "data check: `{device}` {kind} table flagged ({why}): {}",
            if args.exclude_flagged {
                "left out"
            } else {
                "kept (--exclude-flagged leaves it out)"
            }
        ));
    }
    if args.exclude_flagged {
        source.excluded = flagged.iter().map(|(d, k, _)| (d.clone(), *k)).collect();
    }
    let device = source.device.clone();
    let params = source.params(params);
    let present = source.kinds();
    anyhow::ensure!(
        !present.is_empty(),
        "`{}` holds no module tables",
        source.label()
    );
    let kinds = if args.modules.is_empty() {
        present.clone()
    } else {
        args.modules.clone()
    };
    if let Some(missing) = kinds.iter().find(|k| !present.contains(k)) {
        let names: Vec<&str> = present.iter().map(|k| k.name()).collect();
        anyhow::bail!(
            "`{}` has no `{missing}` table (it has: {})",
            source.label(),
            names.join(", ")
        );
    }

    // Everything is written into a temp directory beside `--out`, swapped into place at the end:
    // a failed or killed run leaves no partial model directory (and the next run removes its
    // staging directory).
    let staging = outdir::stage_beside(&args.out, "train")?;

    // One bar over (kind, model) pairs, and one the neural models fill with epochs, loss and
    // validation MAPE while they train.
    let bars = indicatif::MultiProgress::new();
    let bar = bars.add(progress(ui, (kinds.len() * params.len()) as u64, "train"));
    let epoch_bar = bars.add(progress(ui, 0, "epochs"));
    let mut params = params;
    for p in &mut params {
        p.set_progress(&epoch_bar);
    }
    let mut reports = Vec::new();
    let mut splits = Vec::new();
    // Per model file: the saved model and its held-out predictions (for selection and pooled
    // figures across kinds).
    let mut fitted_models: BTreeMap<String, (SavedModel, Vec<f64>)> = BTreeMap::new();
    for kind in kinds {
        let data = source.train_set(kind)?;
        // A kind with a handful of rows (e.g. added by `measure --layers-into`) cannot be
        // cross-validated; when kinds were not named, skip it rather than fail the whole run.
        // (Too few rows for many requested folds stays an error: the user asked for them.)
        let min_rows = MIN_ROWS_PER_FOLD * 2;
        if args.modules.is_empty() && data.y.len() < min_rows {
            ui.info(format!(
                "warning: skipping `{kind}`: {} rows, training needs at least {min_rows}",
                data.y.len()
            ));
            bar.inc(params.len() as u64);
            continue;
        }
        let (train_idx, test_idx) = holdout(&data, args.test_share, args.split, args.seed)
            .with_context(|| format!("splitting `{}`", source.path(kind)))?;
        let train_set = data.select(&train_idx);
        let test_set = data.select(&test_idx);
        std::fs::create_dir_all(staging.path().join(kind.name()))?;
        let mut models = Vec::new();
        let mut scatter = Vec::new();
        let mut cdfs = Vec::new();
        for p in &params {
            bar.set_message(format!("{kind}: {}", p.name()));
            let cv = cross_validate(p, &train_set, args.folds, args.split, args.seed)
                .with_context(|| {
                    format!("cross-validating {} on `{}`", p.name(), source.path(kind))
                })?;
            let model = p.fit(&train_set)?;
            let test = score(model.as_ref(), &test_set)?;
            let pred = model.predict(&test_set.x)?;
            let cost = prediction_cost(model.as_ref(), &test_set)?;
            scatter.push(plot::Series {
                name: p.name().to_string(),
                points: test_set
                    .y
                    .iter()
                    .copied()
                    .zip(pred.iter().copied())
                    .collect(),
            });
            cdfs.push(plot::Series {
                name: format!("{} (MAPE {}%)", p.name(), sig3(test.mape)),
                points: plot::error_cdf(&pred, &test_set.y),
            });
            let file = format!("{}/{}.json", kind.name(), p.name());
            let saved = model.to_saved();
            if let perfcast_models::SavedModel::Medn(m) | perfcast_models::SavedModel::Mlp(m) =
                &saved
            {
                use perfcast_models::medn::MednCheckpoint;
                // The burn checkpoint (config, normalisers, records) beside the fast-path JSON.
                m.save_checkpoint(&staging.path().join(kind.name()).join(p.name()))?;
            }
            let json = serde_json::to_vec(&saved)?;
            perfcast_data::write_atomic(&staging.path().join(&file), &json)?;
            fitted_models.insert(file.clone(), (saved, pred.clone()));
            models.push(ModelReport {
                model: p.name().to_string(),
                cv: cv.pooled,
                test_mape_by_phase: phase_mapes(&test_set, &pred),
                cv_mape_by_phase: phase_mapes(&train_set, &cv.predictions),
                test,
                cost,
                file,
            });
            bar.inc(1);
        }
        // The held-out rows with every model's prediction, for looking into errors.
        let mut csv = test_set.schema.names.join(",");
        csv.push_str(",measured_ms");
        for series in &scatter {
            csv.push_str(&format!(",{}_ms", series.name));
        }
        csv.push('\n');
        for (i, row) in test_set.x.iter_rows().enumerate() {
            let cells: Vec<String> = row.iter().map(|v| v.to_string()).collect();
            csv.push_str(&cells.join(","));
            csv.push_str(&format!(",{}", test_set.y[i]));
            for series in &scatter {
                csv.push_str(&format!(",{}", series.points[i].1));
            }
            csv.push('\n');
        }
        perfcast_data::write_atomic(
            &staging.path().join(kind.name()).join("heldout.csv"),
            csv.as_bytes(),
        )?;
        let title = format!("{kind} on {}: held-out rows", device.name);
        let plots = staging.path().join("plots");
        std::fs::create_dir_all(&plots)?;
        let charts = [
            (
                "predicted-vs-measured",
                plot::Chart {
                    title: &title,
                    x_label: "measured (ms)",
                    y_label: "predicted (ms)",
                    series: &scatter,
                    log: (true, true),
                    scatter: true,
                    diagonal: true,
                },
            ),
            (
                "error-cdf",
                plot::Chart {
                    title: &title,
                    x_label: "absolute percentage error (%)",
                    y_label: "share of rows (%)",
                    series: &cdfs,
                    log: (true, false),
                    scatter: false,
                    diagonal: false,
                },
            ),
        ];
        for (name, chart) in &charts {
            perfcast_data::write_atomic(
                &plots.join(format!("{kind}-{name}.svg")),
                chart.svg().as_bytes(),
            )?;
            perfcast_data::write_atomic(&plots.join(format!("{kind}-{name}.png")), &chart.png()?)?;
        }
        let best = models
            .iter()
            .min_by(|a, b| a.test.mape.total_cmp(&b.test.mape))
            .map(|m| m.model.clone())
            .unwrap_or_default();
        reports.push(KindReport {
            kind,
            rows: (train_set.len(), test_set.len()),
            models,
            best,
        });
        splits.push((train_set, test_set));
    }
    anyhow::ensure!(
        !reports.is_empty(),
        "every module kind of the data has fewer than {} rows; nothing to train",
        MIN_ROWS_PER_FOLD * 2
    );
    // One network shared by every kind: cross-validated on the same folds as the per-kind
    // models, so it competes in selection as `<family>-shared`.
    let mut shared = Vec::new();
    if splits.len() > 1 {
        for p in &params {
            let ModelParams::Medn(medn) = p else { continue };
            let family = format!("{}-shared", p.name());
            bar.set_message(format!("{family}: one network for every kind"));
            let folds: Vec<_> = splits
                .iter()
                .map(|(t, _)| kfold(t, args.folds, args.split, args.seed))
                .collect::<Result<_, _>>()?;
            let mut cv_pred: Vec<Vec<f64>> = splits
                .iter()
                .map(|(t, _)| vec![f64::NAN; t.len()])
                .collect();
            for f in 0..args.folds {
                let sets: Vec<TrainSet> = splits
                    .iter()
                    .zip(&folds)
                    .map(|((t, _), fo)| t.select(&fo[f].0))
                    .collect();
                let fitted = medn.fit_shared(&sets)?;
                for (((model, (t, _)), fo), pred) in
                    fitted.iter().zip(&splits).zip(&folds).zip(&mut cv_pred)
                {
                    let test = t.select(&fo[f].1);
                    for (&i, v) in fo[f].1.iter().zip(model.predict(&test.x)?) {
                        pred[i] = v;
                    }
                }
            }
            let train_sets: Vec<TrainSet> = splits.iter().map(|(t, _)| t.clone()).collect();
            let fitted = medn.fit_shared(&train_sets)?;
            for (((model, (train_set, test_set)), kind_report), cv) in
                fitted.iter().zip(&splits).zip(&mut reports).zip(&cv_pred)
            {
                let kind = kind_report.kind;
                let per_kind = kind_report
                    .models
                    .iter()
                    .find(|m| m.model == p.name())
                    .map_or(f64::NAN, |m| m.test.mape);
                let test = score(model, test_set)?;
                let pred = model.predict(&test_set.x)?;
                shared.push(SharedReport {
                    model: p.name().to_string(),
                    kind,
                    per_kind_mape: per_kind,
                    shared_mape: test.mape,
                });
                let file = format!("{}/{family}.json", kind.name());
                let saved = model.to_saved();
                perfcast_data::write_atomic(
                    &staging.path().join(&file),
                    &serde_json::to_vec(&saved)?,
                )?;
                fitted_models.insert(file.clone(), (saved, pred.clone()));
                kind_report.models.push(ModelReport {
                    model: family.clone(),
                    cv: Metrics::compute(cv, &train_set.y)
                        .ok_or_else(|| anyhow::anyhow!("no cross-validated predictions"))?,
                    test_mape_by_phase: phase_mapes(test_set, &pred),
                    cv_mape_by_phase: phase_mapes(train_set, cv),
                    test,
                    cost: prediction_cost(model, test_set)?,
                    file,
                });
                if let Some(best) = kind_report
                    .models
                    .iter()
                    .min_by(|a, b| a.test.mape.total_cmp(&b.test.mape))
                {
                    kind_report.best = best.model.clone();
                }
            }
        }
    }
    bar.finish_and_clear();
    let report = TrainReport {
        data: PathBuf::from(source.label()),
        device: device.name.clone(),
        split: args.split,
        folds: args.folds,
        test_share: args.test_share,
        kinds: reports,
        shared,
        selection: None,
        flagged: flagged
            .into_iter()
            .map(|(device, kind, why)| FlaggedTable {
                device,
                kind,
                why,
                excluded: args.exclude_flagged,
            })
            .collect(),
    };
    let mut report = report;
    if let Some(name) = &args.bundle {
        let dir = bundle_dir(name);
        report.selection = Some(write_selected_bundle(
            &report,
            &splits,
            &fitted_models,
            &budget,
            &dir,
            (
                &device,
                if source.cross_device() {
                    &source.devices
                } else {
                    &[]
                },
            ),
            name,
        )?);
    }
    perfcast_data::write_atomic(
        &staging.path().join("report.json"),
        &serde_json::to_vec_pretty(&report)?,
    )?;
    outdir::mark(staging.path(), OutputKind::Models)?;
    outdir::replace_with(staging, &args.out)?;

    match args.format {
        Format::Json => emit_json(&report)?,
        Format::Text => emit(&render(&report, &args.out))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Applies `model.field=value` overrides through the parameters' serde form, so unknown fields
/// and bad values are refused by the same checks as a config file.
fn apply_overrides(params: Vec<ModelParams>, sets: &[String]) -> anyhow::Result<Vec<ModelParams>> {
    Ok(params
        .iter()
        .map(|p| p.with_sets(sets))
        .collect::<Result<_, _>>()?)
}

/// `checkpoints/<name>` for a bare name, the path itself otherwise.
pub fn bundle_dir(name: &str) -> PathBuf {
    if name.contains('/') || name.contains(std::path::MAIN_SEPARATOR) {
        PathBuf::from(name)
    } else {
        Path::new("checkpoints").join(name)
    }
}

/// Selects a model per kind from the report's candidates and writes the bundle.
fn write_selected_bundle(
    report: &TrainReport,
    splits: &[(TrainSet, TrainSet)],
    fitted: &BTreeMap<String, (SavedModel, Vec<f64>)>,
    budget: &perfcast_select::Budget,
    dir: &Path,
    (device, trained_devices): (&perfcast_core::DeviceSpec, &[perfcast_core::DeviceSpec]),
    name: &str,
) -> anyhow::Result<SelectionReport> {
    use perfcast_select::bundle::{FORMAT, KindEntry, Manifest, feature_ranges, write_bundle};
    let candidates = |k: &KindReport| -> Vec<perfcast_select::Candidate> {
        k.models
            .iter()
            .map(|m| perfcast_select::Candidate {
                model: m.model.clone(),
                cv_mape: m.cv.mape,
                test_mape: m.test.mape,
                predict_us: m.cost.one_row_us,
                size_bytes: m.cost.size_bytes,
            })
            .collect()
    };
    let mut entries = BTreeMap::new();
    let mut files = Vec::new();
    let mut kinds = Vec::new();
    for (k, (train_set, _)) in report.kinds.iter().zip(splits) {
        let cands = candidates(k);
        let selection = perfcast_select::select::select(k.kind.name(), &cands, budget)?;
        let chosen = k
            .models
            .iter()
            .find(|m| m.model == selection.chosen)
            .ok_or_else(|| anyhow::anyhow!("selected `{}` has no report", selection.chosen))?;
        let (model, _) = fitted
            .get(&chosen.file)
            .ok_or_else(|| anyhow::anyhow!("selected `{}` was not saved", chosen.file))?;
        entries.insert(
            k.kind.name().to_string(),
            KindEntry {
                chosen: selection.chosen.clone(),
                file: chosen.file.clone(),
                schema_hash: format!("{:016x}", train_set.schema.hash()),
                rows: train_set.len(),
                candidates: cands,
                selection: selection.clone(),
                ranges: feature_ranges(train_set),
            },
        );
        files.push((chosen.file.clone(), model.clone()));
        kinds.push(KindSelection {
            kind: k.kind,
            selection,
            test_mape: chosen.test.mape,
        });
    }
    let manifest = Manifest {
        format: FORMAT,
        name: name.to_string(),
        perfcast_version: env!("CARGO_PKG_VERSION").to_string(),
        device: device.clone(),
        data: report.data.display().to_string(),
        budget: budget.clone(),
        kinds: entries,
        host_costs: None,
        trained_devices: trained_devices.to_vec(),
    };
    write_bundle(dir, &manifest, &files)?;

    // Overall figures: held-out rows of every kind pooled, each predicted by its kind's model.
    let overall =
        |pick: &dyn Fn(&KindReport) -> Option<&ModelReport>| -> Option<(Metrics, f64, usize)> {
            let (mut pred, mut truth, mut us, mut size) = (Vec::new(), Vec::new(), 0.0, 0usize);
            for (k, (_, test_set)) in report.kinds.iter().zip(splits) {
                let m = pick(k)?;
                pred.extend(&fitted.get(&m.file)?.1);
                truth.extend(&test_set.y);
                us += m.cost.one_row_us;
                size += m.cost.size_bytes;
            }
            Some((
                Metrics::compute(&pred, &truth)?,
                us / report.kinds.len().max(1) as f64,
                size,
            ))
        };
    let (auto, mean_predict_us, total_size_bytes) = overall(&|k: &KindReport| {
        let chosen = &kinds.iter().find(|s| s.kind == k.kind)?.selection.chosen;
        k.models.iter().find(|m| &m.model == chosen)
    })
    .ok_or_else(|| anyhow::anyhow!("no held-out predictions to score the selection"))?;
    let families: Vec<String> = report
        .kinds
        .first()
        .map(|k| k.models.iter().map(|m| m.model.clone()).collect())
        .unwrap_or_default();
    let single = families
        .into_iter()
        .filter_map(|family| {
            let (m, us, size) =
                overall(&|k: &KindReport| k.models.iter().find(|m| m.model == family))?;
            Some(SingleSelection {
                model: family,
                overall: m,
                mean_predict_us: us,
                total_size_bytes: size,
            })
        })
        .collect();
    Ok(SelectionReport {
        bundle: dir.to_path_buf(),
        kinds,
        overall: auto,
        mean_predict_us,
        total_size_bytes,
        single,
    })
}

fn render(report: &TrainReport, out: &Path) -> String {
    let mut t = format!(
        "{} ({}), {:?} split, {}% held out, {}-fold CV -> {}\n",
        report.data.display(),
        report.device,
        report.split,
        sig3(100.0 * report.test_share),
        report.folds,
        out.display()
    );
    for k in &report.kinds {
        t.push_str(&format!(
            "\n{}: {} train / {} test rows, best {}\n{:<12} {:>8} {:>9} {:>8} {:>8} {:>8} {:>8} {:>10} {:>11} {:>9}\n",
            k.kind, k.rows.0, k.rows.1, k.best, "model", "cv MAPE", "test MAPE", "R2(log)", "±10%", "p50 APE", "p95 APE",
            "1 row us", "batch us/row", "size KB"
        ));
        for m in &k.models {
            t.push_str(&format!(
                "{:<12} {:>7}% {:>8}% {:>8} {:>7}% {:>7}% {:>7}% {:>10} {:>11} {:>9}\n",
                m.model,
                sig3(m.cv.mape),
                sig3(m.test.mape),
                format!("{:.4}", m.test.r2_log),
                sig3(m.test.within_10),
                sig3(m.test.p50_ape),
                sig3(m.test.p95_ape),
                sig3(m.cost.one_row_us),
                sig3(m.cost.batch_row_us),
                sig3(m.cost.size_bytes as f64 / 1024.0)
            ));
        }
    }
    if let Some(sel) = &report.selection {
        t.push_str(&format!(
            "\nauto-selection -> {}\n{:<12} {:<12} {:>9}  {:<28} why\n",
            sel.bundle.display(),
            "kind",
            "chosen",
            "test MAPE",
            "Pareto front (MAPE/time/size)"
        ));
        for k in &sel.kinds {
            t.push_str(&format!(
                "{:<12} {:<12} {:>8}%  {:<28} {}\n",
                k.kind.name(),
                k.selection.chosen,
                sig3(k.test_mape),
                k.selection.pareto.join(","),
                k.selection.why
            ));
        }
        t.push_str(&format!(
            "{:<22} {:>9} {:>8} {:>8} {:>12} {:>10}\n",
            "overall (held out)", "MAPE", "R2", "R2(log)", "mean us/row", "size KB"
        ));
        let line = |name: String, m: &Metrics, us: f64, bytes: usize| {
            format!(
                "{:<22} {:>8}% {:>8.4} {:>8.4} {:>12} {:>10}\n",
                name,
                sig3(m.mape),
                m.r2,
                m.r2_log,
                sig3(us),
                sig3(bytes as f64 / 1024.0)
            )
        };
        t.push_str(&line(
            "auto-selection".into(),
            &sel.overall,
            sel.mean_predict_us,
            sel.total_size_bytes,
        ));
        for s in &sel.single {
            t.push_str(&line(
                format!("only {}", s.model),
                &s.overall,
                s.mean_predict_us,
                s.total_size_bytes,
            ));
        }
    }
    if !report.shared.is_empty() {
        t.push_str(&format!(
            "\none network per kind vs one shared by every kind (test MAPE)\n{:<9} {:<12} {:>9} {:>9}\n",
            "model", "kind", "per kind", "shared"
        ));
        for s in &report.shared {
            t.push_str(&format!(
                "{:<9} {:<12} {:>8}% {:>8}%\n",
                s.model,
                s.kind.name(),
                sig3(s.per_kind_mape),
                sig3(s.shared_mape)
            ));
        }
    }
    t
}

/// Fewest rows per fold of a 2-fold cross-validation for a kind to be trained when kinds are
/// not named.
const MIN_ROWS_PER_FOLD: usize = 5;

/// Arguments of `perfcast eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    // Options so `perfcast eval networks` can parse without them (clap extracts flattened
    // args even when a subcommand ran); `required` keeps them mandatory otherwise.
    /// Directory written by `perfcast train`
    #[arg(long, required = true)]
    models: Option<PathBuf>,
    /// Dataset to score the saved models on (with `--leave-one-device-out`: datasets of
    /// several devices, or a folder of them)
    #[arg(long, required = true, num_args = 1..)]
    data: Vec<PathBuf>,
    /// Leave one device out instead: `--models` lists model families (`ridge,knn,trees,medn`)
    /// fitted across the other devices of `--data`; same as `perfcast eval devices`
    #[arg(long)]
    leave_one_device_out: bool,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

#[derive(Debug, Serialize)]
struct EvalRow {
    kind: ModuleKind,
    model: String,
    metrics: Metrics,
}

/// Loads a saved model, refusing a corrupt file or one of another feature schema.
pub fn load_model(path: &Path, kind: ModuleKind) -> anyhow::Result<Box<dyn Regressor>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading `{}`", path.display()))?;
    let saved: SavedModel =
        serde_json::from_slice(&bytes).map_err(|e| perfcast_models::Error::Load {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    let model = saved.into_regressor();
    let expected = perfcast_models::FeatureSchema::for_kind(kind);
    if model.schema().hash() != expected.hash() {
        return Err(perfcast_models::Error::Load {
            path: path.to_path_buf(),
            message: format!("its feature schema is not this perfcast's schema for `{kind}`"),
        }
        .into());
    }
    Ok(model)
}

pub fn eval(args: EvalArgs, ui: &Ui) -> anyhow::Result<ExitCode> {
    if args.leave_one_device_out
        && let Some(models) = &args.models
    {
        return crate::cmd::devices_eval::eval_flag_form(models, &args.data, args.format, ui);
    }
    let (Some(models), [data]) = (&args.models, args.data.as_slice()) else {
        anyhow::bail!("`perfcast eval` needs `--models <dir>` and one `--data <dataset>`");
    };
    let report_path = models.join("report.json");
    let report: TrainReport = serde_json::from_slice(
        &std::fs::read(&report_path)
            .with_context(|| format!("reading `{}`", report_path.display()))?,
    )
    .with_context(|| format!("`{}` is not a perfcast train report", report_path.display()))?;
    let dir = DatasetDir::open(data)?;
    let device = dir.device()?;
    let mut rows = Vec::new();
    for k in &report.kinds {
        let records = dir.read(k.kind)?;
        if records.is_empty() {
            continue;
        }
        let data = TrainSet::from_records(k.kind, &records, &device)?;
        for m in &k.models {
            let model = load_model(&models.join(&m.file), k.kind)?;
            rows.push(EvalRow {
                kind: k.kind,
                model: m.model.clone(),
                metrics: score(model.as_ref(), &data)?,
            });
        }
    }
    anyhow::ensure!(
        !rows.is_empty(),
        "`{}` has no rows of the kinds in `{}`",
        data.display(),
        models.display()
    );
    match args.format {
        Format::Json => emit_json(&rows)?,
        Format::Text => {
            let mut t = format!(
                "{:<12} {:<9} {:>6} {:>8} {:>8} {:>8} {:>8}\n",
                "module", "model", "rows", "MAPE", "R2(log)", "±10%", "p95 APE"
            );
            for r in &rows {
                t.push_str(&format!(
                    "{:<12} {:<9} {:>6} {:>7}% {:>8} {:>7}% {:>7}%\n",
                    r.kind.name(),
                    r.model,
                    r.metrics.n,
                    sig3(r.metrics.mape),
                    format!("{:.4}", r.metrics.r2_log),
                    sig3(r.metrics.within_10),
                    sig3(r.metrics.p95_ape)
                ));
            }
            emit(&t)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
