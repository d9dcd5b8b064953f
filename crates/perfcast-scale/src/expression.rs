//! The generic performance expression `T(p, b, n)`: training time as a sum of named terms,
//! each a constant times a function of the extrinsic scaling factors.
//!
//! The factors: `p` processors (GPUs, nodes, or CPU threads), `b` the batch size per step,
//! `n` the samples processed (an epoch of `n` samples is `n / b` steps). The constants are
//! intrinsic: what the workload costs on the hardware and framework at hand, fitted to
//! measured runs ([`crate::fit`]). Every term is non-negative and has a meaning:
//!
//! | term         | factor            | constant's meaning                                               |
//! |--------------|-------------------|------------------------------------------------------------------|
//! | `startup`    | `1`               | seconds per run: start-up, first-iteration warm-up, data set-up  |
//! | `compute`    | `n / p`           | seconds per sample of work split evenly over the processors     |
//! | `serial`     | `n`               | seconds per sample that do not parallelise (Amdahl's serial part)|
//! | `step`       | `n / b`           | seconds per step, whatever `p`: launches, update, framework      |
//! | `sync`       | `(n / b) log2 p`  | seconds per step per doubling of `p`: tree-like synchronisation  |
//! | `comm`       | `(n / b) (p-1)/p` | seconds per step: bandwidth-bound gradient all-reduce (ring)     |
//! | `contention` | `n (p - 1)`       | seconds per sample per extra processor: shared memory bandwidth, |
//! |              |                   | oversubscription (the coherency term of Gunther's USL)           |
//!
//! The first four are *intrinsic* terms: they exist on one processor too. The last three are
//! *extrinsic*: zero at `p = 1`, the price of scaling out. At `p = 1`,
//! `T = startup + (compute + serial) n + step n / b`: the step count times a per-step
//! overhead plus per-sample work. That is the shape of a training run: `n / b` steps, each a
//! fixed overhead plus `b` samples of compute divided by the speed-up of `p` processors; the
//! extrinsic terms bend the speed-up away from `p`.
//!
//! The default expression is the first four plus `sync` and `contention`, which fits both
//! CPU-thread runs and multi-GPU runs whose all-reduce is latency-bound; add `comm` for
//! multi-GPU runs whose gradient exchange is bandwidth-bound.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// One run's scaling factors.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Processors.
    pub p: f64,
    /// Batch size.
    pub b: f64,
    /// Samples processed.
    pub n: f64,
}

/// One term of the expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Term {
    /// `1`: a fixed cost per run.
    Startup,
    /// `n / p`: parallel per-sample work.
    Compute,
    /// `n`: per-sample work that does not parallelise.
    Serial,
    /// `n / b`: per-step overhead.
    Step,
    /// `(n / b) log2 p`: per-step synchronisation growing with log p.
    Sync,
    /// `(n / b) (p - 1) / p`: per-step bandwidth-bound all-reduce.
    Comm,
    /// `n (p - 1)`: per-sample contention growing with every extra processor.
    Contention,
}

impl Term {
    /// Every term, in display order.
    pub const ALL: [Term; 7] = [
        Term::Startup,
        Term::Compute,
        Term::Serial,
        Term::Step,
        Term::Sync,
        Term::Comm,
        Term::Contention,
    ];

    /// The default expression's terms.
    pub const DEFAULT: [Term; 6] = [
        Term::Startup,
        Term::Compute,
        Term::Serial,
        Term::Step,
        Term::Sync,
        Term::Contention,
    ];

