//! CSV reports (held-out predictions, mapped profiles): one writer, RFC 4180 quoting where a
//! field needs it, written atomically like every other output.

use std::path::Path;

use crate::atomic::write_atomic_with;
use crate::error::{Error, Result};

/// Writes `header` and `records` as CSV to `path`, atomically (a temp file renamed over it).
/// Every record should have the header's width.
pub fn write_csv<H: AsRef<str>, S: AsRef<str>>(
    path: &Path,
    header: &[H],
    records: &[Vec<S>],
) -> Result<()> {
    write_atomic_with(path, |file| {
        let mut w = csv::Writer::from_writer(std::io::BufWriter::new(file));
        let written = w
            .write_record(header.iter().map(AsRef::as_ref))
            .and_then(|()| {
                records
                    .iter()
                    .try_for_each(|r| w.write_record(r.iter().map(AsRef::as_ref)))
            })
            .and_then(|()| w.flush().map_err(csv::Error::from));
        written.map_err(|e| Error::Io {
            action: "write",
            path: path.to_path_buf(),
            source: std::io::Error::other(e),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_quoted_only_where_needed_and_the_file_reads_back() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("out.csv");
        write_csv(
            &path,
            &["name", "ms"],
            &[
                vec!["plain", "1.5"],
                vec!["a, b", "2"],
                vec!["say \"hi\"", "3"],
            ],
        )
        .expect("write");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(
            text,
            "name,ms\nplain,1.5\n\"a, b\",2\n\"say \"\"hi\"\"\",3\n"
        );
        // No temp file is left beside it.
        let files: Vec<_> = std::fs::read_dir(tmp.path()).expect("dir").collect();
        assert_eq!(files.len(), 1);
    }
}
