//! Running aggregates: [`Welford`] (count, mean, sample standard
//! deviation, min, max, total in O(1) memory) and [`Trend`] (the
//! least-squares slope of a series in arrival order).
//!
//! The run report is a fold over these, fed as blocks complete, so a run of
//! 10^9 blocks needs the same few bytes per metric as a run of ten, and a
//! resumed run only aggregates what it actually ran.

use serde::{Deserialize, Serialize};

/// Welford's online mean and variance, with min, max and total.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Welford {
    n: u64,
    mean: f64,
    m2: f64,
    min: f64,
    max: f64,
    total: f64,
}

/// A finished distribution, as the report writes it (`sum` is the total).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatSummary {
    /// Number of samples.
    pub n: u64,
    /// Mean.
    pub mean: f64,
    /// Sample standard deviation (0 with fewer than two samples).
    pub std: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// Sum of the samples.
    pub sum: f64,
}

impl Welford {
    /// Add one sample (non-finite samples are ignored).
    pub fn push(&mut self, x: f64) {
        if !x.is_finite() {
            return;
        }
        self.n += 1;
        if self.n == 1 {
            self.min = x;
            self.max = x;
        } else {
            self.min = self.min.min(x);
            self.max = self.max.max(x);
        }
        self.total += x;
        let delta = x - self.mean;
        self.mean += delta / self.n as f64;
        self.m2 += delta * (x - self.mean);
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.n
    }

    /// Fold another accumulator into this one (Chan et al.).
    pub fn merge(&mut self, other: &Welford) {
        if other.n == 0 {
            return;
        }
        if self.n == 0 {
            *self = *other;
            return;
        }
        let n = self.n + other.n;
        let delta = other.mean - self.mean;
        self.m2 += other.m2 + delta * delta * (self.n as f64 * other.n as f64) / n as f64;
        self.mean += delta * other.n as f64 / n as f64;
        self.n = n;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.total += other.total;
    }

    /// The distribution so far.
    pub fn summary(&self) -> StatSummary {
        StatSummary {
            n: self.n,
            mean: self.mean,
            std: if self.n > 1 {
                (self.m2 / (self.n - 1) as f64).max(0.0).sqrt()
            } else {
                0.0
            },
            min: self.min,
            max: self.max,
            sum: self.total,
        }
    }
}

/// Least-squares slope of `y` against its index (0, 1, 2, ...), online.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Trend {
    n: f64,
    sum_x: f64,
    sum_y: f64,
    sum_xx: f64,
    sum_xy: f64,
}

impl Trend {
    /// Add the next value of the series.
    pub fn push(&mut self, y: f64) {
        if !y.is_finite() {
            return;
        }
        let x = self.n;
        self.n += 1.0;
        self.sum_x += x;
        self.sum_y += y;
        self.sum_xx += x * x;
        self.sum_xy += x * y;
    }

    /// The slope per step (0 with fewer than two values).
    pub fn slope(&self) -> f64 {
        let denom = self.n * self.sum_xx - self.sum_x * self.sum_x;
        if self.n < 2.0 || denom == 0.0 {
            return 0.0;
        }
        (self.n * self.sum_xy - self.sum_x * self.sum_y) / denom
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn welford_matches_the_two_pass_formulas() {
        let xs = [3.0, 1.5, 4.0, 1.0, 5.5, 9.0, 2.5];
        let mut w = Welford::default();
        for x in xs {
            w.push(x);
        }
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        let s = w.summary();
        assert_eq!(s.n, 7);
        assert!((s.mean - mean).abs() < 1e-12);
        assert!((s.std - var.sqrt()).abs() < 1e-12);
        assert_eq!((s.min, s.max), (1.0, 9.0));
        assert!((s.sum - xs.iter().sum::<f64>()).abs() < 1e-12);
        w.push(f64::NAN);
        assert_eq!(w.count(), 7, "NaN is not a sample");
    }

    #[test]
    fn merging_equals_pushing_everything() {
        let mut a = Welford::default();
        let mut b = Welford::default();
        let mut all = Welford::default();
        for i in 0..50 {
            let x = (i as f64 * 0.37).sin() * 10.0;
            all.push(x);
            if i % 3 == 0 { a.push(x) } else { b.push(x) }
        }
        a.merge(&b);
        let (m, e) = (a.summary(), all.summary());
        assert_eq!(m.n, e.n);
        assert!((m.mean - e.mean).abs() < 1e-9 && (m.std - e.std).abs() < 1e-9);
    }

    #[test]
    fn trend_is_the_least_squares_slope() {
        let mut t = Trend::default();
        for i in 0..10 {
            t.push(2.0 + 0.5 * i as f64);
        }
        assert!((t.slope() - 0.5).abs() < 1e-12);
        let mut flat = Trend::default();
        flat.push(1.0);
        assert_eq!(flat.slope(), 0.0);
    }
}
