//! SplitMix64 (Steele et al., 2014): the one deterministic generator perfcast uses (splits,
//! shuffles, model fits, request mixes, test data), so a seed gives the same draws on every
//! machine without depending on the `rand` crate's algorithm choices, which change between
//! its versions.

/// A SplitMix64 stream.
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The stream of `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n >= 1; modulo bias below 2^-40 for the sizes perfcast draws).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// `items` shuffled in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }
}

/// `0..len` shuffled by `seed` (Fisher-Yates over [`SplitMix64`]): the same on every machine,
/// different for every seed.
pub fn shuffled(len: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..len).collect();
    SplitMix64(seed).shuffle(&mut order);
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffles_are_permutations_fixed_by_the_seed() {
        let a = shuffled(100, 7);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
        assert_eq!(a, shuffled(100, 7));
        assert_ne!(a, shuffled(100, 8));
        // The reference stream (Vigna's splitmix64.c, seed 0): first output.
        assert_eq!(SplitMix64(0).next_u64(), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn uniform_draws_stay_in_their_range() {
        let mut rng = SplitMix64::new(3);
        for _ in 0..1000 {
            let u = rng.uniform(-2.0, 5.0);
            assert!((-2.0..5.0).contains(&u), "{u}");
            assert!(rng.below(7) < 7);
        }
    }
}
