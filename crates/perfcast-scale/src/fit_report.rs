//! The generic expression fitted to a runs file and reported (`perfcast scale fit`): every
//! constant with its meaning, standard error and share, the fit's MAPE, the MAPE on runs held
//! out, and predictions at other points; notes on what the runs cannot determine.

use std::path::{Path, PathBuf};

use perfcast_core::fmt::sig3;
use perfcast_core::progress::Observer;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::expression::{Expression, Point, Term};
use crate::fit::{FitConfig, FittedExpression, Holdout, fit, fit_with_holdout};
use crate::runs::{Run, read_runs};

/// One constant, for output.
#[derive(Debug, Clone, Serialize)]
pub struct ConstantRow {
    /// Term name.
    pub term: String,
    /// Its scaling factor.
    pub formula: String,
    /// Whether the factor is extrinsic.
    pub extrinsic: bool,
    /// Fitted value.
    pub value: f64,
    /// Relative standard error, where the runs determine it.
    pub rel_se: Option<f64>,
    /// Mean share of the predicted time over the runs.
    pub mean_share: f64,
    /// What the term stands for.
    pub meaning: String,
}

/// One prediction at a point.
#[derive(Debug, Clone, Serialize)]
pub struct PointPrediction {
    /// Processors.
    pub p: f64,
    /// Batch size.
    pub b: f64,
    /// Samples.
    pub n: f64,
    /// Predicted seconds.
    pub time_s: f64,
    /// Each term's seconds.
    pub terms: Vec<(String, f64)>,
}

/// The runs held out and the error on them.
#[derive(Debug, Clone, Serialize)]
pub struct HoldoutSummary {
    /// How they were chosen.
    pub how: String,
    /// Runs held out.
    pub runs: usize,
    /// MAPE on them, percent.
    pub mape: f64,
    /// Largest APE on them, percent.
    pub max_ape: f64,
}

/// What `scale fit` reports.
#[derive(Debug, Clone, Serialize)]
pub struct FitReport {
    /// The runs file.
    pub runs_file: PathBuf,
    /// Runs in it.
    pub runs: usize,
    /// The expression.
    pub formula: String,
    /// Per term.
    pub constants: Vec<ConstantRow>,
    /// Terms zero on every run fitted.
    pub unfitted: Vec<String>,
    /// Terms the runs cannot tell from the others, set to 0 (`startup` at one `n`).
    pub undetermined: Vec<String>,
    /// Runs fitted.
    pub fitted_runs: usize,
    /// MAPE on them, percent.
    pub fit_mape: f64,
    /// The runs held out.
    pub holdout: Option<HoldoutSummary>,
    /// Generations of differential evolution.
    pub generations: usize,
    /// Evaluations of the cost.
    pub evaluations: usize,
    /// Whether it converged.
    pub converged: bool,
    /// Seed.
    pub seed: u64,
    /// Weight of the ridge penalty.
    pub lambda: f64,
    /// At the points asked for.
    pub predictions: Vec<PointPrediction>,
}

/// A fit, its report and the runs it read.
pub struct FitOutcome {
    /// The report.
    pub report: FitReport,
    /// The fitted expression.
    pub fitted: FittedExpression,
    /// Every run of the file.
    pub runs: Vec<Run>,
}

/// Reads the runs at `runs_file`, fits `expression` to them (to those not held out, with a
/// holdout), and reports it with predictions at `points`. Warnings and notes go to
/// `observer`: no convergence, terms zero on every run, terms the runs cannot determine.
pub fn fit_runs(
    runs_file: &Path,
    expression: &Expression,
    holdout: Option<&Holdout>,
    config: &FitConfig,
    points: &[Point],
    observer: &dyn Observer,
) -> Result<FitOutcome> {
    let runs = read_runs(runs_file)?;
    let context = |e: Error| Error::Context {
        context: format!("fitting `{}`", runs_file.display()),
        source: Box::new(e),
    };
    let (fitted, held) = match holdout {
        Some(h) => {
            let r = fit_with_holdout(expression, &runs, h, config).map_err(context)?;
            let how = match h {
                Holdout::Share { share, seed } => {
                    format!("a random {}% (seed {seed})", sig3(100.0 * share))
                }
                Holdout::Where(f) => format!("the runs with {f}"),
            };
            let summary = HoldoutSummary {
                how,
                runs: r.holdout_runs,
                mape: r.holdout_mape,
                max_ape: r.holdout_max_ape,
            };
            (r.fitted, Some(summary))
        }
        None => (fit(expression, &runs, config).map_err(context)?, None),
    };
    notes(&fitted, observer);
    let report = FitReport {
        runs_file: runs_file.to_path_buf(),
        runs: runs.len(),
        formula: expression.formula(),
        constants: fitted
            .constants
            .iter()
            .map(|c| ConstantRow {
                term: c.term.name().into(),
                formula: c.term.formula().into(),
                extrinsic: c.term.extrinsic(),
                value: c.value,
                rel_se: c.rel_se.is_finite().then_some(c.rel_se),
                mean_share: c.mean_share,
                meaning: c.term.meaning().into(),
            })
            .collect(),
        unfitted: fitted.unfitted.iter().map(|t| t.name().into()).collect(),
        undetermined: fitted
            .undetermined
            .iter()
            .map(|t| t.name().into())
            .collect(),
        fitted_runs: fitted.runs,
        fit_mape: fitted.fit_mape,
        holdout: held,
        generations: fitted.generations,
        evaluations: fitted.evaluations,
        converged: fitted.converged,
        seed: config.de.seed,
        lambda: config.lambda,
        predictions: points
            .iter()
            .map(|&x| PointPrediction {
                p: x.p,
                b: x.b,
                n: x.n,
                time_s: fitted.predict(x),
                terms: fitted
                    .breakdown(x)
                    .into_iter()
                    .map(|(t, s)| (t.name().to_string(), s))
                    .collect(),
            })
            .collect(),
    };
    Ok(FitOutcome {
        report,
        fitted,
        runs,
    })
}