    /// Name in files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Term::Startup => "startup",
            Term::Compute => "compute",
            Term::Serial => "serial",
            Term::Step => "step",
            Term::Sync => "sync",
            Term::Comm => "comm",
            Term::Contention => "contention",
        }
    }

    /// The factor the constant multiplies, as a formula.
    pub fn formula(self) -> &'static str {
        match self {
            Term::Startup => "1",
            Term::Compute => "n/p",
            Term::Serial => "n",
            Term::Step => "n/b",
            Term::Sync => "(n/b)*log2(p)",
            Term::Comm => "(n/b)*(p-1)/p",
            Term::Contention => "n*(p-1)",
        }
    }

    /// What the constant means, with its unit.
    pub fn meaning(self) -> &'static str {
        match self {
            Term::Startup => "seconds per run: start-up, warm-up, data set-up",
            Term::Compute => "seconds per sample of work split evenly over the processors",
            Term::Serial => "seconds per sample that do not parallelise (Amdahl's serial part)",
            Term::Step => "seconds per step whatever p: launches, optimiser update, framework",
            Term::Sync => "seconds per step per doubling of p: synchronisation, tree all-reduce",
            Term::Comm => "seconds per step at large p: bandwidth-bound gradient all-reduce",
            Term::Contention => {
                "seconds per sample per extra processor: contention, oversubscription"
            }
        }
    }

    /// Whether the term is zero on one processor (a cost of scaling out).
    pub fn extrinsic(self) -> bool {
        matches!(self, Term::Sync | Term::Comm | Term::Contention)
    }

    /// The factor at a point.
    pub fn factor(self, x: Point) -> f64 {
        let steps = x.n / x.b;
        match self {
            Term::Startup => 1.0,
            Term::Compute => x.n / x.p,
            Term::Serial => x.n,
            Term::Step => steps,
            Term::Sync => steps * x.p.log2(),
            Term::Comm => steps * (x.p - 1.0) / x.p,
            Term::Contention => x.n * (x.p - 1.0),
        }
    }
}

impl std::str::FromStr for Term {
    type Err = Error;
    fn from_str(s: &str) -> Result<Term> {
        let s = s.trim().to_ascii_lowercase();
        Term::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Term::ALL.iter().map(|t| t.name()).collect();
                Error::invalid(
                    "term",
                    format!("unknown term `{s}` (known: {})", names.join(", ")),
                )
            })
    }
}

/// A sum of distinct terms.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expression {
    /// The terms, in display order.
    pub terms: Vec<Term>,
}

impl Default for Expression {
    fn default() -> Self {
        Expression {
            terms: Term::DEFAULT.to_vec(),
        }
    }
}

impl Expression {
    /// An expression of these terms: at least one, none twice, kept in display order.
    pub fn new(terms: &[Term]) -> Result<Expression> {
        if terms.is_empty() {
            return Err(Error::invalid("expression", "it needs at least one term"));
        }
        let mut sorted = terms.to_vec();
        sorted.sort();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::invalid(
                "expression",
                format!("term `{}` appears twice", w[0].name()),
            ));
        }
        Ok(Expression { terms: sorted })
    }

    /// Parses `startup,compute,...`; `default` stands for the default terms
    /// (`default,comm` adds one).
    pub fn parse(text: &str) -> Result<Expression> {
        let mut terms = Vec::new();
        for part in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if part.eq_ignore_ascii_case("default") {
                terms.extend(Term::DEFAULT);
            } else {
                terms.push(part.parse()?);
            }
        }
        Expression::new(&terms)
    }

    /// Number of constants.
    pub fn len(&self) -> usize {
        self.terms.len()
    }

    /// Whether it has no terms (never, for one built by [`Expression::new`]).
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// `T = sum c_i f_i(p, b, n)`, the constants in term order.
    pub fn eval(&self, constants: &[f64], x: Point) -> f64 {
        self.terms
            .iter()
            .zip(constants)
            .map(|(t, c)| c * t.factor(x))
            .sum()
    }

    /// Each term's seconds at a point.
    pub fn breakdown(&self, constants: &[f64], x: Point) -> Vec<(Term, f64)> {
        self.terms
            .iter()
            .zip(constants)
            .map(|(t, c)| (*t, c * t.factor(x)))
            .collect()
    }

    /// The formula, e.g. `T = c_startup + c_compute*n/p`.
    pub fn formula(&self) -> String {
        let parts: Vec<String> = self
            .terms
            .iter()
            .map(|t| match t {
                Term::Startup => "c_startup".to_string(),
                _ => format!("c_{}*{}", t.name(), t.formula()),
            })
            .collect();
        format!("T(p,b,n) = {}", parts.join(" + "))
    }
}

