//! What a task is, as far as scheduling is concerned: [`TaskSpec`] and
//! [`Fit`], validated on construction.
//!
//! The spec holds only what decides which blocks exist and how they depend
//! on each other (ROIs, fit, conflict flag, upstream ids) plus the retry
//! budget. Functions, worker counts and everything else Python-side stay in
//! the Python `Task`; the core never sees a callable.

use crate::error::DaisyError;
use crate::geometry::Roi;
use crate::task_id::check_task_id;
use std::fmt;
use std::str::FromStr;

/// What to do with blocks at the upper border of the total ROI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fit {
    /// Only blocks whose read ROI lies entirely inside the total ROI.
    Valid,
    /// Also blocks that stick out, unchanged.
    Overhang,
    /// Also blocks that stick out, cut down to the total ROI.
    Shrink,
}

impl Fit {
    /// The spelling users pass (`"valid"`, `"overhang"`, `"shrink"`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Fit::Valid => "valid",
            Fit::Overhang => "overhang",
            Fit::Shrink => "shrink",
        }
    }
}

impl fmt::Display for Fit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Fit {
    type Err = DaisyError;
    fn from_str(s: &str) -> Result<Self, DaisyError> {
        match s {
            "valid" => Ok(Fit::Valid),
            "overhang" => Ok(Fit::Overhang),
            "shrink" => Ok(Fit::Shrink),
            other => Err(DaisyError::invalid(
                "fit",
                format!("unknown fit {other:?}; use \"valid\", \"overhang\" or \"shrink\""),
            )),
        }
    }
}

/// The scheduling-relevant description of one task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskSpec {
    /// Unique id within a pipeline.
    pub task_id: String,
    /// The region to process, context included.
    pub total_roi: Roi,
    /// What one block reads (template, relative to `write_roi`).
    pub read_roi: Roi,
    /// What one block writes; blocks tile at the stride of its shape.
    pub write_roi: Roi,
    /// Border policy.
    pub fit: Fit,
    /// Whether blocks whose read and write regions overlap must not run at
    /// the same time.
    pub read_write_conflict: bool,
    /// How often a failed block is retried before it counts as failed.
    pub max_retries: u32,
    /// Ids of the tasks whose output this task reads.
    pub upstream: Vec<String>,
}

