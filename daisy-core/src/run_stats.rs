//! The statistics daisy reports, in one place: running aggregates
//! ([`Welford`]: count, mean, sample standard deviation, min, max, total in
//! O(1) memory; [`Trend`]: the least-squares slope of a series in arrival
//! order), [`LogHistogram`]: quantiles of a stream of sizes in a few KB
//! (the report's peak memory p50 / p95, the memory gate's typical block),
//! [`percentiles`] of recorded samples (`daisy report`'s p50/p95)
//! and the median baseline `daisy compare` flags regressions against
//! ([`compare_to_baseline`]). Python formats these; it computes none.
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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

/// The fewest measured blocks a trend is shown over: below it a
/// least-squares slope of block times is mostly noise (the first blocks'
/// warm-up alone tilts it), and a slope of 7 blocks read "-726 ms/block".
/// Ten keeps the specification's own example (12 blocks on 3 workers,
/// RUN_STATS.md) and leaves out the handfuls.
pub const TREND_MIN_BLOCKS: u64 = 10;

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

    /// How many points were added.
    pub fn count(&self) -> u64 {
        self.n as u64
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

/// Buckets per doubling of the report's histograms: quantiles within 2.2 %.
pub const REPORT_PER_OCTAVE: u32 = 32;

/// Quantiles of a stream of positive sizes (bytes) in constant memory: a
/// histogram of `per_octave` buckets per doubling, over the 64 doublings
/// of a `u64`. An estimate is a bucket's upper end, at most
/// `2^(1/per_octave)` above the figure it stands for: 19 % with 4
/// buckets per doubling (the memory gate's, 1 KB per task), 2.2 % with 32
/// (the report's, 8 KB per task). Written by hand rather than with
/// `hdrhistogram`: two operations on one `Vec<u32>`, where that crate
/// brings its own serialisation and sizing rules.
#[derive(Clone, Debug, PartialEq)]
pub struct LogHistogram {
    per_octave: u32,
    buckets: Vec<u32>,
    count: u64,
}

impl LogHistogram {
    /// An empty histogram of `per_octave` (at least 1) buckets per doubling.
    pub fn new(per_octave: u32) -> Self {
        let per_octave = per_octave.max(1);
        Self {
            per_octave,
            buckets: vec![0; (64 * per_octave) as usize],
            count: 0,
        }
    }

    fn bucket(&self, size: u64) -> usize {
        let b = size.max(1) as f64;
        ((b.log2() * f64::from(self.per_octave)).ceil().max(0.0) as usize)
            .min(self.buckets.len() - 1)
    }

    /// Count one size.
    pub fn push(&mut self, size: u64) {
        let i = self.bucket(size);
        self.buckets[i] = self.buckets[i].saturating_add(1);
        self.count += 1;
    }

    /// How many sizes were counted.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The `q` quantile (0..=1): the upper end of the bucket that holds it;
    /// None before any size was counted.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let want = ((self.count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0u64;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += u64::from(n);
            if seen >= want {
                return Some(2f64.powf(i as f64 / f64::from(self.per_octave)) as u64);
            }
        }
        None
    }
}

/// The `qs`-th percentiles (each in 0..=100) of `samples`, non-finite
/// samples left out, by linear interpolation between the two nearest
/// ranks: numpy's default (`np.percentile(x, q)`), which users compare
/// against. None when no sample is finite.
pub fn percentiles(samples: impl IntoIterator<Item = f64>, qs: &[f64]) -> Option<Vec<f64>> {
    let mut sorted: Vec<f64> = samples.into_iter().filter(|x| x.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let last = (sorted.len() - 1) as f64;
    Some(
        qs.iter()
            .map(|q| {
                let rank = (q.clamp(0.0, 100.0) / 100.0) * last;
                let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
                sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
            })
            .collect(),
    )
}

/// One figure of a run set against the median of earlier runs (`daisy
/// compare`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Comparison {
    /// The median of the earlier runs' figures.
    pub median: f64,
    /// The figure over that median; None where the median is 0.
    pub ratio: Option<f64>,
    /// Whether the figure is a regression (see [`compare_to_baseline`]).
    pub flagged: bool,
}

/// `now` against the median of `before`: flagged when it grew by more than
/// `factor` over it. A count that should be zero (`zero_is_normal`, failed
/// attempts) is flagged also when it appears where the median had none;
/// any other figure needs a median above 0 to be judged. None without a
/// baseline (no finite earlier figure) or for a non-finite `now`.
pub fn compare_to_baseline(
    now: f64,
    before: &[f64],
    factor: f64,
    zero_is_normal: bool,
) -> Option<Comparison> {
    if !now.is_finite() {
        return None;
    }
    let median = percentiles(before.iter().copied(), &[50.0])?[0];
    let grew = now > factor * median;
    let flagged = if zero_is_normal {
        now > 0.0 && (median == 0.0 || grew)
    } else {
        median > 0.0 && grew
    };
    Some(Comparison {
        median,
        ratio: (median != 0.0).then(|| now / median),
        flagged,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_between_ranks_as_numpy_does() {
        // np.percentile([4, 1, 3, 2, nan], [0, 50, 95, 100]) without the nan
        let p = percentiles([4.0, 1.0, 3.0, 2.0, f64::NAN], &[0.0, 50.0, 95.0, 100.0]).unwrap();
        assert_eq!(p[0], 1.0);
        assert_eq!(p[1], 2.5);
        assert!((p[2] - 3.85).abs() < 1e-12);
        assert_eq!(p[3], 4.0);
        assert_eq!(percentiles([7.0], &[95.0]), Some(vec![7.0]));
        assert_eq!(percentiles([f64::NAN], &[50.0]), None);
    }

    #[test]
    fn a_figure_is_flagged_when_it_grows_past_the_factor() {
        let c = compare_to_baseline(30.0, &[10.0, 12.0, 11.0], 1.5, false).unwrap();
        assert_eq!(c.median, 11.0);
        assert!(c.flagged && (c.ratio.unwrap() - 30.0 / 11.0).abs() < 1e-12);
        assert!(
            !compare_to_baseline(15.0, &[10.0, 12.0], 1.5, false)
                .unwrap()
                .flagged
        );
        // a figure whose baseline is 0 is not judged, a failure count is
        assert!(
            !compare_to_baseline(5.0, &[0.0, 0.0], 1.5, false)
                .unwrap()
                .flagged
        );
        let failures = compare_to_baseline(5.0, &[0.0, 0.0], 1.5, true).unwrap();
        assert!(failures.flagged && failures.ratio.is_none());
        assert!(!compare_to_baseline(0.0, &[0.0], 1.5, true).unwrap().flagged);
        assert_eq!(compare_to_baseline(1.0, &[], 1.5, false), None);
    }

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