/// What the user should know about a fit: it did not converge, a term is zero on every run,
/// the runs cannot tell a term from the others.
fn notes(fitted: &FittedExpression, observer: &dyn Observer) {
    if !fitted.converged {
        observer.note(&format!(
            "warning: differential evolution stopped at {} generations before converging; \
             `--generations` raises the limit",
            fitted.generations
        ));
    }
    for t in &fitted.unfitted {
        observer.note(&format!(
            "warning: term `{}` ({}) is zero on every run fitted: its constant is 0",
            t.name(),
            t.formula()
        ));
    }
    if fitted.undetermined.contains(&Term::Startup) {
        observer.note(
            "note: every run fitted has the same n: a fixed cost per run (`startup`) cannot be \
             told from per-sample work; taken as 0",
        );
    }
    let blind: Vec<String> = fitted
        .constants
        .iter()
        .filter(|c| {
            !c.rel_se.is_finite()
                && !fitted.unfitted.contains(&c.term)
                && !fitted.undetermined.contains(&c.term)
        })
        .map(|c| format!("`{}`", c.term.name()))
        .collect();
    if !blind.is_empty() {
        observer.note(&format!(
            "note: no standard error for {}: the runs cannot separate {} from the others (or \
             push {} to zero); predictions far outside the runs depend on how the fit split \
             them{}",
            blind.join(", "),
            if blind.len() == 1 { "it" } else { "them" },
            if blind.len() == 1 { "it" } else { "them" },
            perfcast_core::Hint::new("runs at more values of p, b and n separate the terms")
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Keeps every note.
    #[derive(Default)]
    struct Notes(Mutex<Vec<String>>);

    impl Observer for Notes {
        fn note(&self, text: &str) {
            self.0.lock().expect("notes").push(text.to_string());
        }
    }

    #[test]
    fn the_report_names_the_runs_the_constants_and_what_cannot_be_told_apart() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("runs.csv");
        // T = 1 ms per sample over p processors, every run at the same n: a cost per run
        // cannot be told from the serial per-sample term.
        let mut text = String::from("p,b,n,time_s\n");
        for p in [1, 2, 4, 8] {
            for b in [8, 16, 32] {
                text.push_str(&format!("{p},{b},256,{}\n", 0.001 * 256.0 / p as f64));
            }
        }
        std::fs::write(&path, text).expect("write");
        let expression = Expression::parse("startup,compute,serial").expect("terms");
        let config = FitConfig {
            de: crate::DeConfig {
                max_generations: 300,
                ..crate::DeConfig::default()
            },
            ..FitConfig::default()
        };
        let points = [Point {
            p: 16.0,
            b: 8.0,
            n: 256.0,
        }];
        let notes = Notes::default();
        let out = fit_runs(&path, &expression, None, &config, &points, &notes).expect("fit");
        let r = &out.report;
        assert_eq!((r.runs, r.fitted_runs), (12, 12));
        assert_eq!(r.runs_file, path);
        let terms: Vec<&str> = r.constants.iter().map(|c| c.term.as_str()).collect();
        assert_eq!(terms, ["startup", "compute", "serial"]);
        assert_eq!(r.undetermined, ["startup"]);
        assert!(r.fit_mape < 1.0, "{}", r.fit_mape);
        // Predictions at other points follow the fitted terms: 256 ms / 16.
        assert!(
            (r.predictions[0].time_s - 0.016).abs() < 0.0016,
            "{:?}",
            r.predictions
        );
        let notes = notes.0.lock().expect("notes");
        assert!(
            notes
                .iter()
                .any(|n| n.contains("every run fitted has the same n")),
            "{notes:?}"
        );
        let err = fit_runs(
            &tmp.path().join("missing.csv"),
            &expression,
            None,
            &config,
            &[],
            &Silent,
        )
        .err()
        .expect("no file")
        .to_string();
        assert!(err.contains("missing.csv"), "{err}");
    }

    use perfcast_core::progress::Silent;
}
