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

/// What differs between the layout a store was written for (`old`) and
/// this task's (`new`), in the task's own words: "write_roi shape (16, 16)
/// -> (32, 32); fit 'valid' -> 'shrink'". Empty when they are equal.
pub fn changes(old: &Layout, new: &Layout) -> String {
    let shown = |r: &Roi| format!("{} {}", r.slices(), r.shape());
    let mut out = Vec::new();
    if old.total != new.total {
        out.push(format!(
            "total_roi {} -> {}",
            shown(&old.total),
            shown(&new.total)
        ));
    }
    if old.write.shape() != new.write.shape() {
        out.push(format!(
            "write_roi shape {} -> {}",
            old.write.shape(),
            new.write.shape()
        ));
    }
    let context = |l: &Layout| {
        (
            l.write.offset().sub(&l.read.offset()),
            l.read.end().sub(&l.write.end()),
        )
    };
    let (old_context, new_context) = (context(old), context(new));
    if old_context != new_context {
        out.push(format!(
            "read context {} before / {} after -> {} / {}",
            old_context.0, old_context.1, new_context.0, new_context.1
        ));
    } else if old.read.offset() != new.read.offset() || old.write.offset() != new.write.offset() {
        out.push(format!(
            "block offsets read_roi {} / write_roi {} -> {} / {}",
            old.read.offset(),
            old.write.offset(),
            new.read.offset(),
            new.write.offset()
        ));
    }
    if old.fit != new.fit {
        out.push(format!("fit '{}' -> '{}'", old.fit, new.fit));
    }
    out.join("; ")
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

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(total: i64, context: i64, write: i64, fit: Fit) -> Layout {
        let r = |o: i64, s: i64| Roi::from_slices(&[o, o, o], &[s, s, s]).unwrap();
        Layout {
            total: r(0, total),
            read: r(-context, write + 2 * context),
            write: r(0, write),
            fit,
        }
    }

    #[test]
    fn changes_name_what_differs_in_the_tasks_words() {
        let old = layout(256, 8, 16, Fit::Valid);
        assert_eq!(changes(&old, &old), "");
        let bigger = layout(256, 8, 32, Fit::Valid);
        assert_eq!(
            changes(&old, &bigger),
            "write_roi shape (16, 16, 16) -> (32, 32, 32)"
        );
        let more_context = layout(256, 4, 16, Fit::Shrink);
        let text = changes(&old, &more_context);
        assert!(
            text.contains(
                "read context (8, 8, 8) before / (8, 8, 8) after -> (4, 4, 4) / (4, 4, 4)"
            ),
            "{text}"
        );
        assert!(text.contains("fit 'valid' -> 'shrink'"), "{text}");
        let shrunk = layout(128, 8, 16, Fit::Valid);
        assert!(changes(&old, &shrunk).starts_with("total_roi [0:256, 0:256, 0:256]"));
    }
}
