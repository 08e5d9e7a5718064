//! The runs that did each block, for comparing like with like: a block's
//! wall time in its latest run and the [`EARLIER_RUNS`] before, each with
//! its dispatch time (the `wall_seconds*` and `sent_at*` arrays), read
//! back to set one run against another on the blocks both did.
//!
//! A run is told by its time window (its report's `started_at` to
//! `finished_at`): a block dispatched inside it was done by it. Old stores
//! have only the latest figures (the earlier arrays are made empty when a
//! run with resource tracking next opens them): their runs compare on the
//! blocks whose latest run they were.

use super::TrackingStore;
use super::arrays::EARLIER_RUNS;
use crate::error::DaisyError;
use std::path::Path;

/// Two runs set against each other on the blocks both did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CommonBlocks {
    /// Blocks both runs did.
    pub count: u64,
    /// Their wall seconds in the one run, summed.
    pub wall_seconds: f64,
    /// And in the other.
    pub other_wall_seconds: f64,
}

fn f32s(path: &Path, name: &str) -> Result<Option<Vec<f64>>, DaisyError> {
    Ok(TrackingStore::read_array(path, name)?.map(|a| {
        a.bytes
            .chunks_exact(4)
            .map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .collect()
    }))
}

fn f64s(path: &Path, name: &str) -> Result<Option<Vec<f64>>, DaisyError> {
    Ok(TrackingStore::read_array(path, name)?.map(|a| {
        a.bytes
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
            .collect()
    }))
}

/// The blocks of the store at `path` that the run of time window `run`
/// and the run of window `other` both did, with their wall seconds in
/// each; None for a store without measured blocks.
pub fn common_blocks(
    path: &Path,
    run: (f64, f64),
    other: (f64, f64),
) -> Result<Option<CommonBlocks>, DaisyError> {
    let (Some(wall), Some(sent)) = (f32s(path, "wall_seconds")?, f64s(path, "sent_at")?) else {
        return Ok(None);
    };
    let mut walls = vec![wall];
    let mut sents = vec![sent];
    for k in 1..=EARLIER_RUNS {
        if let (Some(w), Some(s)) = (
            f32s(path, &format!("wall_seconds_{k}"))?,
            f64s(path, &format!("sent_at_{k}"))?,
        ) {
            walls.push(w);
            sents.push(s);
        }
    }
    let within = |t: f64, (a, b): (f64, f64)| t >= a && t <= b;
    let mut out = CommonBlocks {
        count: 0,
        wall_seconds: 0.0,
        other_wall_seconds: 0.0,
    };
    let cells = walls[0].len().min(sents[0].len());
    for cell in 0..cells {
        let find = |window: (f64, f64)| {
            (0..walls.len()).find_map(|k| {
                let (w, s) = (*walls[k].get(cell)?, *sents[k].get(cell)?);
                (!w.is_nan() && within(s, window)).then_some(w)
            })
        };
        if let (Some(a), Some(b)) = (find(run), find(other)) {
            out.count += 1;
            out.wall_seconds += a;
            out.other_wall_seconds += b;
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_grid::BlockGrid;
    use crate::block_profile::BlockStats;
    use crate::geometry::Roi;
    use crate::task_spec::{Fit, TaskSpec};

    fn took(wall_seconds: f64) -> BlockStats {
        BlockStats {
            wall_seconds,
            cpu_seconds: 0.0,
            peak_rss_bytes: 0,
            io_read_bytes: 0,
            io_write_bytes: 0,
            gpu_util_pct: f32::NAN,
            gpu_mem_bytes: 0,
            run_queue_seconds: 0.0,
        }
    }

    #[test]
    fn a_partial_rerun_is_set_against_the_run_before_on_the_blocks_both_did() {
        let path = std::env::temp_dir().join(format!("daisy-block-history-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        let roi = |o: &[i64], s: &[i64]| Roi::from_slices(o, s).unwrap();
        let spec = TaskSpec::new(
            "h",
            roi(&[0], &[80]),
            roi(&[0], &[10]),
            roi(&[0], &[10]),
            Fit::Valid,
            true,
            0,
            vec![],
        )
        .unwrap();
        let grid = BlockGrid::new(0, &spec);
        {
            let mut store = TrackingStore::open(&path, &spec, true).unwrap();
            // the first run (at 10..20 s) does all 8 blocks, 1 s each but
            // block 7, 4 s; five more runs (at 100 s, 200 s, ...) redo only
            // block 7, each a little slower
            for i in 0..8 {
                let wall = if i == 7 { 4.0 } else { 1.0 };
                store.record_stats(&grid.block(i), &took(wall), None, 11.0, 12.0);
            }
            for r in 1..=5 {
                let at = 100.0 * f64::from(r);
                store.record_stats(
                    &grid.block(7),
                    &took(4.0 + 0.1 * f64::from(r)),
                    None,
                    at,
                    at + 1.0,
                );
            }
        }
        // the fifth rerun against the fourth: block 7 only
        let c = common_blocks(&path, (499.0, 510.0), (399.0, 410.0))
            .unwrap()
            .unwrap();
        assert_eq!(c.count, 1);
        assert!((c.wall_seconds - 4.5).abs() < 1e-6 && (c.other_wall_seconds - 4.4).abs() < 1e-6);
        // against the first run: its figure of block 7 is more than three
        // runs back and gone, so nothing in common; the other blocks were
        // never redone
        let gone = common_blocks(&path, (499.0, 510.0), (10.0, 20.0))
            .unwrap()
            .unwrap();
        assert_eq!(gone.count, 0);
        // the store keeps block 7's latest four runs (200..500 s): the
        // second and third reruns are both among them
        let kept = common_blocks(&path, (299.0, 310.0), (199.0, 210.0))
            .unwrap()
            .unwrap();
        assert_eq!(kept.count, 1);
        assert!(
            (kept.wall_seconds - 4.3).abs() < 1e-6 && (kept.other_wall_seconds - 4.2).abs() < 1e-6
        );
        std::fs::remove_dir_all(&path).unwrap();
    }
}
