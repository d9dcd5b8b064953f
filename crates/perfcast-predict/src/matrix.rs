//! A dense row-major f64 matrix: the feature table every model reads.

use serde::{Deserialize, Serialize};

/// Row-major matrix of `rows x cols` values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Matrix {
    rows: usize,
    cols: usize,
    data: Vec<f64>,
}

impl Matrix {
    /// An empty matrix with `cols` columns.
    pub fn with_cols(cols: usize) -> Matrix {
        Matrix {
            rows: 0,
            cols,
            data: Vec::new(),
        }
    }

    /// Builds from row-major data; `data.len()` must be `rows * cols`.
    pub fn from_vec(rows: usize, cols: usize, data: Vec<f64>) -> Matrix {
        assert_eq!(data.len(), rows * cols, "matrix data length");
        Matrix { rows, cols, data }
    }

    /// Appends a row of width `cols`.
    pub fn push_row(&mut self, row: &[f64]) {
        assert_eq!(row.len(), self.cols, "row width");
        self.data.extend_from_slice(row);
        self.rows += 1;
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f64] {
        &self.data[i * self.cols..(i + 1) * self.cols]
    }

    /// Iterator over rows.
    pub fn iter_rows(&self) -> impl Iterator<Item = &[f64]> {
        self.data.chunks_exact(self.cols.max(1)).take(self.rows)
    }

    /// A matrix of the rows at `indices`, in that order.
    pub fn select(&self, indices: &[usize]) -> Matrix {
        let mut data = Vec::with_capacity(indices.len() * self.cols);
        for &i in indices {
            data.extend_from_slice(self.row(i));
        }
        Matrix {
            rows: indices.len(),
            cols: self.cols,
            data,
        }
    }

    /// Column `j` as a vector.
    pub fn column(&self, j: usize) -> Vec<f64> {
        self.iter_rows().map(|r| r[j]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_and_rows() {
        let mut m = Matrix::with_cols(2);
        m.push_row(&[1.0, 2.0]);
        m.push_row(&[3.0, 4.0]);
        m.push_row(&[5.0, 6.0]);
        let s = m.select(&[2, 0]);
        assert_eq!(s.row(0), &[5.0, 6.0]);
        assert_eq!(s.row(1), &[1.0, 2.0]);
        assert_eq!(m.column(1), vec![2.0, 4.0, 6.0]);
        assert_eq!(m.iter_rows().count(), 3);
    }
}
