//! Measured runs: a CSV with one run per line.
//!
//! Columns `p` (processors: GPUs, nodes or threads), `b` (batch size), `n` (samples
//! processed) and `time_s` (seconds the run took), in any order; other columns are allowed
//! and ignored. Blank lines and lines starting with `#` are skipped; fields may be quoted.
//! Every value is checked: `p` at least 1, `b` and `n` positive, `time_s` positive and
//! finite. An error names the file, the line and the value.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::expression::Point;
use crate::measure::RunsReport;

/// The columns a runs file must have.
pub const REQUIRED: [&str; 4] = ["p", "b", "n", "time_s"];

/// One measured run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Line in the file (from 1).
    pub line: usize,
    /// Its scaling factors.
    pub point: Point,
    /// Seconds it took.
    pub time_s: f64,
}

/// Reads and checks a runs CSV.
pub fn read_runs(path: &Path) -> Result<Vec<Run>> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_runs(&text, path)
}

/// Writes measured runs as a runs CSV: a `#` provenance line (which [`read_runs`] skips), the
/// header, one line per run (fields quoted where they need it), atomically (a temp file in
/// the same directory, renamed over `path`).
pub fn write_runs(path: &Path, report: &RunsReport) -> Result<()> {
    write_atomically(path, |file| {
        use std::io::Write as _;
        let mut out = std::io::BufWriter::new(file);
        out.write_all(provenance(report).as_bytes())?;
        let mut w = csv::Writer::from_writer(out);
        w.write_record([
            "network",
            "resolution",
            "backend",
            "p",
            "b",
            "n",
            "steps",
            "repeats",
            "time_s",
            "min_s",
            "max_s",
        ])?;
        let resolution = report.resolution.map(|v| v.to_string()).unwrap_or_default();
        for run in &report.runs {
            w.write_record([
                report.network.clone(),
                resolution.clone(),
                report.backend.clone(),
                run.p.to_string(),
                run.b.to_string(),
                run.n.to_string(),
                run.steps.to_string(),
                report.repeats.to_string(),
                format!("{:.6}", run.time_s),
                format!("{:.6}", run.min_s),
                format!("{:.6}", run.max_s),
            ])?;
        }
        w.flush()
    })
}

/// Writes `path` atomically through [`perfcast_core::atomic`]; a failure leaves `path` as it
/// was.
pub(crate) fn write_atomically(
    path: &Path,
    fill: impl FnOnce(&std::fs::File) -> std::io::Result<()>,
) -> Result<()> {
    let err = |source: std::io::Error| Error::WriteRuns {
        path: path.to_path_buf(),
        source,
    };
    perfcast_core::atomic::write_atomic_with(path, |file| fill(file).map_err(err), |_, _, e| err(e))
}

/// The `#` line saying how the runs were measured.
fn provenance(r: &RunsReport) -> String {
    let load = |l: Option<f64>| l.map_or_else(|| "unknown".to_string(), |v| format!("{v:.2}"));
    format!(
        "# perfcast scale measure: {} training steps (forward, backward, SGD update) on {}, \
         {} ({} cores); time_s is the median of {} repeats (rounds over every run in shuffled \
         order), each after one untimed warm-up step; 1-minute load average {} before, {} \
         after\n",
        r.network.replace('\n', " "),
        r.backend,
        r.cpu.replace('\n', " "),
        r.cores,
        r.repeats,
        load(r.load_start),
        load(r.load_end)
    )
}

/// Splits one line at commas outside double quotes (`""` inside quotes is a quote).
fn fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cell = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cell.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cell).trim().to_string()),
            _ => cell.push(c),
        }
    }
    out.push(cell.trim().to_string());
    out
}

