//! One unit of work: [`Block`], its [`BlockStatus`] and the compact
//! [`BlockKey`] the scheduler identifies it by.
//!
//! A block is a plain `Copy` value (two ROIs and a few integers): the
//! scheduler creates one only when it hands it out, and forgets it when it
//! comes back, so nothing per block lives longer than the block is in
//! flight.

use crate::block_profile::BlockStats;
use crate::error::DaisyError;
use crate::geometry::{Coord, Roi};
use serde::{Deserialize, Serialize};

/// Index of a task within its pipeline (dense, `0..n_tasks`).
pub type TaskIndex = u32;

/// The scheduler's identity of a block: its task and its flat C-order index
/// on that task's placement grid (see `block_grid`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BlockKey {
    /// Which task.
    pub task: TaskIndex,
    /// Flat index on the task's placement grid.
    pub index: u64,
}

/// Where a block is in its life, as the user sets it and the scheduler
/// reads it on release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum BlockStatus {
    /// Made, not yet handed out.
    #[default]
    Created,
    /// Handed to a worker.
    Processing,
    /// Finished cleanly.
    Success,
    /// Finished with an error.
    Failed,
}

impl BlockStatus {
    /// Every status, in the order of its code.
    pub const ALL: [Self; 4] = [Self::Created, Self::Processing, Self::Success, Self::Failed];

    /// The status's number in daisy 1.x's `BlockStatus` (0 to 3), which
    /// Python code and pickles use.
    pub fn code(self) -> u8 {
        match self {
            Self::Created => 0,
            Self::Processing => 1,
            Self::Success => 2,
            Self::Failed => 3,
        }
    }

    /// The status of a daisy 1.x number; None for any other number.
    pub fn from_code(code: i64) -> Option<Self> {
        Self::ALL.into_iter().find(|s| i64::from(s.code()) == code)
    }
}

/// A block: what to read, what to write, and who it is.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Block {
    /// The scheduler's key.
    pub key: BlockKey,
    /// The stable spatial id (daisy 1.x numbering, see `block_id`).
    pub spatial_id: u64,
    /// Grid position on the task's placement grid.
    pub position: Coord,
    /// What the block reads (cut to the total ROI under `fit="shrink"`).
    pub read_roi: Roi,
    /// What the block writes (cut likewise).
    pub write_roi: Roi,
    /// What the block would write uncut (equal to `write_roi` unless
    /// `fit="shrink"` cut it).
    pub requested_write_roi: Roi,
    /// Current status.
    pub status: BlockStatus,
    /// What the block cost, measured by whoever ran it (resource tracking);
    /// rides home on the release message.
    pub stats: Option<BlockStats>,
}

impl Block {
    /// The rule for the ROIs of a block made by hand (daisy 1.x's
    /// `Block(total_roi, read_roi, write_roi)`): one number of dimensions,
    /// and each covers something (see [`Roi::check_covers`]).
    pub fn check_rois(total: &Roi, read: &Roi, write: &Roi) -> Result<(), DaisyError> {
        if total.dims() != write.dims() || read.dims() != write.dims() {
            return Err(DaisyError::invalid(
                "write_roi",
                format!(
                    "Block: total_roi has {} dimensions, read_roi {} and write_roi {}; give all \
                     three the same number of dimensions",
                    total.dims(),
                    read.dims(),
                    write.dims()
                ),
            ));
        }
        for (param, roi) in [
            ("total_roi", total),
            ("read_roi", read),
            ("write_roi", write),
        ] {
            roi.check_covers(param, "the block")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_task_values_are_indexed_by_task_index() {
        let mut per: PerTask<u64> = vec![10, 20, 30].into();
        let t: TaskIndex = 2;
        per[t] += 1;
        assert_eq!((per[0], per[t], per.len()), (10, 31, 3));
        assert_eq!(per.iter().sum::<u64>(), 61);
        let doubled: PerTask<u64> = per.iter().map(|v| v * 2).collect();
        assert_eq!(doubled[1], 40);
    }

    #[test]
    fn status_codes_are_daisy_1x_numbers_and_round_trip() {
        assert_eq!(BlockStatus::Success.code(), 2);
        for s in BlockStatus::ALL {
            assert_eq!(BlockStatus::from_code(i64::from(s.code())), Some(s));
        }
        assert_eq!(BlockStatus::from_code(4), None);
        assert_eq!(BlockStatus::from_code(-1), None);
    }

    #[test]
    fn a_hand_made_block_needs_rois_of_one_dimension_that_cover_something() {
        let roi = |o: &[i64], s: &[i64]| Roi::from_slices(o, s).unwrap();
        let (total, read) = (roi(&[0], &[100]), roi(&[0], &[10]));
        assert!(Block::check_rois(&total, &read, &read).is_ok());
        let e = Block::check_rois(&total, &read, &roi(&[0], &[0])).unwrap_err();
        assert!(
            e.to_string().starts_with("write_roi: the block: write_roi"),
            "{e}"
        );
        let e = Block::check_rois(&roi(&[0, 0], &[9, 9]), &read, &read).unwrap_err();
        assert!(e.to_string().contains("same number of dimensions"), "{e}");
    }
}

/// One value per task of a pipeline, indexed by [`TaskIndex`] (no `as
/// usize` at every use): the server's per-task configuration, slots and
/// check stages. It derefs to the slice for `len`, `iter` and the rest;
/// an index past the pipeline panics as a slice's does (a task index comes
/// from the pipeline the vector was made for, never from a peer's bytes).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PerTask<T>(Vec<T>);

impl<T> PerTask<T> {
    /// From one value per task, in pipeline order.
    pub fn new(values: Vec<T>) -> Self {
        Self(values)
    }
}

impl<T> From<Vec<T>> for PerTask<T> {
    fn from(values: Vec<T>) -> Self {
        Self(values)
    }
}

impl<T> FromIterator<T> for PerTask<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl<T> std::ops::Deref for PerTask<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T> std::ops::DerefMut for PerTask<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

impl<T> std::ops::Index<TaskIndex> for PerTask<T> {
    type Output = T;
    fn index(&self, task: TaskIndex) -> &T {
        &self.0[task as usize]
    }
}

impl<T> std::ops::IndexMut<TaskIndex> for PerTask<T> {
    fn index_mut(&mut self, task: TaskIndex) -> &mut T {
        &mut self.0[task as usize]
    }
}

impl<'a, T> IntoIterator for &'a PerTask<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<'a, T> IntoIterator for &'a mut PerTask<T> {
    type Item = &'a mut T;
    type IntoIter = std::slice::IterMut<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter_mut()
    }
}
