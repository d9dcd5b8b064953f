//! Numbers as perfcast prints them.

/// `v` with three significant digits (`12.3`, `0.0123`, `1234`); zero and non-finite values
/// as they are.
pub fn sig3(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let digits = (2 - v.abs().log10().floor() as i32).max(0) as usize;
    format!("{v:.digits$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_significant_digits() {
        assert_eq!(sig3(12.345), "12.3");
        assert_eq!(sig3(0.012345), "0.0123");
        assert_eq!(sig3(1234.5), "1234");
        assert_eq!(sig3(0.0), "0");
        assert_eq!(sig3(f64::NAN), "NaN");
    }
}