/// Parses runs CSV text; `path` names the file in errors.
pub fn parse_runs(text: &str, path: &Path) -> Result<Vec<Run>> {
    let err = |message: String| Error::Runs {
        path: PathBuf::from(path),
        message,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_start_matches('\u{feff}')))
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    let Some((_, header)) = lines.next() else {
        return Err(err("the file is empty".into()).with_hint(format!(
            "a runs CSV has a header line with the columns {}",
            REQUIRED.join(", ")
        )));
    };
    let columns: Vec<String> = fields(header)
        .into_iter()
        .map(|c| c.to_ascii_lowercase())
        .collect();
    for (i, c) in columns.iter().enumerate() {
        if !c.is_empty() && columns[..i].contains(c) {
            return Err(err(format!("column `{c}` appears twice in the header")));
        }
    }
    let mut index = [0usize; 4];
    for (slot, name) in index.iter_mut().zip(REQUIRED) {
        *slot = columns.iter().position(|c| c == name).ok_or_else(|| {
            err(format!(
                "missing column `{name}` (the header has {})",
                columns
                    .iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .with_hint(
                "a runs CSV needs the columns p (processors), b (batch size), n (samples \
                 processed) and time_s (seconds)",
            )
        })?;
    }
    let mut runs = Vec::new();
    for (line, text) in lines {
        let cells = fields(text);
        if cells.len() != columns.len() {
            return Err(err(format!(
                "line {line}: {} fields, the header has {}",
                cells.len(),
                columns.len()
            )));
        }
        let mut values = [0.0f64; 4];
        for ((v, &i), name) in values.iter_mut().zip(&index).zip(REQUIRED) {
            let cell = &cells[i];
            *v = cell
                .parse()
                .map_err(|_| err(format!("line {line}: `{name}` = `{cell}` is not a number")))?;
        }
        let [p, b, n, time_s] = values;
        if !(time_s.is_finite() && time_s > 0.0) {
            return Err(err(format!(
                "line {line}: `time_s` must be a positive number of seconds, got {time_s}"
            )));
        }
        for (name, v) in [("b", b), ("n", n)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(err(format!(
                    "line {line}: `{name}` must be positive, got {v}"
                )));
            }
        }
        if !(p.is_finite() && p >= 1.0) {
            return Err(err(format!("line {line}: `p` must be at least 1, got {p}")));
        }
        runs.push(Run {
            line,
            point: Point { p, b, n },
            time_s,
        });
    }
    if runs.is_empty() {
        return Err(err("the file has a header but no runs".into()));
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Run>> {
        parse_runs(text, Path::new("runs.csv"))
    }

    #[test]
    fn reads_columns_in_any_order_with_extras_comments_and_quotes() {
        let runs = parse(
            "# measured on a laptop\nnote,time_s,n,\"b\",p\n\"warm, first\",1.5,1000,32,2\n\ncold,2,2000,32,1\n",
        )
        .unwrap();
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].line, 3);
        assert_eq!(
            runs[0].point,
            Point {
                p: 2.0,
                b: 32.0,
                n: 1000.0
            }
        );
        assert_eq!((runs[1].line, runs[1].time_s), (5, 2.0));
    }

    #[test]
    fn a_missing_column_is_named() {
        let e = parse("p,b,n,seconds\n1,2,3,4\n").unwrap_err().to_string();
        assert!(
            e.starts_with("runs file `runs.csv`: missing column `time_s`"),
            "{e}"
        );
        assert!(e.contains("`seconds`"), "{e}");
        let e = parse("p,n,time_s\n1,3,4\n").unwrap_err().to_string();
        assert!(e.contains("missing column `b`"), "{e}");
    }

    #[test]
    fn non_positive_or_nan_times_name_the_line() {
        for (time, shown) in [("0", "got 0"), ("-2.5", "got -2.5"), ("NaN", "got NaN")] {
            let text = format!("p,b,n,time_s\n1,8,64,1.0\n2,8,64,{time}\n");
            let e = parse(&text).unwrap_err().to_string();
            assert!(
                e.contains("`runs.csv`: line 3: `time_s` must be a positive number of seconds")
                    && e.contains(shown),
                "{e}"
            );
        }
        let e = parse("p,b,n,time_s\n1,8,64,fast\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 2: `time_s` = `fast` is not a number"),
            "{e}"
        );
        let e = parse("p,b,n,time_s\n0,8,64,1\n").unwrap_err().to_string();
        assert!(e.contains("line 2: `p` must be at least 1, got 0"), "{e}");
        let e = parse("p,b,n,time_s\n1,0,64,1\n").unwrap_err().to_string();
        assert!(e.contains("`b` must be positive, got 0"), "{e}");
    }

    #[test]
    fn empty_files_and_duplicates_are_refused() {
        assert!(parse("").unwrap_err().to_string().contains("empty"));
        assert!(
            parse("p,b,n,time_s\n")
                .unwrap_err()
                .to_string()
                .contains("no runs")
        );
        let e = parse("p,b,n,time_s\n1,2,3\n").unwrap_err().to_string();
        assert!(e.contains("line 2: 3 fields, the header has 4"), "{e}");
        let e = parse("p,b,p,n,time_s\n").unwrap_err().to_string();
        assert!(e.contains("column `p` appears twice"), "{e}");
        let e = read_runs(Path::new("/nonexistent/runs.csv")).unwrap_err();
        assert!(
            e.to_string().starts_with("reading `/nonexistent/runs.csv`"),
            "{e}"
        );
    }

    #[test]
    fn written_runs_read_back_with_their_provenance_skipped() {
        use crate::measure::{MeasuredRun, RunsReport};
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("runs.csv");
        let run = |p: usize, time_s: f64| MeasuredRun {
            p,
            b: 4,
            n: 8,
            steps: 2,
            time_s,
            min_s: time_s * 0.9,
            max_s: time_s * 1.1,
        };
        let report = RunsReport {
            out: path.clone(),
            // A comma in the label is quoted, not a column of its own.
            network: "toy, small".into(),
            resolution: Some(32),
            backend: "flex".into(),
            cpu: "test cpu".into(),
            cores: 2,
            repeats: 3,
            load_start: Some(0.25),
            load_end: None,
            runs: vec![run(1, 0.5), run(2, 0.3)],
            failed: Vec::new(),
        };
        write_runs(&path, &report).expect("write");
        let text = std::fs::read_to_string(&path).expect("read");
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("# perfcast scale measure: toy, small training steps"));
        assert!(lines[0].ends_with("load average 0.25 before, unknown after"));
        assert_eq!(
            lines[1],
            "network,resolution,backend,p,b,n,steps,repeats,time_s,min_s,max_s"
        );
        assert_eq!(
            lines[2],
            "\"toy, small\",32,flex,1,4,8,2,3,0.500000,0.450000,0.550000"
        );
        let runs = read_runs(&path).expect("read back");
        assert_eq!(runs.len(), 2);
        assert_eq!(
            runs[1].point,
            Point {
                p: 2.0,
                b: 4.0,
                n: 8.0
            }
        );
        assert_eq!(runs[1].time_s, 0.3);
        assert_eq!(std::fs::read_dir(tmp.path()).expect("dir").count(), 1);
    }
}
