//! The train -> cross-validate -> select -> bundle pipeline behind `perfcast train`.
//!
//! [`train_and_select`] reads the datasets of a [`TrainPlan`], holds out a test share of each
//! kind's rows, cross-validates every requested family on the rest, fits it, scores it on the
//! held-out rows and times its predictions; with several kinds, each neural family is also
//! fitted once for all kinds together; with a bundle requested, [`crate::select`] chooses one
//! model per kind under the budgets. Nothing is written until [`Trained::write`]: the models,
//! `report.json` and each kind's `heldout.csv` (plus any files the caller renders, such as
//! charts) go into a staging directory that replaces the output directory at the end, and the
//! bundle is written atomically beside it.
//!
//! ```no_run
//! use std::sync::Arc;
//! use perfcast_core::progress::Silent;
//! use perfcast_select::pipeline::{TrainPlan, train_and_select};
//!
//! let plan = TrainPlan::new(vec!["datasets/my-cpu".into()], "models/my-cpu".into());
//! let trained = train_and_select(&plan, Arc::new(Silent))?;
//! let report = trained.write(Vec::new())?;
//! println!("{} kinds trained", report.kinds.len());
//! # Ok::<(), perfcast_select::Error>(())
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use perfcast_core::progress::Observer;
use perfcast_core::{DeviceSpec, Metrics, ModuleKind, Phase};
use perfcast_data::outdir::{self, OutputKind};
use perfcast_data::{DatasetDir, resolve_datasets};
use perfcast_models::eval::{ModelParams, PredictionCost, cross_validate, prediction_cost, score};
use perfcast_models::source::TrainSource;
use perfcast_models::split::{Split, holdout, kfold};
use perfcast_models::{Regressor, SavedModel, TrainSet};
use serde::{Deserialize, Serialize};

use crate::bundle::{FORMAT, KindEntry, Manifest, feature_ranges, write_bundle};
use crate::distill::{DistillPlan, Lesson, STUDENT};
use crate::error::{Error, Result};
use crate::select::{Budget, Candidate, Selection};

/// The progress stage of the (kind, family) fits.
pub const STAGE: &str = "train";

/// Fewest rows per fold of a 2-fold cross-validation for a kind to be trained when kinds are
/// not named.
pub const MIN_ROWS_PER_FOLD: usize = 5;

/// What to train, how to judge it and where to write it.
#[derive(Clone, Debug)]
pub struct TrainPlan {
    /// Datasets: one device's, several, or folders of them ([`resolve_datasets`]).
    pub data: Vec<PathBuf>,
    /// Family names (`ridge`, `medn`, ...).
    pub models: Vec<String>,
    /// Output directory for the fitted models and the report.
    pub out: PathBuf,
    /// Kinds to train (empty: every kind of the data with enough rows).
    pub modules: Vec<ModuleKind>,
    /// Folds of the cross-validation on the training part; default 5.
    pub folds: usize,
    /// Random rows or whole configuration groups; default random.
    pub split: Split,
    /// Share held out for the final test; default 0.2.
    pub test_share: f64,
    /// Seed of the splits; default 0.
    pub seed: u64,
    /// `model.field=value` settings.
    pub set: Vec<String>,
    /// Replace an existing output directory (of models); default no.
    pub force: bool,
    /// Auto-select a model per kind and write a bundle: a name (`checkpoints/<name>/`) or a
    /// directory path.
    pub bundle: Option<String>,
    /// Budgets of the selection.
    pub budget: Budget,
    /// Only rows of this phase (`None`: both).
    pub phase: Option<Phase>,
    /// Leave out the tables the GEMM consistency check flags; default no (they are reported).
    pub exclude_flagged: bool,
    /// Refit each kind's chosen model on all its rows (training and held-out) before the
    /// bundle is written; default no. Selection and every reported figure still come from the
    /// models fitted without the held-out rows; the bundle then answers with the held-out
    /// share of the data behind it too, including the held-out share of the layers of
    /// the networks a user profiled.
    pub refit: bool,
    /// Distil each kind's chosen blend, forest or neighbour model into a student that answers
    /// faster ([`crate::distill`]), kept where it stays close to its teacher; default no.
    /// Single-device data only.
    pub distill: Option<DistillPlan>,
}

impl TrainPlan {
    /// The defaults of `perfcast train` on `data` into `out`.
    pub fn new(data: Vec<PathBuf>, out: PathBuf) -> TrainPlan {
        TrainPlan {
            data,
            models: ["ridge", "knn", "trees", "roofline"]
                .map(String::from)
                .to_vec(),
            out,
            modules: Vec::new(),
            folds: 5,
            split: Split::Random,
            test_share: 0.2,
            seed: 0,
            set: Vec::new(),
            force: false,
            bundle: None,
            budget: Budget::default(),
            phase: None,
            exclude_flagged: false,
            refit: false,
            distill: None,
        }
    }
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
    /// A blend's parts and weights (`0.50xmedn + 0.50xridge`); `None` for other families.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<String>,
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
    /// Auto-selection and the bundle written, with a bundle requested.
    #[serde(default)]
    pub selection: Option<SelectionReport>,
    /// Tables the consistency check flagged: device, kind, whether left out.
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
    /// Whether training left it out.
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
    /// Whether the bundle's models were refitted on every row after selection
    /// ([`TrainPlan::refit`]); the figures above are those of the fits selection compared.
    #[serde(default)]
    pub refitted: bool,
}

/// One kind's selection.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KindSelection {
    /// Kind.
    pub kind: ModuleKind,
    /// Chosen family, Pareto front and why.
    pub selection: Selection,
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
    /// Held-out MAPE of the per-kind network, percent (none where the kind had too few rows
    /// for a network of its own).
    pub per_kind_mape: Option<f64>,
    /// Held-out MAPE of the shared network, percent.
    pub shared_mape: f64,
}

/// One fitted model and its place in the output.
struct FittedFile {
    /// Path relative to the output directory (`conv2d/ridge.json`).
    file: String,
    saved: SavedModel,
    /// Held-out predictions, ms, in the kind's test-row order.
    predictions: Vec<f64>,
    /// Out-of-fold predictions of the cross-validation, ms, in the kind's training-row order.
    cv_predictions: Vec<f64>,
    /// Where a neural model's burn checkpoint goes, relative to the output directory (the
    /// per-kind networks; shared ones keep the JSON form only).
    checkpoint: Option<String>,
    /// A blend's parts (their files) and weights, for [`TrainPlan::refit`].
    blend_of: Option<(Vec<String>, Vec<f64>)>,
}

/// A kind's held-out rows with every per-kind family's predictions, as the caller renders
/// them (charts of predicted against measured).
pub struct HeldOut<'a> {
    /// Kind.
    pub kind: ModuleKind,
    /// Measured ms of the held-out rows.
    pub measured: &'a [f64],
    /// Per family, in training order: name, predictions (ms, row order), held-out MAPE.
    pub models: Vec<(&'a str, &'a [f64], f64)>,
}

