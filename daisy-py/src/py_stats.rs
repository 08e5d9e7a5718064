//! The core's statistics for Python's readers (`daisy report`, `daisy
//! compare`): conversion only; the rules are in `daisy_core::run_stats`.

use crate::errors::IntoPyResult;
use daisy_core::tracking_store::TrackingStore;
use pyo3::prelude::*;
use std::path::PathBuf;

/// The `qs`-th percentiles (0-100) of the block wall times recorded in the
/// tracking store at `path`, or None when it recorded none.
#[pyfunction]
pub fn store_wall_percentiles(path: PathBuf, qs: Vec<f64>) -> PyResult<Option<Vec<f64>>> {
    TrackingStore::wall_percentiles(&path, &qs).py()
}

/// `now` against the median of `before`: `(median, ratio or None,
/// flagged)`, flagged when it grew by more than `factor` (a count that
/// should be zero, `zero_is_normal`, also when it appears where the median
/// had none); None without a baseline.
#[pyfunction]
pub fn compare_to_baseline(
    now: f64,
    before: Vec<f64>,
    factor: f64,
    zero_is_normal: bool,
) -> Option<(f64, Option<f64>, bool)> {
    daisy_core::run_stats::compare_to_baseline(now, &before, factor, zero_is_normal)
        .map(|c| (c.median, c.ratio, c.flagged))
}

/// The blocks of the tracking store at `path` that the run of time window
/// `run` (its report's started and finished times) and the run of window
/// `other` both did: `(count, run's wall seconds summed, other's)`; None
/// for a store without measured blocks.
#[pyfunction]
pub fn common_blocks(
    path: PathBuf,
    run: (f64, f64),
    other: (f64, f64),
) -> PyResult<Option<(u64, f64, f64)>> {
    let found = daisy_core::tracking_store::block_history::common_blocks(&path, run, other).py()?;
    Ok(found.map(|c| (c.count, c.wall_seconds, c.other_wall_seconds)))
}
