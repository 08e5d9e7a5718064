//! A task's block layout as a tracking store records it: the structural
//! parameters in `daisy_layout`, their SHA-256 in `daisy_task_hash`, and
//! whether a new layout only grew the old one on the same block grid
//! ([`growth_shift`]), which is what lets a store be migrated instead of
//! refused.
//!
//! The hash covers the total, read and write ROIs and the fit, not the task
//! id or worker settings: renaming a task or changing its workers keeps its
//! store. [`LAYOUT_VERSION`] is part of the hashed text, so a change to what
//! a layout means changes every hash and old stores are refused, not
//! misread.

use crate::error::DaisyError;
use crate::geometry::{Coord, Roi};
use crate::task_spec::{Fit, TaskSpec};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::Path;

/// Version of the layout description; part of the hash's domain.
pub const LAYOUT_VERSION: u64 = 2;

/// The structural parameters of a task's block grid, as stored in
/// `daisy_layout`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `total_roi`.
    pub total: Roi,
    /// `read_roi`.
    pub read: Roi,
    /// `write_roi`.
    pub write: Roi,
    /// `fit`.
    pub fit: Fit,
}

impl Layout {
    /// The layout of a task.
    pub fn of(spec: &TaskSpec) -> Self {
        Self {
            total: spec.total_roi,
            read: spec.read_roi,
            write: spec.write_roi,
            fit: spec.fit,
        }
    }

    /// As stored in `daisy_layout`.
    pub fn to_json(&self) -> Value {
        let c = |c: Coord| json!(c.as_slice());
        json!({
            "version": LAYOUT_VERSION,
            "total_offset": c(self.total.offset()),
            "total_shape": c(self.total.shape()),
            "read_offset": c(self.read.offset()),
            "read_shape": c(self.read.shape()),
            "write_offset": c(self.write.offset()),
            "write_shape": c(self.write.shape()),
            "fit": self.fit.as_str(),
        })
    }

    /// From `daisy_layout`; None for another version or a damaged one.
    pub fn from_json(v: &Value) -> Option<Self> {
        if v.get("version")?.as_u64()? != LAYOUT_VERSION {
            return None;
        }
        let coord = |key: &str| -> Option<Coord> {
            let items: Option<Vec<i64>> =
                v.get(key)?.as_array()?.iter().map(Value::as_i64).collect();
            Coord::new(&items?).ok()
        };
        let roi = |o: &str, s: &str| Roi::new(coord(o)?, coord(s)?).ok();
        Some(Self {
            total: roi("total_offset", "total_shape")?,
            read: roi("read_offset", "read_shape")?,
            write: roi("write_offset", "write_shape")?,
            fit: v.get("fit")?.as_str()?.parse().ok()?,
        })
    }

    /// SHA-256 over the canonical text of the layout.
    pub fn hash(&self) -> String {
        let text = format!(
            "daisy-tracking-v{LAYOUT_VERSION}\ntotal {} {}\nread {} {}\nwrite {} {}\nfit {}\n",
            self.total.offset(),
            self.total.shape(),
            self.read.offset(),
            self.read.shape(),
            self.write.offset(),
            self.write.shape(),
            self.fit
        );
        Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// A store that belongs to another layout (or to nobody).
pub fn mismatch(path: &Path, expected: &str, found: &str, reason: &str) -> DaisyError {
    DaisyError::LayoutMismatch {
        store: path.display().to_string(),
        expected: expected.to_string(),
        found: found.to_string(),
        reason: reason.to_string(),
    }
}

/// The per-axis shift (in blocks) from an old grid to a new one when the
/// new layout only grew the total ROI; None otherwise.
pub fn growth_shift(old: &Layout, new: &Layout) -> Option<Coord> {
    let same_block = old.write.shape() == new.write.shape()
        && old.read.shape() == new.read.shape()
        && old.read.offset().sub(&old.write.offset()) == new.read.offset().sub(&new.write.offset())
        && old.fit == new.fit
        && old.total.dims() == new.total.dims();
    if !same_block || !new.total.contains_roi(&old.total) {
        return None;
    }
    let stride = new.write.shape();
    let delta = old.total.offset().sub(&new.total.offset());
    (0..delta.dims())
        .all(|d| delta[d] % stride[d] == 0)
        .then(|| delta.div_floor(&stride))
}