/// One kind's data, kept for the files written at the end.
struct KindData {
    kind: ModuleKind,
    /// Every row of the kind (training and held-out), for [`TrainPlan::refit`].
    all: TrainSet,
    train: TrainSet,
    test: TrainSet,
    /// Indices into [`Trained::files`] of the per-kind families, in training order.
    per_kind: Vec<usize>,
}

/// The bundle chosen, to be written.
struct ChosenBundle {
    dir: PathBuf,
    manifest: Manifest,
    files: Vec<(String, SavedModel)>,
}

/// Everything trained, held in memory until [`Trained::write`].
pub struct Trained {
    out: PathBuf,
    /// The device the rows were measured on (the first dataset's).
    pub device: DeviceSpec,
    report: TrainReport,
    files: Vec<FittedFile>,
    kinds: Vec<KindData>,
    bundle: Option<ChosenBundle>,
}

/// MAPE per phase of `pred` against `data`'s targets.
pub fn phase_mapes(data: &TrainSet, pred: &[f64]) -> BTreeMap<String, f64> {
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

/// `checkpoints/<name>` for a bare name, the path itself otherwise.
pub fn bundle_dir(name: &str) -> PathBuf {
    if name.contains('/') || name.contains(std::path::MAIN_SEPARATOR) {
        PathBuf::from(name)
    } else {
        Path::new("checkpoints").join(name)
    }
}

/// Runs the pipeline of `plan`: every family fitted, cross-validated and scored on every
/// kind, and with a bundle requested, one model chosen per kind. Progress goes to `observer`
/// (stage [`STAGE`], and the neural families' epochs, stage [`perfcast_models::medn::EPOCHS`]),
/// notes too (tables the consistency check flags, kinds skipped for too few rows). Nothing is
/// written yet.
pub fn train_and_select(plan: &TrainPlan, observer: Arc<dyn Observer>) -> Result<Trained> {
    let params: Vec<ModelParams> = plan
        .models
        .iter()
        .map(|m| ModelParams::by_name(m))
        .collect::<std::result::Result<_, _>>()?;
    // `model.field=value` settings go through the parameters' serde form, so unknown fields
    // and bad values are refused by the same checks as a config file.
    let params = params
        .iter()
        .map(|p| p.with_sets(&plan.set))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    plan.budget.validate()?;
    if params.is_empty() {
        return Err(Error::Input("`--models` is empty".into()));
    }
    // Checked before any training: the output and the bundle replace only perfcast outputs of
    // their kind, never a folder holding the input data or each other.
    let inputs: Vec<&Path> = plan.data.iter().map(PathBuf::as_path).collect();
    outdir::check_destination(&plan.out, OutputKind::Models, plan.force, &inputs)?;
    if let Some(name) = &plan.bundle {
        let bundle = bundle_dir(name);
        let mut taken = inputs.clone();
        taken.push(&plan.out);
        outdir::check_destination(&bundle, OutputKind::Bundle, true, &taken)?;
    }
    let mut source = TrainSource::new(resolve_datasets(&plan.data)?)?;
    source.phase = plan.phase;
    let flagged = if source.cross_device() {
        source.flagged()?
    } else {
        Vec::new()
    };
    for (device, kind, why) in &flagged {
        observer.note(&format!(
            "data check: `{device}` {kind} table flagged ({why}): {}",
            if plan.exclude_flagged {
                "left out"
            } else {
                "kept (--exclude-flagged leaves it out)"
            }
        ));
    }
    if plan.exclude_flagged {
        source.excluded = flagged.iter().map(|(d, k, _)| (d.clone(), *k)).collect();
    }
    let device = source.device.clone();
    let mut params = source.params(params);
    for p in &mut params {
        p.set_observer(observer.clone());
    }
    let observer = observer.as_ref();
    let present = source.kinds();
    if present.is_empty() {
        return Err(Error::Input(format!(
            "`{}` holds no module tables",
            source.label()
        )));
    }
    let kinds = if plan.modules.is_empty() {
        present.clone()
    } else {
        plan.modules.clone()
    };
    if let Some(missing) = kinds.iter().find(|k| !present.contains(k)) {
        let names: Vec<&str> = present.iter().map(|k| k.name()).collect();
        return Err(Error::Input(format!(
            "`{}` has no `{missing}` table (it has: {})",
            source.label(),
            names.join(", ")
        )));
    }

    observer.begin(STAGE, (kinds.len() * params.len()) as u64);
    let mut reports = Vec::new();
    let mut files: Vec<FittedFile> = Vec::new();
    let mut kept: Vec<KindData> = Vec::new();
    for kind in kinds {
        let data = source.train_set(kind)?;
        // A kind with a handful of rows (e.g. added by `measure --layers-into`) cannot be
        // cross-validated; when kinds were not named, skip it rather than fail the whole run.
        // (Too few rows for many requested folds stays an error: the user asked for them.)
        let min_rows = MIN_ROWS_PER_FOLD * 2;
        if plan.modules.is_empty() && data.y.len() < min_rows {
            observer.note(&format!(
                "warning: skipping `{kind}`: {} rows, training needs at least {min_rows}",
                data.y.len()
            ));
            observer.advance(STAGE, params.len() as u64);
            continue;
        }
        let (train_idx, test_idx) = holdout(&data, plan.test_share, plan.split, plan.seed)
            .map_err(|e| Error::context(format!("splitting `{}`", source.path(kind)), e))?;
        let train_set = data.select(&train_idx);
        let test_set = data.select(&test_idx);
        let mut models = Vec::new();
        let mut per_kind = Vec::new();
        for p in &params {
            let least = perfcast_models::registry::min_rows(p.name());
            if train_set.len() < least {
                observer.note(&format!(
                    "note: `{kind}`: {} training rows, too few for {} (it needs {least}); \
                     the other families are compared",
                    train_set.len(),
                    p.name()
                ));
                observer.advance(STAGE, 1);
                continue;
            }
            if perfcast_core::interrupt::requested() {
                return Err(Error::Interrupted(format!("{kind}: {}", p.name())));
            }
            observer.message(STAGE, &format!("{kind}: {}", p.name()));
            let cv =
                cross_validate(p, &train_set, plan.folds, plan.split, plan.seed).map_err(|e| {
                    Error::context(
                        format!("cross-validating {} on `{}`", p.name(), source.path(kind)),
                        e,
                    )
                })?;
            let model = p.fit(&train_set)?;
            let test = score(model.as_ref(), &test_set)?;
            let pred = model.predict(&test_set.x)?;
            let cost = prediction_cost(model.as_ref(), &test_set)?;
            let file = format!("{}/{}.json", kind.name(), p.name());
            models.push(ModelReport {
                model: p.name().to_string(),
                cv: cv.pooled,
                test_mape_by_phase: phase_mapes(&test_set, &pred),
                cv_mape_by_phase: phase_mapes(&train_set, &cv.predictions),
                test,
                cost,
                file: file.clone(),
                parts: None,
            });
            per_kind.push(files.len());
            files.push(FittedFile {
                file,
                saved: model.to_saved(),
                predictions: pred,
                cv_predictions: cv.predictions,
                checkpoint: Some(format!("{}/{}", kind.name(), p.name())),
                blend_of: None,
            });
            observer.advance(STAGE, 1);
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
        kept.push(KindData {
            kind,
            all: data,
            train: train_set,
            test: test_set,
            per_kind,
        });
    }
    if reports.is_empty() {
        return Err(Error::Input(format!(
            "every module kind of the data has fewer than {} rows; nothing to train",
            MIN_ROWS_PER_FOLD * 2
        )));
    }
    let shared = fit_shared(plan, &params, &kept, &mut reports, &mut files, observer)?;
    for (k, r) in kept.iter().zip(reports.iter_mut()) {
        add_blend(k, r, &mut files)?;
    }
    observer.end(STAGE);
    observer.end(perfcast_models::medn::EPOCHS);
    let mut report = TrainReport {
        data: PathBuf::from(source.label()),
        device: device.name.clone(),
        split: plan.split,
        folds: plan.folds,
        test_share: plan.test_share,
        kinds: reports,
        shared,
        selection: None,
        flagged: flagged
            .into_iter()
            .map(|(device, kind, why)| FlaggedTable {
                device,
                kind,
                why,
                excluded: plan.exclude_flagged,
            })
            .collect(),
    };
    let mut bundle = None;
    if let Some(name) = &plan.bundle {
        let trained_devices = if source.cross_device() {
            source.devices.clone()
        } else {
            Vec::new()
        };
        let (mut selection, mut chosen) = select_bundle(
            &report,
            &kept,
            &files,
            &plan.budget,
            &bundle_dir(name),
            (&device, trained_devices),
            name,
        )?;
        if plan.refit {
            refit_chosen(&params, &kept, &files, &mut chosen, observer)?;
            selection.refitted = true;
        }
        if let Some(distill) = &plan.distill {
            distil_chosen(plan, distill, &source, &kept, &mut chosen, observer)?;
        }
        report.selection = Some(selection);
        bundle = Some(chosen);
    }
    Ok(Trained {
        out: plan.out.clone(),
        device,
        report,
        files,
        kinds: kept,
        bundle,
    })
}

/// One network shared by every kind, for each neural family: cross-validated on the same
/// folds as the per-kind models, so it competes in selection as `<family>-shared`.
fn fit_shared(
    plan: &TrainPlan,
    params: &[ModelParams],
    kinds: &[KindData],
    reports: &mut [KindReport],
    files: &mut Vec<FittedFile>,
    observer: &dyn Observer,
) -> Result<Vec<SharedReport>> {
    let mut shared = Vec::new();
    let neural = params.iter().any(|p| {
        p.downcast_ref::<perfcast_models::medn::MednParams>()
            .is_some()
    });
    if kinds.len() < 2 || !neural {
        return Ok(shared);
    }
    let folds: Vec<_> = kinds
        .iter()
        .map(|k| kfold(&k.train, plan.folds, plan.split, plan.seed))
        .collect::<std::result::Result<_, _>>()?;
    // The network is fitted on each fold's training rows of every kind it covers: a kind with
    // fewer than the network needs in any fold (a handful of configurations) is left to its
    // own families.
    let (covered, left): (Vec<usize>, Vec<usize>) = (0..kinds.len()).partition(|&i| {
        kinds[i].train.len() >= SHARED_MIN_ROWS
            && folds[i].iter().all(|(t, _)| t.len() >= SHARED_MIN_ROWS)
    });
    if covered.len() < 2 {
        return Ok(shared);
    }
    if !left.is_empty() {
        let names: Vec<&str> = left.iter().map(|&i| kinds[i].kind.name()).collect();
        observer.note(&format!(
            "note: the shared networks leave out {} (fewer than {SHARED_MIN_ROWS} training rows \
             in a fold)",
            names.join(", ")
        ));
    }
    for p in params {
        let Some(medn) = p.downcast_ref::<perfcast_models::medn::MednParams>() else {
            continue;
        };
        let family = format!("{}-shared", p.name());
        observer.message(STAGE, &format!("{family}: one network for every kind"));
        let mut cv_pred: Vec<Vec<f64>> = covered
            .iter()
            .map(|&i| vec![f64::NAN; kinds[i].train.len()])
            .collect();
        // `f` picks the same fold of every covered kind's folds.
        #[allow(clippy::needless_range_loop)]
        for f in 0..plan.folds {
            let sets: Vec<TrainSet> = covered
                .iter()
                .map(|&i| kinds[i].train.select(&folds[i][f].0))
                .collect();
            let fitted = medn.fit_shared(&sets)?;
            for ((model, &i), pred) in fitted.iter().zip(&covered).zip(&mut cv_pred) {
                let test = kinds[i].train.select(&folds[i][f].1);
                for (&r, v) in folds[i][f].1.iter().zip(model.predict(&test.x)?) {
                    pred[r] = v;
                }
            }
        }
        let train_sets: Vec<TrainSet> = covered.iter().map(|&i| kinds[i].train.clone()).collect();
        let fitted = medn.fit_shared(&train_sets)?;
        for ((model, &i), cv) in fitted.iter().zip(&covered).zip(cv_pred) {
            let (k, kind_report) = (&kinds[i], &mut reports[i]);
            let per_kind = kind_report
                .models
                .iter()
                .find(|m| m.model == p.name())
                .map(|m| m.test.mape);
            let shared_mape = add_candidate(k, kind_report, files, (&family, model), cv, None)?;
            shared.push(SharedReport {
                model: p.name().to_string(),
                kind: k.kind,
                per_kind_mape: per_kind,
                shared_mape,
            });
        }
    }
    Ok(shared)
}

/// The fewest training rows of a kind, in every cross-validation fold, a shared network covers
/// it with (what [`perfcast_models::medn::MednParams::fit_shared`] needs of each kind).
const SHARED_MIN_ROWS: usize = 8;

/// Adds the kind's best blend of two of its candidates ([`crate::blend::best_pair`]) to its
/// report and files, as family `blend`: it then competes in selection like the others.
fn add_blend(k: &KindData, r: &mut KindReport, files: &mut Vec<FittedFile>) -> Result<()> {
    let (fitted, cheap): (Vec<usize>, Vec<bool>) = r
        .models
        .iter()
        .filter_map(|m| {
            let i = files.iter().position(|f| f.file == m.file)?;
            Some((i, m.cost.one_row_us <= crate::blend::CHEAP_US))
        })
        .unzip();
    let oof: Vec<(&[f64], bool)> = fitted
        .iter()
        .zip(&cheap)
        .map(|(&i, &c)| (files[i].cv_predictions.as_slice(), c))
        .collect();
    let Some(pick) = crate::blend::best_pair(&oof, &k.train.y) else {
        return Ok(());
    };
    let parts = pick.parts.map(|p| fitted[p]);
    let part_files: Vec<String> = parts.iter().map(|&i| files[i].file.clone()).collect();
    let model = perfcast_predict::blend::Blend::new(
        parts
            .iter()
            .map(|&i| files[i].saved.clone().into_regressor())
            .collect(),
        pick.weights.to_vec(),
    )?;
    let parts = model
        .parts()
        .map(|(name, w)| format!("{w:.2}x{name}"))
        .collect::<Vec<_>>()
        .join(" + ");
    add_candidate(k, r, files, (BLEND, &model), pick.predictions, Some(parts))?;
    if let Some(last) = files.last_mut() {
        last.blend_of = Some((part_files, pick.weights.to_vec()));
    }
    Ok(())
}

/// Adds a model fitted outside the per-family loop (a shared network, a blend) to the kind's
/// candidates as family `name`, with its out-of-fold predictions `cv` (training-row order):
/// scored and timed on the held-out rows, its file queued, the kind's best refreshed. Returns
/// its held-out MAPE.
fn add_candidate(
    k: &KindData,
    r: &mut KindReport,
    files: &mut Vec<FittedFile>,
    (name, model): (&str, &dyn Regressor),
    cv: Vec<f64>,
    parts: Option<String>,
) -> Result<f64> {
    let pred = model.predict(&k.test.x)?;
    let metrics = |pred: &[f64], data: &TrainSet| {
        Metrics::compute(pred, &data.y)
            .ok_or_else(|| Error::Input(format!("no rows to score `{name}` on")))
    };
    let test = metrics(&pred, &k.test)?;
    let mape = test.mape;
    let file = format!("{}/{name}.json", k.kind.name());
    r.models.push(ModelReport {
        model: name.to_string(),
        cv: metrics(&cv, &k.train)?,
        test_mape_by_phase: phase_mapes(&k.test, &pred),
        cv_mape_by_phase: phase_mapes(&k.train, &cv),
        test,
        cost: prediction_cost(model, &k.test)?,
        file: file.clone(),
        parts,
    });
    if let Some(best) = r
        .models
        .iter()
        .min_by(|a, b| a.test.mape.total_cmp(&b.test.mape))
    {
        r.best = best.model.clone();
    }
    files.push(FittedFile {
        file,
        saved: model.to_saved(),
        predictions: pred,
        cv_predictions: cv,
        checkpoint: None,
        blend_of: None,
    });
    Ok(mape)
}

/// The family name of blends in reports and bundles.
pub const BLEND: &str = "blend";

/// Selects a model per kind from the report's candidates: the manifest and files of the
/// bundle, and the selection's figures against one family everywhere.
fn select_bundle(
    report: &TrainReport,
    kinds: &[KindData],
    files: &[FittedFile],
    budget: &Budget,
    dir: &Path,
    (device, trained_devices): (&DeviceSpec, Vec<DeviceSpec>),
    name: &str,
) -> Result<(SelectionReport, ChosenBundle)> {
    let fitted = |file: &str| files.iter().find(|f| f.file == file);
    let candidates = |k: &KindReport| -> Vec<Candidate> {
        k.models
            .iter()
            .map(|m| Candidate {
                model: m.model.clone(),
                cv_mape: m.cv.mape,
                test_mape: m.test.mape,
                predict_us: m.cost.one_row_us,
                size_bytes: m.cost.size_bytes,
            })
            .collect()
    };
    let mut entries = BTreeMap::new();
    let mut chosen_files = Vec::new();
    let mut selections = Vec::new();
    for (k, data) in report.kinds.iter().zip(kinds) {
        let cands = candidates(k);
        let mut selection = crate::select::select(k.kind.name(), &cands, budget)?;
        let chosen = k
            .models
            .iter()
            .find(|m| m.model == selection.chosen)
            .ok_or_else(|| {
                Error::Input(format!("selected `{}` has no report", selection.chosen))
            })?;
        // A blend says what it blends wherever the choice is shown (`bundle show`, reports).
        if let Some(parts) = &chosen.parts {
            selection.why = format!("{}; blend = {parts}", selection.why);
        }
        let model = fitted(&chosen.file)
            .ok_or_else(|| Error::Input(format!("selected `{}` was not saved", chosen.file)))?;
        entries.insert(
            k.kind.name().to_string(),
            KindEntry {
                chosen: selection.chosen.clone(),
                file: chosen.file.clone(),
                schema_hash: format!("{:016x}", data.train.schema.hash()),
                rows: data.train.len(),
                candidates: cands,
                selection: selection.clone(),
                ranges: feature_ranges(&data.train),
                refitted: false,
                distilled: None,
            },
        );
        chosen_files.push((chosen.file.clone(), model.saved.clone()));
        selections.push(KindSelection {
            kind: k.kind,
            selection,
            test_mape: chosen.test.mape,
        });
    }
    let manifest = Manifest {
        format: FORMAT,
        name: name.to_string(),
        perfcast_version: perfcast_core::VERSION.to_string(),
        device: device.clone(),
        data: report.data.display().to_string(),
        budget: budget.clone(),
        kinds: entries,
        host_costs: None,
        trained_devices,
    };

    // Overall figures: held-out rows of every kind pooled, each predicted by its kind's model.
    let overall =
        |pick: &dyn Fn(&KindReport) -> Option<&ModelReport>| -> Option<(Metrics, f64, usize)> {
            let (mut pred, mut truth, mut us, mut size) = (Vec::new(), Vec::new(), 0.0, 0usize);
            for (k, data) in report.kinds.iter().zip(kinds) {
                let m = pick(k)?;
                pred.extend(&fitted(&m.file)?.predictions);
                truth.extend(&data.test.y);
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
        let chosen = &selections
            .iter()
            .find(|s| s.kind == k.kind)?
            .selection
            .chosen;
        k.models.iter().find(|m| &m.model == chosen)
    })
    .ok_or_else(|| Error::Input("no held-out predictions to score the selection".into()))?;
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
    Ok((
        SelectionReport {
            bundle: dir.to_path_buf(),
            kinds: selections,
            overall: auto,
            mean_predict_us,
            total_size_bytes,
            single,
            refitted: false,
        },
        ChosenBundle {
            dir: dir.to_path_buf(),
            manifest,
            files: chosen_files,
        },
    ))
}

/// Refits every chosen model of `bundle` on all its kind's rows ([`TrainPlan::refit`]): a
/// per-kind family by its parameters, a shared network once for every kind (as it was
/// selected: one network over all kinds), a blend part by part with its selected weights.
/// The manifest then counts every row and spans every row's feature ranges.
fn refit_chosen(
    params: &[ModelParams],
    kinds: &[KindData],
    files: &[FittedFile],
    bundle: &mut ChosenBundle,
    observer: &dyn Observer,
) -> Result<()> {
    const REFIT: &str = "refit";
    observer.begin(REFIT, bundle.files.len() as u64);
    let mut refitted: BTreeMap<String, SavedModel> = BTreeMap::new();
    for (file, saved) in &mut bundle.files {
        observer.message(REFIT, &format!("{file} on every row"));
        let fitted = files
            .iter()
            .find(|f| &f.file == file)
            .ok_or_else(|| Error::Input(format!("selected `{file}` was not fitted")))?;
        *saved = match &fitted.blend_of {
            Some((parts, weights)) => {
                let models = parts
                    .iter()
                    .map(|p| {
                        Ok(refit_file(p, params, kinds, files, &mut refitted)?.into_regressor())
                    })
                    .collect::<Result<Vec<_>>>()?;
                perfcast_predict::blend::Blend::new(models, weights.clone())?.to_saved()
            }
            None => refit_file(file, params, kinds, files, &mut refitted)?,
        };
        observer.advance(REFIT, 1);
    }
    for (name, entry) in &mut bundle.manifest.kinds {
        if let Some(k) = kinds.iter().find(|k| k.kind.name() == name) {
            entry.rows = k.all.len();
            entry.ranges = feature_ranges(&k.all);
            entry.refitted = true;
        }
    }
    observer.end(REFIT);
    Ok(())
}

/// Families whose answer costs more than one small network's: distilled when asked.
const DISTILLED_FAMILIES: [&str; 3] = [BLEND, "trees", "knn"];

/// Distils each kind of `bundle` whose choice is one of [`DISTILLED_FAMILIES`] into a MEDN
/// student ([`crate::distill::Lesson`]); a kept student becomes the kind's answer, and every
/// attempt is recorded in the kind's manifest entry. Nothing is done on stacked devices.
fn distil_chosen(
    plan: &TrainPlan,
    distill: &DistillPlan,
    source: &TrainSource,
    kinds: &[KindData],
    bundle: &mut ChosenBundle,
    observer: &dyn Observer,
) -> Result<()> {
    const DISTIL: &str = "distil";
    if source.cross_device() {
        observer.note("note: students are distilled from one device's data only; none here");
        return Ok(());
    }
    let students = distill
        .students
        .iter()
        .map(|set| {
            let params = ModelParams::by_name("medn")?
                .with_sets(&[plan.set.clone(), set.clone()].concat())?;
            Ok((params, set.join(",")))
        })
        .collect::<Result<Vec<_>>>()?;
    let todo: Vec<&KindData> = kinds
        .iter()
        .filter(|k| {
            bundle
                .manifest
                .kinds
                .get(k.kind.name())
                .is_some_and(|e| DISTILLED_FAMILIES.contains(&e.chosen.as_str()))
        })
        .collect();
    observer.begin(DISTIL, todo.len() as u64);
    for k in todo {
        let records = source.records(k.kind)?.unwrap_or_default();
        if perfcast_core::interrupt::requested() {
            return Err(Error::Interrupted(format!("distilling {}", k.kind)));
        }
        observer.message(DISTIL, &format!("{}: a student of its choice", k.kind));
        let entry = bundle
            .manifest
            .kinds
            .get_mut(k.kind.name())
            .ok_or_else(|| Error::Input(format!("`{}` has no manifest entry", k.kind)))?;
        let slot = bundle
            .files
            .iter()
            .position(|(f, _)| *f == entry.file)
            .ok_or_else(|| Error::Input(format!("`{}` was not saved", entry.file)))?;
        let teacher = bundle.files[slot].1.clone().into_regressor();
        let measured = if entry.refitted { &k.all } else { &k.train };
        let lesson = Lesson::new(
            k.kind,
            (&entry.chosen, teacher.as_ref()),
            (&records, measured),
            &entry.ranges,
            &bundle.manifest.device,
            distill,
        )
        .map_err(|e| Error::context(format!("distilling `{}`", k.kind), e))?;
        // The narrowest student kept, else the widest tried.
        let mut tried = None;
        for (student, set) in &students {
            let taught = lesson
                .teach((student, set), distill)
                .map_err(|e| Error::context(format!("distilling `{}`", k.kind), e))?;
            let kept = taught.1.is_some();
            tried = Some(taught);
            if kept {
                break;
            }
        }
        let Some((found, model)) = tried else {
            continue;
        };
        observer.note(&format!(
            "student of {} ({}, {}): {}",
            k.kind,
            found.teacher,
            found.student,
            if found.kept {
                found.why.clone()
            } else {
                format!("not kept, {}", found.why)
            }
        ));
        if let Some(model) = model {
            // The student learnt from a teacher refitted on the held-out rows too, so its own
            // error there is no held-out figure: it is shown as its teacher's plus what the
            // student lost against the teacher on the measured rows.
            let teacher = entry
                .candidates
                .iter()
                .find(|c| c.model == entry.chosen)
                .ok_or_else(|| Error::Input(format!("`{}` has no candidate", entry.chosen)))?;
            let lost = found.measured_mape[1] - found.measured_mape[0];
            let file = format!("{}/{STUDENT}.json", k.kind.name());
            entry.candidates.push(Candidate {
                model: STUDENT.into(),
                cv_mape: teacher.cv_mape + lost,
                test_mape: teacher.test_mape + lost,
                predict_us: found.predict_us[1],
                size_bytes: model.size_bytes(),
            });
            entry.chosen = STUDENT.into();
            entry.file = file.clone();
            bundle.files[slot] = (file, model.to_saved());
        }
        entry.distilled = Some(found);
        observer.advance(DISTIL, 1);
    }
    observer.end(DISTIL);
    Ok(())
}

/// The model of output file `file` (`<kind>/<family>.json`) fitted on all the kind's rows,
/// from `done` or fitted now (a shared family: for every kind at once, all kept in `done`).
fn refit_file(
    file: &str,
    params: &[ModelParams],
    kinds: &[KindData],
    files: &[FittedFile],
    done: &mut BTreeMap<String, SavedModel>,
) -> Result<SavedModel> {
    if let Some(saved) = done.get(file) {
        return Ok(saved.clone());
    }
    let unknown = || Error::Input(format!("cannot refit `{file}`: no such family"));
    let (kind, family) = file
        .strip_suffix(".json")
        .and_then(|f| f.split_once('/'))
        .ok_or_else(unknown)?;
    let param = |name: &str| params.iter().find(|p| p.name() == name).ok_or_else(unknown);
    if let Some(base) = family.strip_suffix("-shared") {
        let medn = param(base)?
            .downcast_ref::<perfcast_models::medn::MednParams>()
            .ok_or_else(unknown)?;
        // The kinds the network covered when it was selected ([`fit_shared`]).
        let covered: Vec<&KindData> = kinds
            .iter()
            .filter(|k| {
                let name = format!("{}/{family}.json", k.kind.name());
                files.iter().any(|f| f.file == name)
            })
            .collect();
        let sets: Vec<TrainSet> = covered.iter().map(|k| k.all.clone()).collect();
        for (model, k) in medn.fit_shared(&sets)?.iter().zip(covered) {
            done.insert(format!("{}/{family}.json", k.kind.name()), model.to_saved());
        }
    } else {
        let data = &kinds
            .iter()
            .find(|k| k.kind.name() == kind)
            .ok_or_else(unknown)?
            .all;
        done.insert(file.to_string(), param(family)?.fit(data)?.to_saved());
    }
    done.get(file).cloned().ok_or_else(unknown)
}

impl Trained {
    /// The report (`report.json`), complete but for nothing: it is what [`Trained::write`]
    /// writes.
    pub fn report(&self) -> &TrainReport {
        &self.report
    }

    /// The output directory [`Trained::write`] replaces.
    pub fn out(&self) -> &Path {
        &self.out
    }

    /// Each kind's held-out rows with the per-kind families' predictions, in training order.
    pub fn held_out(&self) -> Vec<HeldOut<'_>> {
        self.kinds
            .iter()
            .zip(&self.report.kinds)
            .map(|(k, r)| HeldOut {
                kind: k.kind,
                measured: &k.test.y,
                models: k
                    .per_kind
                    .iter()
                    .zip(&r.models)
                    .map(|(&i, m)| {
                        (
                            m.model.as_str(),
                            self.files[i].predictions.as_slice(),
                            m.test.mape,
                        )
                    })
                    .collect(),
            })
            .collect()
    }

    /// Writes everything: in a staging directory beside the output, every model (JSON, plus a
    /// burn checkpoint for the per-kind neural networks), each kind's `heldout.csv` (the
    /// held-out rows' features, measured ms and every per-kind family's prediction), the
    /// `extra` files (paths relative to the output directory, e.g. charts) and `report.json`;
    /// the bundle, when one was chosen, atomically; then the staging directory replaces the
    /// output directory. A failed or killed run leaves no partial output.
    pub fn write(self, extra: Vec<(PathBuf, Vec<u8>)>) -> Result<TrainReport> {
        let staging = outdir::stage_beside(&self.out, "train")?;
        let root = staging.path();
        let create = |dir: &Path| {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::context(format!("creating `{}`", dir.display()), e))
        };
        for k in &self.kinds {
            create(&root.join(k.kind.name()))?;
        }
        for f in &self.files {
            let medn = f.saved.downcast_ref::<perfcast_models::medn::FittedMedn>();
            if let (Some(dir), Some(m)) = (&f.checkpoint, medn) {
                use perfcast_models::medn::MednCheckpoint;
                // The burn checkpoint (config, normalisers, records) beside the fast-path JSON.
                m.save_checkpoint(&root.join(dir))?;
            }
            let json = serde_json::to_vec(&f.saved)
                .map_err(|e| Error::Input(format!("serialising `{}`: {e}", f.file)))?;
            perfcast_data::write_atomic(&root.join(&f.file), &json)?;
        }
        for (k, r) in self.kinds.iter().zip(&self.report.kinds) {
            write_held_out(
                k,
                r,
                &self.files,
                &root.join(k.kind.name()).join("heldout.csv"),
            )?;
        }
        for (path, bytes) in &extra {
            let path = root.join(path);
            if let Some(dir) = path.parent() {
                create(dir)?;
            }
            perfcast_data::write_atomic(&path, bytes)?;
        }
        if let Some(b) = &self.bundle {
            write_bundle(&b.dir, &b.manifest, &b.files)?;
        }
        let json = serde_json::to_vec_pretty(&self.report)
            .map_err(|e| Error::Input(format!("serialising the report: {e}")))?;
        perfcast_data::write_atomic(&root.join("report.json"), &json)?;
        outdir::mark(root, OutputKind::Models)?;
        outdir::replace_with(staging, &self.out)?;
        Ok(self.report)
    }
}

