//! Output helpers: formats, stdout writing, progress bars.

use std::io::Write;

use clap::ValueEnum;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::Ui;

/// Output format of a command's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Format {
    /// Human-readable tables
    #[default]
    Text,
    /// One JSON document, for scripts
    Json,
}

/// Writes text to stdout; a closed pipe surfaces as an io error the entry point exits 0 on.
pub fn emit(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

/// Pretty JSON of a value to stdout.
pub fn emit_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    emit(&serde_json::to_string_pretty(value)?)
}

/// A progress bar with ETA on stderr, hidden when the UI says so (not a terminal, --no-progress).
pub fn progress(ui: &Ui, len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(
        Some(len),
        if ui.progress {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        },
    );
    let style = ProgressStyle::with_template(
        "{prefix:>10.bold} [{bar:30}] {pos}/{len} {elapsed_precise} ETA {eta_precise}  {wide_msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(what.to_string());
    bar
}

/// Formats milliseconds with three significant digits and a unit that fits.
pub fn fmt_ms(ms: f64) -> String {
    if !ms.is_finite() {
        return "-".into();
    }
    if ms >= 1000.0 {
        format!("{:.3} s", ms / 1000.0)
    } else if ms >= 1.0 {
        format!("{} ms", sig3(ms))
    } else {
        format!("{} us", sig3(ms * 1000.0))
    }
}

pub use perfcast_core::fmt::sig3;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_pick_a_unit() {
        assert_eq!(fmt_ms(0.01234), "12.3 us");
        assert_eq!(fmt_ms(12.345), "12.3 ms");
        assert_eq!(fmt_ms(1234.5), "1.234 s");
        assert_eq!(fmt_ms(f64::NAN), "-");
    }
}
