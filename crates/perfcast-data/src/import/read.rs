//! Reading CSV files as text columns, and parsing cells with errors that name the file, the
//! line, the column and the value.

use std::path::{Path, PathBuf};

use polars::prelude::{CsvReadOptions, DataFrame, SerReader};

use crate::error::{Error, Result};

/// A CSV file read with every column as text, so each cell is parsed (and reported) here.
pub(crate) struct CsvFile {
    path: PathBuf,
    df: DataFrame,
}

/// One text column of a [`CsvFile`].
pub(crate) struct Col<'a> {
    path: &'a Path,
    name: String,
    cells: Vec<Option<&'a str>>,
}

/// The line of data row `row` (0-based), counting the header as line 1.
pub(crate) fn line(row: usize) -> usize {
    row + 2
}

impl CsvFile {
    /// Reads `path`; a missing or malformed file is an error naming it.
    pub(crate) fn read(path: &Path) -> Result<CsvFile> {
        if let Err(e) = std::fs::metadata(path) {
            return Err(super::cannot_read(path, &e));
        }
        check_header(path)?;
        let df = CsvReadOptions::default()
            .with_has_header(true)
            // 0: no type inference, every column is text.
            .with_infer_schema_length(Some(0))
            .try_into_reader_with_file_path(Some(path.to_path_buf()))
            .and_then(|r| r.finish())
            .map_err(|e| Error::unreadable(path, e.to_string().replace('\n', " ")))?;
        Ok(CsvFile {
            path: path.to_path_buf(),
            df,
        })
    }

    /// The file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Data rows.
    pub(crate) fn rows(&self) -> usize {
        self.df.height()
    }

    /// Whether the header names `name`.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.df.column(name).is_ok()
    }

    /// A column by name; a missing one is an error naming the file and the column.
    pub(crate) fn column(&self, name: &str) -> Result<Col<'_>> {
        self.column_for(name, "")
    }

    /// Like [`CsvFile::column`], with `why` appended to a missing column's message.
    pub(crate) fn column_for(&self, name: &str, why: &str) -> Result<Col<'_>> {
        let col = self.df.column(name).map_err(|_| {
            let names: Vec<String> = self
                .df
                .get_column_names()
                .iter()
                .map(|n| n.to_string())
                .collect();
            Error::schema(
                &self.path,
                format!(
                    "missing column `{name}`{why} (the header has: {})",
                    names.join(", ")
                ),
            )
        })?;
        let ca = col.str().map_err(|e| Error::unreadable(&self.path, e))?;
        Ok(Col {
            path: &self.path,
            name: name.to_string(),
            cells: ca.iter().collect(),
        })
    }
}

impl<'a> Col<'a> {
    /// The file the column belongs to.
    pub(crate) fn path(&self) -> &'a Path {
        self.path
    }

    /// The column's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    fn fail(&self, row: usize, message: String) -> Error {
        Error::schema(
            self.path,
            format!(
                "line {}: column `{}`: {}",
                line(row),
                self.name,
                clip(&message)
            ),
        )
    }

    /// The trimmed cell, `None` when empty.
    pub(crate) fn raw(&self, row: usize) -> Option<&str> {
        self.cells[row].map(str::trim).filter(|s| !s.is_empty())
    }

    /// The trimmed cell; empty is an error.
    pub(crate) fn text(&self, row: usize) -> Result<&str> {
        self.raw(row)
            .ok_or_else(|| self.fail(row, "the cell is empty".into()))
    }

    /// A finite number.
    pub(crate) fn number(&self, row: usize) -> Result<f64> {
        let s = self.text(row)?;
        let v: f64 = s
            .parse()
            .map_err(|_| self.fail(row, format!("`{s}` is not a number")))?;
        if v.is_nan() {
            return Err(self.fail(row, format!("`{s}` is NaN")));
        }
        if !v.is_finite() {
            return Err(self.fail(row, format!("`{s}` is not finite")));
        }
        Ok(v)
    }

    /// A positive, finite time (`scale` converts the file's unit to ms).
    pub(crate) fn time_ms(&self, row: usize, scale: f64) -> Result<f64> {
        let v = self.number(row)?;
        if v < 0.0 {
            return Err(self.fail(row, format!("latency `{v}` is negative")));
        }
        if v == 0.0 {
            return Err(self.fail(row, "latency `0` is not a measurement".into()));
        }
        let ms = v * scale;
        if ms > crate::table::MAX_TIME_MS {
            return Err(self.fail(
                row,
                format!(
                    "latency `{v}` is more than a day ({} ms)",
                    crate::table::MAX_TIME_MS
                ),
            ));
        }
        Ok(ms)
    }

    /// A batch size: at least 1, at most [`perfcast_core::MAX_BATCH`].
    pub(crate) fn batch(&self, row: usize) -> Result<usize> {
        let v = self.count(row)?;
        if v == 0 || v > perfcast_core::MAX_BATCH {
            return Err(self.fail(
                row,
                format!("batch `{v}` must be in [1, {}]", perfcast_core::MAX_BATCH),
            ));
        }
        Ok(v)
    }

    /// A non-negative integer (`3` or `3.0`, not `3.5`).
    pub(crate) fn integer(&self, row: usize) -> Result<i64> {
        let s = self.text(row)?;
        let v = parse_integer(s).map_err(|m| self.fail(row, m))?;
        if v < 0 {
            return Err(self.fail(row, format!("`{s}` is negative")));
        }
        Ok(v)
    }

    /// A count (at least 0) as usize.
    pub(crate) fn count(&self, row: usize) -> Result<usize> {
        let v = self.integer(row)?;
        usize::try_from(v).map_err(|_| self.fail(row, format!("`{v}` is too large")))
    }

    /// A BLAS operand flag: `T` (transposed) or `N` (as stored), any case.
    pub(crate) fn transposed(&self, row: usize) -> Result<bool> {
        let s = self.text(row)?;
        match s.to_ascii_uppercase().as_str() {
            "T" => Ok(true),
            "N" => Ok(false),
            _ => Err(self.fail(row, format!("`{s}` is neither `N` nor `T`"))),
        }
    }

    /// `True`/`False`/`1`/`0` in any case.
    pub(crate) fn flag(&self, row: usize) -> Result<bool> {
        let s = self.text(row)?;
        parse_flag(s).ok_or_else(|| self.fail(row, format!("`{s}` is not true or false")))
    }
}