/// The held-out rows with every per-kind model's prediction, for looking into errors.
fn write_held_out(k: &KindData, r: &KindReport, files: &[FittedFile], path: &Path) -> Result<()> {
    let mut header: Vec<String> = k.test.schema.names.clone();
    header.push("measured_ms".into());
    for m in r.models.iter().take(k.per_kind.len()) {
        header.push(format!("{}_ms", m.model));
    }
    let records: Vec<Vec<String>> = k
        .test
        .x
        .iter_rows()
        .enumerate()
        .map(|(row, features)| {
            let mut cells: Vec<String> = features.iter().map(f64::to_string).collect();
            cells.push(k.test.y[row].to_string());
            for &i in &k.per_kind {
                cells.push(files[i].predictions[row].to_string());
            }
            cells
        })
        .collect();
    Ok(perfcast_data::write_csv(path, &header, &records)?)
}

/// Loads a saved model, refusing a corrupt file or one of another feature schema.
pub fn load_model(path: &Path, kind: ModuleKind) -> Result<Box<dyn Regressor>> {
    let load_err = |message: String| {
        Error::Models(perfcast_models::Error::Load {
            path: path.to_path_buf(),
            message,
        })
    };
    let bytes = std::fs::read(path)
        .map_err(|e| Error::context(format!("reading `{}`", path.display()), e))?;
    let saved: SavedModel = serde_json::from_slice(&bytes).map_err(|e| load_err(e.to_string()))?;
    // A model of an older schema version reads the first columns of today's rows.
    perfcast_predict::older_schema::on_current_schema(saved.into_regressor(), kind)
        .map_err(|e| load_err(format!("{e} for `{kind}`")))
}

