//! The libraries' progress observer drawn as indicatif bars on stderr: one bar per stage, added
//! under the others when the stage begins and cleared when it ends; notes print above the bars.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget};
use perfcast_core::progress::Observer;
use perfcast_data::Outcome;
use perfcast_select::pipeline::Trained;
use perfcast_workflow::observe::{Done, ExtraFiles, StepObserver};

use crate::Ui;
use crate::output::{emit, progress};
use crate::render;

/// Progress bars for the stages a library call reports.
pub struct Bars {
    ui: Ui,
    multi: MultiProgress,
    bars: Mutex<Vec<(String, ProgressBar)>>,
}

impl Bars {
    /// Bars drawn as the UI says (hidden when stderr is not a terminal or with
    /// `--no-progress`).
    pub fn new(ui: &Ui) -> Arc<Bars> {
        Arc::new(Bars {
            ui: ui.clone(),
            multi: MultiProgress::with_draw_target(if ui.progress {
                ProgressDrawTarget::stderr()
            } else {
                ProgressDrawTarget::hidden()
            }),
            bars: Mutex::new(Vec::new()),
        })
    }

    fn with_bar(&self, stage: &str, f: impl FnOnce(&ProgressBar)) {
        let mut bars = self.bars.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, bar)) = bars.iter().find(|(s, _)| s == stage) {
            f(bar);
            return;
        }
        let bar = self.multi.add(progress(&self.ui, 0, stage));
        f(&bar);
        bars.push((stage.to_string(), bar));
    }
}

impl Observer for Bars {
    fn begin(&self, stage: &str, total: u64) {
        self.with_bar(stage, |bar| {
            bar.set_length(total);
            bar.set_position(0);
        });
    }

    fn message(&self, stage: &str, text: &str) {
        self.with_bar(stage, |bar| bar.set_message(text.to_string()));
    }

    fn advance(&self, stage: &str, n: u64) {
        self.with_bar(stage, |bar| bar.inc(n));
    }

    fn end(&self, stage: &str) {
        let mut bars = self.bars.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = bars.iter().position(|(s, _)| s == stage) {
            let (_, bar) = bars.remove(i);
            bar.finish_and_clear();
            self.multi.remove(&bar);
        }
    }

    fn note(&self, text: &str) {
        if self.ui.quiet {
            return;
        }
        // Printed around the bars, so a drawn bar is not torn by the line.
        self.multi.suspend(|| eprintln!("{text}"));
    }
}

impl Drop for Bars {
    fn drop(&mut self) {
        let bars = self.bars.get_mut().unwrap_or_else(|e| e.into_inner());
        for (_, bar) in bars.drain(..) {
            bar.finish_and_clear();
        }
    }
}

/// The process's one interrupt token ([`perfcast_core::interrupt`]), with the Ctrl-C handler
/// installed once: `ctrlc` keeps the first handler and refuses a second, so a handler per
/// sweep would leave every sweep after the first deaf to Ctrl-C. Once set the token stays set:
/// the process is stopping. A second Ctrl-C exits at once.
pub fn interrupt_flag() -> &'static AtomicBool {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            if perfcast_core::interrupt::requested() {
                eprintln!("interrupted twice: stopped at once");
                std::process::exit(130);
            }
            perfcast_core::interrupt::request();
        });
    });
    perfcast_core::interrupt::token()
}

/// A workflow's progress as bars, an active round's choice and (with `-v`) each measured row
/// as notes, the training charts as files, and with `tables` each step's table on stdout as
/// the step finishes (the quickstart; single commands print their report at the end).
pub struct Steps {
    ui: Ui,
    bars: Arc<Bars>,
    tables: bool,
}

impl Steps {
    /// The observer of a command run with `ui`.
    pub fn new(ui: &Ui, tables: bool) -> Arc<Steps> {
        Arc::new(Steps {
            ui: ui.clone(),
            bars: Bars::new(ui),
            tables,
        })
    }
}

impl Observer for Steps {
    fn begin(&self, stage: &str, total: u64) {
        self.bars.begin(stage, total);
    }
    fn message(&self, stage: &str, text: &str) {
        self.bars.message(stage, text);
    }
    fn advance(&self, stage: &str, n: u64) {
        self.bars.advance(stage, n);
    }
    fn end(&self, stage: &str) {
        self.bars.end(stage);
    }
    fn note(&self, text: &str) {
        self.bars.note(text);
    }
}

impl StepObserver for Steps {
    fn done(&self, step: Done<'_>) {
        match step {
            Done::ActiveRound(choices) => self
                .bars
                .note(render::profile::active_round(choices).trim_end()),
            Done::Row(record) if self.ui.verbose > 0 => {
                let what = match &record.outcome {
                    Outcome::Ok(t) => crate::output::fmt_ms(t.median_ms),
                    Outcome::Failed { reason } => format!("failed: {reason}"),
                };
                self.bars.note(&format!(
                    "{} b{} {}: {what}",
                    record.spec.describe(),
                    record.context.batch,
                    record.context.phase
                ));
            }
            step if self.tables => {
                // Tables go to stdout between steps; a stdout that fails (a closed pipe)
                // fails the final table too, which ends the run as every command does.
                let _ = match step {
                    Done::Canary(c) => emit(&render::profile::canary_line(c)),
                    Done::Swept { modules, summary } => {
                        emit(&render::profile::summary(modules, summary))
                    }
                    Done::Trained { report, out } => emit(&render::train::train(report, out)),
                    Done::Calibrated {
                        costs,
                        runs,
                        bundle,
                    } => emit(&render::networks::calibrated(costs, runs, Some(bundle))),
                    _ => Ok(()),
                };
            }
            _ => {}
        }
    }

    fn train_files(
        &self,
        trained: &Trained,
    ) -> Result<ExtraFiles, Box<dyn std::error::Error + Send + Sync>> {
        let mut charts = Vec::new();
        for held in trained.held_out() {
            charts.extend(render::charts::train(&held, &trained.device.name)?);
        }
        Ok(charts)
    }
}