/// Longest message about one cell: a cell's value is echoed, so a huge cell would make a huge
/// error line.
const MAX_MESSAGE: usize = 200;

/// `message` cut to [`MAX_MESSAGE`] bytes ([`crate::clip_text`]), its line breaks written
/// `\n` so an error stays one line (a quoted cell may hold them).
pub(crate) fn clip(message: &str) -> std::borrow::Cow<'_, str> {
    let clipped = crate::clip_text(message, MAX_MESSAGE);
    if clipped.contains(['\n', '\r']) {
        clipped.replace('\n', "\\n").replace('\r', "\\r").into()
    } else {
        clipped
    }
}

/// Longest header [`check_header`] reads.
const MAX_HEADER: u64 = 1 << 20;

/// Refuses a header that names a column twice (polars would rename the second copy and the
/// importer would read the first silently). Reads at most [`MAX_HEADER`] bytes; a header
/// longer than that is checked up to its last whole name.
fn check_header(path: &Path) -> Result<()> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| super::cannot_read(path, &e))?;
    let mut head = Vec::new();
    file.take(MAX_HEADER)
        .read_to_end(&mut head)
        .map_err(|e| super::cannot_read(path, &e))?;
    let text = String::from_utf8_lossy(&head);
    let (mut names, ended) = header_names(&text);
    if !ended && (head.len() as u64) == MAX_HEADER {
        names.pop();
    }
    let mut seen = std::collections::HashSet::new();
    for name in &names {
        let name = name.trim();
        if !name.is_empty() && !seen.insert(name) {
            return Err(Error::schema(
                path,
                format!("line 1: the header names column `{}` twice", clip(name)),
            ));
        }
    }
    Ok(())
}

/// The column names of a CSV header at the start of `text` as RFC 4180 writes them (a quoted
/// name may hold commas, newlines and doubled quotes), and whether a line break outside quotes
/// ended it (else `text` ran out first).
fn header_names(text: &str) -> (Vec<String>, bool) {
    let (mut names, mut name, mut quoted) = (Vec::new(), String::new(), false);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                name.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => names.push(std::mem::take(&mut name)),
            '\n' | '\r' if !quoted => {
                names.push(name);
                return (names, true);
            }
            c => name.push(c),
        }
    }
    names.push(name);
    (names, false)
}

/// Parses an integer, accepting a float spelling with no fraction (`3.0`).
pub(crate) fn parse_integer(s: &str) -> std::result::Result<i64, String> {
    if let Ok(v) = s.parse::<i64>() {
        return Ok(v);
    }
    match s.parse::<f64>() {
        Ok(v) if v.is_nan() => Err(format!("`{s}` is NaN")),
        Ok(v) if v.is_finite() && v.fract() == 0.0 && v.abs() < 9.0e15 => Ok(v as i64),
        Ok(_) => Err(format!("`{s}` is not an integer")),
        Err(_) => Err(format!("`{s}` is not a number")),
    }
}