impl Point {
    /// Checks that every factor is a positive finite number and `p` is at least 1 (`n` may
    /// be below `b`: the step count `n / b` is then a fraction).
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [("p", self.p), ("b", self.b), ("n", self.n)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::invalid(
                    "point",
                    format!("`{name}` must be a positive number, got {v}"),
                ));
            }
        }
        if self.p < 1.0 {
            return Err(Error::invalid(
                "point",
                format!("`p` must be at least 1, got {}", self.p),
            ));
        }
        Ok(())
    }

    /// Parses `p=4,b=64,n=10000` (any order).
    pub fn parse(text: &str) -> Result<Point> {
        let (mut p, mut b, mut n) = (None, None, None);
        let bad = |m: String| Error::invalid("point", format!("`{text}`: {m}"));
        for part in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("`{part}` is not `key=value`")))?;
            let v: f64 = value
                .trim()
                .parse()
                .map_err(|_| bad(format!("`{}` is not a number", value.trim())))?;
            match key.trim() {
                "p" => p = Some(v),
                "b" => b = Some(v),
                "n" => n = Some(v),
                other => return Err(bad(format!("unknown key `{other}` (expected p, b, n)"))),
            }
        }
        let need = |v: Option<f64>, k: &str| v.ok_or_else(|| bad(format!("`{k}` is missing")));
        let point = Point {
            p: need(p, "p")?,
            b: need(b, "b")?,
            n: need(n, "n")?,
        };
        point.validate()?;
        Ok(point)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_vanish_where_documented() {
        let one = Point {
            p: 1.0,
            b: 8.0,
            n: 64.0,
        };
        for t in Term::ALL {
            assert_eq!(t.extrinsic(), t.factor(one) == 0.0, "{}", t.name());
        }
        let x = Point {
            p: 4.0,
            b: 8.0,
            n: 64.0,
        };
        let got: Vec<f64> = Term::ALL.iter().map(|t| t.factor(x)).collect();
        assert_eq!(got, vec![1.0, 16.0, 64.0, 8.0, 16.0, 6.0, 192.0]);
    }

    #[test]
    fn expressions_parse_sort_and_evaluate() {
        let e = Expression::parse("step, startup").unwrap();
        assert_eq!(e.terms, vec![Term::Startup, Term::Step]);
        assert_eq!(e.formula(), "T(p,b,n) = c_startup + c_step*n/b");
        let x = Point {
            p: 2.0,
            b: 10.0,
            n: 100.0,
        };
        assert_eq!(e.eval(&[0.5, 0.1], x), 1.5);
        let d = Expression::parse("default,comm").unwrap();
        assert_eq!(d.len(), 7);
        assert!(Expression::parse("default,sync").is_err());
        let err = Expression::parse("startup,warp").unwrap_err().to_string();
        assert!(err.contains("`warp`"), "{err}");
        assert!(Expression::parse("").is_err());
    }

    #[test]
    fn points_parse_and_check() {
        let x = Point::parse("n=1000, p=2,b=32").unwrap();
        assert_eq!((x.p, x.b, x.n), (2.0, 32.0, 1000.0));
        for (text, needle) in [
            ("p=2,b=32", "`n` is missing"),
            ("p=2,b=x,n=1", "`x` is not a number"),
            ("p=0.5,b=1,n=1", "at least 1, got 0.5"),
            ("p=1,b=-1,n=1", "`b` must be a positive number, got -1"),
            ("q=1", "unknown key `q`"),
        ] {
            let e = Point::parse(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }
}