/// One saved model scored on another dataset.
#[derive(Debug, Clone, Serialize)]
pub struct SavedScore {
    /// Kind.
    pub kind: ModuleKind,
    /// Family.
    pub model: String,
    /// Accuracy on the dataset's rows of the kind.
    pub metrics: Metrics,
}

/// Scores every model a `perfcast train` run saved in `models` on the rows of `data` (`perfcast
/// eval --models <dir> --data <dataset>`).
pub fn score_saved(models: &Path, data: &Path) -> Result<Vec<SavedScore>> {
    let report_path = models.join("report.json");
    let bytes = std::fs::read(&report_path)
        .map_err(|e| Error::context(format!("reading `{}`", report_path.display()), e))?;
    let report: TrainReport = serde_json::from_slice(&bytes).map_err(|e| {
        Error::Input(format!(
            "`{}` is not a perfcast train report: {e}",
            report_path.display()
        ))
    })?;
    let dir = DatasetDir::open(data)?;
    let device = dir.device()?;
    let mut rows = Vec::new();
    for k in &report.kinds {
        let records = dir.read(k.kind)?;
        if records.is_empty() {
            continue;
        }
        let set = TrainSet::from_records(k.kind, &records, &device)?;
        for m in &k.models {
            let model = load_model(&models.join(&m.file), k.kind)?;
            rows.push(SavedScore {
                kind: k.kind,
                model: m.model.clone(),
                metrics: score(model.as_ref(), &set)?,
            });
        }
    }
    if rows.is_empty() {
        return Err(Error::Input(format!(
            "`{}` has no rows of the kinds in `{}`",
            data.display(),
            models.display()
        )));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfcast_core::progress::Silent;
    use perfcast_core::{Context, ModuleSpec};
    use perfcast_data::{Outcome, Record, Timing};

    /// A dataset of 40 linear layers in both phases, latency proportional to FLOPs.
    fn dataset(root: &Path) -> PathBuf {
        let dir = root.join("data");
        let device = perfcast_core::testing::cpu_device();
        let ds = DatasetDir::create_or_open(&dir, &device).expect("dataset");
        let mut records = Vec::new();
        for i in 0..40 {
            let spec = ModuleSpec::from_json(&format!(
                r#"{{"kind":"linear","in_features":{},"out_features":{}}}"#,
                16 + 8 * i,
                32 + 4 * i
            ))
            .expect("spec");
            for phase in [Phase::Inference, Phase::Training] {
                let context = Context {
                    batch: 1 + i % 4,
                    phase,
                    threads: 1,
                    utilisation: 0.0,
                };
                let flops = perfcast_core::features::derive(&spec, context.batch).flops;
                let factor = if phase == Phase::Training { 3.0 } else { 1.0 };
                records.push(Record {
                    spec: spec.clone(),
                    context,
                    backend: "flex".into(),
                    outcome: Outcome::Ok(Timing::median_only(0.002 + factor * flops / 1e8)),
                    perfcast_version: "test".into(),
                    timestamp: 0,
                });
            }
        }
        ds.write(ModuleKind::Linear, &records).expect("write");
        dir
    }

    #[test]
    fn a_kind_too_small_for_the_shared_network_is_left_to_its_own_families() {
        // Linear with 80 rows and matmul with 80 share a network; relu's 10 rows leave at most 5
        // per fold's training part, fewer than the network needs (`quickstart --samples 10`
        // failed on such a kind).
        let tmp = tempfile::tempdir().expect("tempdir");
        let data = dataset(tmp.path());
        let device = perfcast_core::testing::cpu_device();
        let ds = DatasetDir::create_or_open(&data, &device).expect("dataset");
        let record = |spec: &str, batch: usize, phase: Phase, ms: f64| Record {
            spec: ModuleSpec::from_json(spec).expect("spec"),
            context: Context {
                batch,
                phase,
                threads: 1,
                utilisation: 0.0,
            },
            backend: "flex".into(),
            outcome: Outcome::Ok(Timing::median_only(ms)),
            perfcast_version: "test".into(),
            timestamp: 0,
        };
        let mut matmul = Vec::new();
        for i in 0..40 {
            let spec = format!(
                r#"{{"kind":"matmul","heads":2,"m":{},"k":32,"n":16}}"#,
                8 + 4 * i
            );
            for (phase, f) in [(Phase::Inference, 1.0), (Phase::Training, 3.0)] {
                matmul.push(record(
                    &spec,
                    1,
                    phase,
                    0.001 + f * (8 + 4 * i) as f64 * 1e-5,
                ));
            }
        }
        ds.write(ModuleKind::Matmul, &matmul).expect("write");
        let relu: Vec<Record> = (0..10)
            .map(|i| {
                let spec = format!(r#"{{"kind":"relu","shape":[1,{},8]}}"#, 4 + 4 * i);
                record(&spec, 1, Phase::Inference, 0.001 + i as f64 * 1e-4)
            })
            .collect();
        ds.write(ModuleKind::Relu, &relu).expect("write");
        let plan = TrainPlan {
            models: vec!["ridge".into(), "medn".into()],
            folds: 2,
            test_share: 0.2,
            set: vec!["medn.max_steps=20".into()],
            ..TrainPlan::new(vec![data], tmp.path().join("models"))
        };
        let trained = train_and_select(&plan, Arc::new(Silent)).expect("trained");
        let has = |file: &str| trained.files.iter().any(|f| f.file == file);
        assert!(has("linear/medn-shared.json") && has("matmul/medn-shared.json"));
        assert!(!has("relu/medn-shared.json") && has("relu/ridge.json"));
    }

    #[test]
    fn the_pipeline_trains_selects_and_writes_every_output_at_once() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data = dataset(tmp.path());
        let out = tmp.path().join("models");
        let bundle = tmp.path().join("bundles").join("tiny");
        let plan = TrainPlan {
            models: vec!["ridge".into(), "knn".into()],
            folds: 2,
            test_share: 0.25,
            bundle: Some(bundle.display().to_string()),
            ..TrainPlan::new(vec![data.clone()], out.clone())
        };
        let trained = train_and_select(&plan, Arc::new(Silent)).expect("trained");
        // Nothing is written before `write`.
        assert!(!out.exists() && !bundle.exists());
        let held = trained.held_out();
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].kind, ModuleKind::Linear);
        let families: Vec<&str> = held[0].models.iter().map(|(m, _, _)| *m).collect();
        assert_eq!(families, ["ridge", "knn"]);
        assert_eq!(held[0].models[0].1.len(), held[0].measured.len());
        // The two families' blend is a candidate too: its held-out predictions are a weighted
        // geometric mean of theirs, so each lies between the two.
        let preds = |name: &str| {
            let file = format!("linear/{name}.json");
            &trained
                .files
                .iter()
                .find(|f| f.file == file)
                .unwrap()
                .predictions
        };
        let (ridge, knn, blend) = (preds("ridge"), preds("knn"), preds(BLEND));
        assert_eq!(blend.len(), ridge.len());
        for ((b, r), k) in blend.iter().zip(ridge).zip(knn) {
            assert!(*b >= r.min(*k) * (1.0 - 1e-12) && *b <= r.max(*k) * (1.0 + 1e-12));
        }
        let blended = &trained.report.kinds[0].models[2];
        assert_eq!(blended.model, BLEND);
        let parts = blended.parts.as_deref().unwrap_or_default();
        assert!(
            parts.contains("xridge + ") && parts.ends_with("xknn"),
            "{parts}"
        );

        let report = trained
            .write(vec![(
                PathBuf::from("plots/linear-x.svg"),
                b"<svg/>".to_vec(),
            )])
            .expect("written");
        let (train_rows, test_rows) = report.kinds[0].rows;
        assert_eq!(train_rows + test_rows, 80);
        assert!(report.kinds[0].best == "ridge" || report.kinds[0].best == "knn");
        let selection = report.selection.as_ref().expect("selection");
        assert_eq!(selection.bundle, bundle);
        assert_eq!(selection.single.len(), 3);

        // The report on disk is the one returned.
        let on_disk: TrainReport =
            serde_json::from_slice(&std::fs::read(out.join("report.json")).expect("report"))
                .expect("report parses");
        assert_eq!(on_disk.kinds[0].rows, report.kinds[0].rows);
        // Every model file loads back as a model of this build's schema.
        for m in &report.kinds[0].models {
            load_model(&out.join(&m.file), ModuleKind::Linear).expect("model loads");
        }
        // heldout.csv: the features, the measurement, one column per family, a line per row.
        let csv = std::fs::read_to_string(out.join("linear").join("heldout.csv")).expect("csv");
        let header = csv.lines().next().expect("header");
        assert!(header.ends_with(",measured_ms,ridge_ms,knn_ms"), "{header}");
        assert_eq!(csv.lines().count(), 1 + test_rows);
        assert_eq!(
            std::fs::read(out.join("plots").join("linear-x.svg")).expect("extra"),
            b"<svg/>"
        );
        let why = &selection.kinds[0].selection.why;
        assert_eq!(
            why.contains("; blend = "),
            selection.kinds[0].selection.chosen == BLEND,
            "{why}"
        );
        let loaded = crate::Bundle::load(&bundle).expect("bundle loads");
        assert_eq!(
            loaded.manifest.kinds["linear"].chosen,
            selection.kinds[0].selection.chosen
        );

        // Scoring the saved models on the same dataset gives a row per family.
        let scores = score_saved(&out, &data).expect("scores");
        assert_eq!(scores.len(), 3);
        assert!(scores.iter().all(|s| s.metrics.n == 80));

        // The output now exists: without `force` a second run is refused before training.
        let err = train_and_select(&plan, Arc::new(Silent))
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains(&out.display().to_string()), "{err}");
        let missing = TrainPlan {
            modules: vec![ModuleKind::Conv2d],
            force: true,
            ..plan.clone()
        };
        let err = train_and_select(&missing, Arc::new(Silent))
            .err()
            .expect("no conv2d")
            .to_string();
        assert!(
            err.contains("has no `conv2d` table (it has: linear)"),
            "{err}"
        );
    }

    /// `refit`: the bundle's blend answers as the same weights over its parts fitted on every
    /// row, while the report keeps the held-out fits' figures.
    #[test]
    fn a_refitted_bundle_answers_with_models_fitted_on_every_row() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data = dataset(tmp.path());
        let bundle = tmp.path().join("bundles").join("refit");
        let plan = TrainPlan {
            models: vec!["ridge".into(), "knn".into()],
            folds: 2,
            test_share: 0.25,
            bundle: Some(bundle.display().to_string()),
            budget: Budget {
                only: Some(BLEND.into()),
                ..Budget::default()
            },
            refit: true,
            ..TrainPlan::new(vec![data.clone()], tmp.path().join("models"))
        };
        let trained = train_and_select(&plan, Arc::new(Silent)).expect("trained");
        let (all, test) = (
            trained.kinds[0].all.clone(),
            trained.kinds[0].test.x.clone(),
        );
        let held_out_fit = trained
            .files
            .iter()
            .find(|f| f.file == "linear/blend.json")
            .expect("blend fitted");
        let (_, weights) = held_out_fit.blend_of.clone().expect("a blend's parts");
        let selected = held_out_fit.predictions.clone();
        trained.write(Vec::new()).expect("written");

        let loaded = crate::Bundle::load(&bundle).expect("bundle loads");
        let entry = &loaded.manifest.kinds["linear"];
        assert_eq!((entry.chosen.as_str(), entry.rows), (BLEND, 80));
        assert!(entry.refitted);
        let report: TrainReport = serde_json::from_slice(
            &std::fs::read(tmp.path().join("models").join("report.json")).expect("report"),
        )
        .expect("report parses");
        assert!(report.selection.expect("selection").refitted);
        let model = load_model(&bundle.join(&entry.file), ModuleKind::Linear).expect("loads");
        let fit = |name: &str| {
            ModelParams::by_name(name)
                .expect("family")
                .fit(&all)
                .expect("fit")
        };
        let on_all = perfcast_predict::blend::Blend::new(vec![fit("ridge"), fit("knn")], weights)
            .expect("blend");
        let answered = model.predict(&test).expect("bundle answers");
        assert_eq!(answered, on_all.predict(&test).expect("all rows"));
        // k-NN fitted on the held-out rows answers them from themselves: the bundle is not the
        // model selection scored.
        assert_ne!(answered, selected);
    }

    /// `distill`: the blend's student learns its teacher's answers on the measured rows and
    /// their neighbours; the manifest records the attempt, and a kept student is the kind's
    /// answer (its file loaded, a candidate beside its teacher).
    #[test]
    fn a_distilled_student_stands_in_for_its_teacher_only_when_kept() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data = dataset(tmp.path());
        let bundle = tmp.path().join("bundles").join("distilled");
        let plan = TrainPlan {
            models: vec!["ridge".into(), "knn".into()],
            folds: 2,
            test_share: 0.25,
            set: vec!["medn.max_steps=2000".into()],
            bundle: Some(bundle.display().to_string()),
            budget: Budget {
                only: Some(BLEND.into()),
                ..Budget::default()
            },
            refit: true,
            distill: Some(DistillPlan::default()),
            ..TrainPlan::new(vec![data.clone()], tmp.path().join("models"))
        };
        let trained = train_and_select(&plan, Arc::new(Silent)).expect("trained");
        let all = trained.kinds[0].all.clone();
        trained.write(Vec::new()).expect("written");
        let loaded = crate::Bundle::load(&bundle).expect("bundle loads");
        let entry = &loaded.manifest.kinds["linear"];
        let found = entry.distilled.clone().expect("a student was tried");
        assert_eq!(found.teacher, BLEND);
        assert!(found.rows > all.len(), "{} labelled rows", found.rows);
        assert!(
            found.from_teacher < 15.0,
            "{}% from the teacher",
            found.from_teacher
        );
        let model = load_model(&bundle.join(&entry.file), ModuleKind::Linear).expect("loads");
        let mape = Metrics::compute(&model.predict(&all.x).expect("answers"), &all.y)
            .expect("scored")
            .mape;
        if found.kept {
            assert_eq!(
                (entry.chosen.as_str(), entry.file.as_str()),
                (STUDENT, "linear/student.json")
            );
            let figure = |name: &str| {
                let c = entry
                    .candidates
                    .iter()
                    .find(|c| c.model == name)
                    .expect(name);
                (c.cv_mape, c.test_mape)
            };
            let (lost, teacher, student) = (
                found.measured_mape[1] - found.measured_mape[0],
                figure(BLEND),
                figure(STUDENT),
            );
            assert!(
                (student.0 - teacher.0 - lost).abs() < 1e-9,
                "{student:?} {teacher:?}"
            );
            assert!(
                (student.1 - teacher.1 - lost).abs() < 1e-9,
                "{student:?} {teacher:?}"
            );
            assert!(
                (mape - found.measured_mape[1]).abs() < 1e-6,
                "{mape} vs {found:?}"
            );
        } else {
            assert_eq!(entry.chosen, BLEND, "{}", found.why);
            assert!(
                (mape - found.measured_mape[0]).abs() < 1e-6,
                "{mape} vs {found:?}"
            );
        }
    }

    #[test]
    fn phase_mapes_split_rows_by_the_training_column() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data = dataset(tmp.path());
        let dir = DatasetDir::open(&data).expect("open");
        let set = TrainSet::from_records(
            ModuleKind::Linear,
            &dir.read(ModuleKind::Linear).expect("rows"),
            &dir.device().expect("device"),
        )
        .expect("set");
        // Inference rows predicted exactly, training rows 10% high.
        let training = set.schema.index("training").expect("column");
        let pred: Vec<f64> = set
            .x
            .iter_rows()
            .zip(&set.y)
            .map(|(r, y)| if r[training] == 1.0 { y * 1.1 } else { *y })
            .collect();
        let mapes = phase_mapes(&set, &pred);
        assert!(mapes["inference"].abs() < 1e-9);
        assert!((mapes["training"] - 10.0).abs() < 1e-6);
        assert_eq!(bundle_dir("local"), Path::new("checkpoints/local"));
        assert_eq!(bundle_dir("out/b"), Path::new("out/b"));
    }
}