/// `true`/`false`/`1`/`0`, any case.
pub(crate) fn parse_flag(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "1" | "1.0" | "yes" => Some(true),
        "false" | "0" | "0.0" | "no" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_read_as_csv_quotes_and_all() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("q.csv");
        // A quoted name holding a comma is one name, not a repeated half of one.
        std::fs::write(&path, "\"a, b\",a,\" b\"\"x\"\"\"\n1,2,3\n").unwrap();
        check_header(&path).unwrap();
        assert_eq!(
            header_names("\"a, b\",a,\"line\nbreak\"\nrest").0,
            ["a, b", "a", "line\nbreak"]
        );
        // A header over the read is checked up to its last whole name.
        let long: Vec<String> = (0..200_000).map(|i| format!("c{i}")).collect();
        std::fs::write(&path, format!("{}\n1\n", long.join(","))).unwrap();
        check_header(&path).unwrap();
        // A real repeat is still named, and a cell's line break stays on one line.
        std::fs::write(&path, "m,n,m\n1,2,3\n").unwrap();
        let e = check_header(&path).unwrap_err().to_string();
        assert!(e.contains("names column `m` twice"), "{e}");
        std::fs::write(&path, "a\n\"1\n2\"\n").unwrap();
        let f = CsvFile::read(&path).unwrap();
        let e = f.column("a").unwrap().integer(0).unwrap_err().to_string();
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains("`1\\n2`"), "{e}");
    }

    #[test]
    fn integers_accept_whole_floats_only() {
        assert_eq!(parse_integer("7"), Ok(7));
        assert_eq!(parse_integer("7.0"), Ok(7));
        assert!(parse_integer("7.5").unwrap_err().contains("not an integer"));
        assert!(parse_integer("NaN").unwrap_err().contains("NaN"));
        assert!(parse_integer("seven").unwrap_err().contains("not a number"));
    }

    #[test]
    fn cells_are_checked_with_file_line_and_column() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("t.csv");
        std::fs::write(&path, "a,b,c\n1,2.5,x\n-3,NaN,\n").unwrap();
        let f = CsvFile::read(&path).unwrap();
        assert_eq!(f.rows(), 2);
        let a = f.column("a").unwrap();
        assert_eq!(a.integer(0).unwrap(), 1);
        let err = a.integer(1).unwrap_err().to_string();
        assert!(
            err.contains("t.csv") && err.contains("line 3") && err.contains("`a`"),
            "{err}"
        );
        assert!(err.contains("`-3` is negative"), "{err}");
        let b = f.column("b").unwrap();
        assert_eq!(b.time_ms(0, 1.0).unwrap(), 2.5);
        assert!(
            b.number(1)
                .unwrap_err()
                .to_string()
                .contains("`NaN` is NaN")
        );
        let c = f.column("c").unwrap();
        assert!(
            c.number(0)
                .unwrap_err()
                .to_string()
                .contains("`x` is not a number")
        );
        assert!(c.text(1).unwrap_err().to_string().contains("empty"));
        let err = f.column("d").err().unwrap().to_string();
        assert!(
            err.contains("missing column `d`") && err.contains("a, b, c"),
            "{err}"
        );
    }

    /// A duplicate header was taken silently; a 5 MB cell was echoed whole.
    #[test]
    fn duplicate_headers_and_huge_cells_are_reported_in_one_short_line() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("dup.csv");
        std::fs::write(&path, "a,b,a\n1,2,3\n").unwrap();
        let err = CsvFile::read(&path).err().unwrap().to_string();
        assert!(
            err.contains("dup.csv") && err.contains("column `a` twice"),
            "{err}"
        );
        let path = tmp.path().join("big.csv");
        let cell = "9".repeat(5 << 20) + "x";
        std::fs::write(&path, format!("a\n{cell}\n")).unwrap();
        let f = CsvFile::read(&path).unwrap();
        let err = f.column("a").unwrap().number(0).unwrap_err().to_string();
        assert!(
            err.len() < 400 && !err.contains('\n'),
            "{} bytes",
            err.len()
        );
        assert!(
            err.contains("big.csv") && err.contains("more bytes"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_file_names_the_path() {
        let err = CsvFile::read(Path::new("/nonexistent/x.csv"))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("/nonexistent/x.csv"), "{err}");
    }
}
