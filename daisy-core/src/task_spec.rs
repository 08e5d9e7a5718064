//! What a task is, as far as scheduling is concerned: [`TaskSpec`] and
//! [`Fit`], validated on construction.
//!
//! The spec holds only what decides which blocks exist and how they depend
//! on each other (ROIs, fit, conflict flag, upstream ids) plus the retry
//! budget. Functions, worker counts and everything else Python-side stay in
//! the Python `Task`; the core never sees a callable.

use crate::error::DaisyError;
use crate::geometry::Roi;
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
        if task_id.is_empty() {
            return Err(DaisyError::invalid(
                "task_id",
                "must be a non-empty string naming the task",
            ));
        }
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
            if roi.is_empty() {
                return Err(DaisyError::invalid(
                    name,
                    format!(
                        "task {task_id:?}: {name} {roi} has a zero or negative extent; \
                         every axis of its shape must be positive"
                    ),
                ));
            }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roi(o: &[i64], s: &[i64]) -> Roi {
        Roi::from_slices(o, s).unwrap()
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