impl TaskSpec {
    /// A validated spec. Errors name the parameter and the fix. A total ROI
    /// too small for a single block is valid and gives a task of no blocks,
    /// as in daisy 1.x.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        task_id: impl Into<String>,
        total_roi: Roi,
        read_roi: Roi,
        write_roi: Roi,
        fit: Fit,
        read_write_conflict: bool,
        max_retries: u32,
        upstream: Vec<String>,
    ) -> Result<Self, DaisyError> {
        let task_id = task_id.into();
        check_task_id(&task_id)?;
        let dims = [
            ("total_roi", total_roi.dims()),
            ("read_roi", read_roi.dims()),
            ("write_roi", write_roi.dims()),
        ];
        for (name, d) in &dims[1..] {
            if *d != dims[0].1 {
                return Err(DaisyError::invalid(
                    *name,
                    format!(
                        "task {task_id:?}: {name} has {d} dimensions but total_roi has {}; \
                         give all three ROIs the same number of dimensions",
                        dims[0].1
                    ),
                ));
            }
        }
        for (name, roi) in [
            ("total_roi", &total_roi),
            ("read_roi", &read_roi),
            ("write_roi", &write_roi),
        ] {
            roi.check_covers(name, &format!("task {task_id:?}"))?;
        }
        if !read_roi.contains_roi(&write_roi) {
            return Err(DaisyError::invalid(
                "write_roi",
                format!(
                    "task {task_id:?}: write_roi {write_roi} is not inside read_roi {read_roi}; \
                     a block must read at least what it writes (grow read_roi or shrink write_roi)"
                ),
            ));
        }
        Ok(Self {
            task_id,
            total_roi,
            read_roi,
            write_roi,
            fit,
            read_write_conflict,
            max_retries,
            upstream,
        })
    }

    /// Context a block reads before its write region, per axis.
    pub fn context_lower(&self) -> crate::geometry::Coord {
        self.write_roi.begin().sub(&self.read_roi.begin())
    }

    /// Context a block reads after its write region, per axis.
    pub fn context_upper(&self) -> crate::geometry::Coord {
        self.read_roi.end().sub(&self.write_roi.end())
    }

    /// The region blocks may write: the total ROI without the context.
    pub fn total_write_roi(&self) -> Roi {
        let zero = crate::geometry::Coord::splat(0, self.total_roi.dims());
        self.total_roi.grow(
            &zero.sub(&self.context_lower()),
            &zero.sub(&self.context_upper()),
        )
    }

    /// Whether a block reading `read_roi` and writing `write_roi` (as laid
    /// out, before any cut) belongs to this task under its fit: the rule
    /// the block grid's counts follow. `valid`: its read ROI lies inside
    /// the total ROI; `overhang`: its write ROI starts inside the total
    /// write ROI; `shrink`: some of its write ROI is inside it.
    pub fn includes(&self, read_roi: &Roi, write_roi: &Roi) -> bool {
        let total_write = self.total_write_roi();
        match self.fit {
            Fit::Valid => self.total_roi.contains_roi(read_roi),
            Fit::Overhang => total_write.contains_point(&write_roi.begin()),
            Fit::Shrink => write_roi.intersects(&total_write),
        }
    }

    /// A block cut to the task, as `shrink` cuts it: its write ROI the part
    /// inside the total write ROI, its read ROI the part inside the total
    /// ROI; None when it writes nothing inside.
    pub fn cut_to_task(&self, read_roi: &Roi, write_roi: &Roi) -> Option<(Roi, Roi)> {
        let write = write_roi.intersect(&self.total_write_roi());
        if write.is_empty() {
            return None;
        }
        Some((read_roi.intersect(&self.total_roi), write))
    }

    /// What of the total write ROI no block writes, when the fit leaves
    /// some out (`valid` keeps only blocks whose read ROI fits whole, so
    /// the last partial block of each axis is dropped), with the fix; None
    /// when the blocks cover it all (or there are none: see
    /// [`Self::why_no_blocks`]). Warned when the task is made and repeated
    /// in the summary: a run that silently skips a fifth of the volume
    /// says "all blocks processed successfully".
    pub fn coverage_note(&self) -> Option<String> {
        if self.fit != Fit::Valid {
            return None;
        }
        let total_write = self.total_write_roi();
        let (tw, w) = (total_write.shape(), self.write_roi.shape());
        let dims = tw.dims();
        let mut covered = crate::geometry::Coord::splat(0, dims);
        for d in 0..dims {
            if tw[d] <= 0 || w[d] <= 0 {
                return None;
            }
            covered[d] = (tw[d] / w[d]) * w[d];
            if covered[d] == 0 {
                return None; // no block at all
            }
        }
        if covered == tw {
            return None;
        }
        let share: f64 = (0..dims)
            .map(|d| covered[d] as f64 / tw[d] as f64)
            .product();
        let left = tw.sub(&covered);
        Some(format!(
            "task {:?}: its blocks cover {covered} of its total write ROI {tw}: {:.1}% of it \
             is never processed (the last {left} on each axis; fit='valid' keeps only blocks \
             whose read ROI fits inside total_roi). Use fit='shrink' (edge blocks cut to the \
             volume) or fit='overhang' (edge blocks reaching past it) to process all of it, \
             or a total_roi whose write region is a whole number of write_roi blocks",
            self.task_id,
            (1.0 - share) * 100.0
        ))
    }

    /// Why this task has no blocks, in words, with the fix (its warning).
    pub fn why_no_blocks(&self) -> String {
        let (total, read) = (self.total_roi.shape(), self.read_roi.shape());
        let too_small = (0..total.dims()).any(|d| read[d] > total[d]);
        if self.fit == Fit::Valid && too_small {
            return format!(
                "its read_roi {read} is larger than its total_roi {total} on some axis and \
                 fit='valid' keeps only blocks that fit whole; use a larger total_roi or \
                 fit='shrink'"
            );
        }
        // ROIs as Python shows them (funlib's `[begin:end] (shape)`)
        let shown = |r: &Roi| format!("{} {}", r.slices(), r.shape());
        format!(
            "no block of write_roi {} with its context fits in total_roi {} with fit={:?}",
            shown(&self.write_roi),
            shown(&self.total_roi),
            self.fit.to_string()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roi(o: &[i64], s: &[i64]) -> Roi {
        Roi::from_slices(o, s).unwrap()
    }

    #[test]
    fn a_valid_fit_that_leaves_part_of_the_volume_out_says_how_much() {
        // 256^3 with 8 voxels of context and 32^3 write blocks: the write
        // region 240^3 is tiled by 7^3 blocks covering 224^3
        let spec = TaskSpec::new(
            "smooth",
            roi(&[0, 0, 0], &[256, 256, 256]),
            roi(&[-8, -8, -8], &[48, 48, 48]),
            roi(&[0, 0, 0], &[32, 32, 32]),
            Fit::Valid,
            true,
            0,
            vec![],
        )
        .unwrap();
        let note = spec.coverage_note().unwrap();
        assert!(note.contains("cover (224, 224, 224) of its total write ROI (240, 240, 240)"));
        assert!(note.contains("18.7% of it is never processed"), "{note}");
        assert!(note.contains("fit='shrink'") && note.contains("fit='overhang'"));
        for fit in [Fit::Shrink, Fit::Overhang] {
            let other = TaskSpec {
                fit,
                ..spec.clone()
            };
            assert_eq!(other.coverage_note(), None);
        }
        // a write region of whole blocks is covered
        let whole = TaskSpec::new(
            "whole",
            roi(&[0, 0, 0], &[240, 240, 240]),
            roi(&[-8, -8, -8], &[48, 48, 48]),
            roi(&[0, 0, 0], &[32, 32, 32]),
            Fit::Valid,
            true,
            0,
            vec![],
        )
        .unwrap();
        assert_eq!(whole.coverage_note(), None);
    }

    #[test]
    fn includes_is_the_rule_the_grid_counts_by() {
        use crate::block_grid::BlockGrid;
        let total = roi(&[0, 0], &[23, 17]);
        let read = roi(&[-2, -1], &[9, 7]);
        let write = roi(&[0, 0], &[5, 5]);
        for fit in [Fit::Valid, Fit::Overhang, Fit::Shrink] {
            let spec = TaskSpec::new("t", total, read, write, fit, true, 0, vec![]).unwrap();
            let grid = BlockGrid::new(0, &spec);
            let context = spec.context_lower();
            let upper = spec.context_upper();
            let shape = grid.grid_shape();
            let mut inside = 0;
            for index in 0..grid.num_blocks() {
                let b = grid.block(index);
                let w = b.requested_write_roi;
                let r = w.grow(&context, &upper);
                assert!(
                    spec.includes(&r, &w),
                    "{fit:?}: grid block {w} not included"
                );
                inside += 1;
                // one step past the grid's last block on an axis is not a block
                for d in 0..2 {
                    if b.position[d] + 1 == shape[d] {
                        let mut step = crate::geometry::Coord::splat(0, 2);
                        step[d] = write.shape()[d];
                        let (w2, r2) = (w.shift(&step), r.shift(&step));
                        assert!(!spec.includes(&r2, &w2), "{fit:?}: {w2} past the grid");
                    }
                }
            }
            assert_eq!(inside, grid.num_blocks());
            // a cut keeps what is inside; nothing inside is None
            let far = roi(&[100, 100], &[5, 5]);
            assert_eq!(spec.cut_to_task(&far, &far), None);
            // the total write ROI is [2:21, 1:16]
            let cut = spec.cut_to_task(&roi(&[18, 14], &[9, 7]), &roi(&[20, 15], &[5, 5]));
            let (r, w) = cut.unwrap();
            assert_eq!(w, roi(&[20, 15], &[1, 1]));
            assert_eq!(r, roi(&[18, 14], &[5, 3]));
        }
        let small = TaskSpec::new(
            "s",
            roi(&[0], &[4]),
            roi(&[0], &[8]),
            roi(&[2], &[2]),
            Fit::Valid,
            true,
            0,
            vec![],
        )
        .unwrap();
        assert!(
            small
                .why_no_blocks()
                .contains("read_roi (8,) is larger than its total_roi (4,)")
        );
    }

    fn spec(total: Roi, read: Roi, write: Roi, fit: Fit) -> Result<TaskSpec, DaisyError> {
        TaskSpec::new("t", total, read, write, fit, true, 2, vec![])
    }

    #[test]
    fn total_write_roi_removes_context() {
        let s = spec(
            roi(&[0, 0], &[100, 100]),
            roi(&[-2, -1], &[14, 13]),
            roi(&[0, 0], &[10, 10]),
            Fit::Valid,
        )
        .unwrap();
        assert_eq!(s.total_write_roi(), roi(&[2, 1], &[96, 97]));
    }

    #[test]
    fn rejects_bad_geometry_naming_the_parameter() {
        let e = spec(
            roi(&[0, 0], &[10, 10]),
            roi(&[0], &[2]),
            roi(&[0], &[2]),
            Fit::Valid,
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("read_roi:"), "{e}");
        let e = spec(
            roi(&[0], &[10]),
            roi(&[0], &[2]),
            roi(&[1], &[2]),
            Fit::Valid,
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("write_roi:"), "{e}");
        let e = spec(
            roi(&[0], &[0]),
            roi(&[0], &[2]),
            roi(&[0], &[2]),
            Fit::Valid,
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("total_roi:"), "{e}");
    }

    #[test]
    fn fit_parses_and_rejects() {
        assert_eq!("shrink".parse::<Fit>().unwrap(), Fit::Shrink);
        let e = "snug".parse::<Fit>().unwrap_err();
        assert!(e.to_string().contains("\"valid\""));
    }
}
