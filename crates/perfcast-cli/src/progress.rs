//! The libraries' progress observer drawn as indicatif bars on stderr: one bar per stage, added
//! under the others when the stage begins and cleared when it ends; notes print above the bars.

use std::sync::{Arc, Mutex};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget};
use perfcast_core::progress::Observer;

use crate::Ui;
use crate::output::progress;

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

/// A profile run's events drawn on `bar`: the plan sets its length, each measurement advances
/// it; with `-v`, every row is logged above it (straight to stderr when the bar is hidden,
/// which swallows printed lines).
pub fn profile_events<'a>(
    bar: &'a ProgressBar,
    ui: &Ui,
) -> impl FnMut(perfcast_profile::run::Event<'_>) + 'a {
    use perfcast_data::Outcome;
    use perfcast_profile::run::Event;
    let verbose = ui.verbose > 0 && !ui.quiet;
    let log = move |line: String| {
        if bar.is_hidden() {
            eprintln!("{line}");
        } else {
            bar.println(line);
        }
    };
    move |event: Event<'_>| match event {
        Event::Planned { total, skipped } => {
            bar.set_length(total as u64);
            if skipped > 0 {
                log(format!(
                    "resuming: {skipped} rows already measured, {total} to go"
                ));
            }
        }
        Event::Started { job } => {
            bar.set_message(format!("{} ({})", job.sample.spec.describe(), job.phase))
        }
        Event::Remeasuring { rows } => {
            log(format!(
                "the canary found disturbed stretches: measuring their {rows} rows again"
            ));
            bar.set_position(0);
            bar.set_length(rows as u64);
        }
        Event::Remeasured { done } => bar.set_position(done as u64),
        Event::Finished { record, .. } => {
            bar.inc(1);
            if verbose {
                let what = match &record.outcome {
                    Outcome::Ok(t) => crate::output::fmt_ms(t.median_ms),
                    Outcome::Failed { reason } => format!("failed: {reason}"),
                };
                log(format!(
                    "{} b{} {}: {what}",
                    record.spec.describe(),
                    record.context.batch,
                    record.context.phase
                ));
            }
        }
    }
}
