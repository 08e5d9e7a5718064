//! What a task declares it writes (`Task(outputs=[...])`), and the two
//! things daisy can then know before the first block runs:
//!
//! 1. **Chunks that two blocks write at once** ([`check_chunks`]). An array
//!    store writes whole chunks: a block that writes part of a chunk reads
//!    the chunk, changes its part and writes the chunk back. Two blocks
//!    that share a chunk and run at the same time each write back their
//!    own copy, and the one that writes last loses the other's part,
//!    silently. Two blocks of a task may run at once unless they conflict
//!    (`read_write_conflict=True` and one reads what the other writes), so
//!    the rule is: no chunk is written by two blocks that do not conflict.
//!    It is decided per axis: blocks `j` positions apart along an axis share
//!    a chunk when a chunk boundary-free stretch reaches from one's write
//!    region into the other's, and conflict when `j - 1` strides are less
//!    than the read context. If some axis has an offset `j` whose blocks
//!    share a chunk but do not conflict, the blocks `j` apart on that axis
//!    (and level on the others) can lose writes; if none has, every pair of
//!    blocks that shares a chunk conflicts on every axis, and never runs at
//!    once. The pattern of block and chunk boundaries repeats every
//!    `chunk / gcd(stride, chunk)` blocks, so a handful of positions per
//!    axis decide it, never the blocks themselves.
//! 2. **An output that was replaced** ([`OutputIdentity`]): the tracking
//!    store records which array each output was (its directory's device,
//!    inode and creation time), so that a rerun over an output deleted or
//!    re-created since its blocks were marked done is refused instead of
//!    skipping every block over an empty array (see
//!    `tracking_store::outputs`). A directory's creation time and inode
//!    change when it is deleted and made again (zarr's `mode="w"` and
//!    funlib's `prepare_ds(mode="w")` both do that), and not when chunks or
//!    attributes are written into it.

use crate::block_grid::BlockGrid;
use crate::error::DaisyError;
use crate::geometry::Coord;
use crate::task_spec::TaskSpec;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One array a task writes, as the bindings describe it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclaredOutput {
    /// Its directory (a zarr array's), absolute.
    pub path: PathBuf,
    /// The shape of the unit the store writes whole (a chunk, or a shard of
    /// a sharded array) in world units, on the task's axes; None where the
    /// array does not exist yet.
    pub chunk: Option<Coord>,
    /// Where the array's chunk grid starts, in world units.
    pub offset: Coord,
}

/// Refuse `output` for `spec` when some chunk of it may be written by two
/// blocks at once (see the module docs), saying where, and which chunk
/// shape would do.
pub fn check_chunks(spec: &TaskSpec, output: &DeclaredOutput) -> Result<(), DaisyError> {
    let Some(chunk) = output.chunk else {
        return Ok(());
    };
    let dims = spec.total_roi.dims();
    if chunk.dims() != dims || output.offset.dims() != dims {
        return Err(DaisyError::invalid(
            "outputs",
            format!(
                "task {:?}: {} has chunks {chunk} on {} axes, but the task has {dims}; \
                 declare arrays whose last {dims} axes are the task's",
                spec.task_id,
                output.path.display(),
                chunk.dims()
            ),
        ));
    }
    let grid = BlockGrid::new(0, spec);
    let stride = spec.write_roi.shape();
    let first = spec.total_write_roi().begin();
    let (lower, upper) = (spec.context_lower(), spec.context_upper());
    for d in 0..dims {
        let (s, c) = (stride[d], chunk[d]);
        if c <= 0 {
            return Err(DaisyError::invalid(
                "outputs",
                format!(
                    "task {:?}: {} has a chunk shape {chunk} that is not positive",
                    spec.task_id,
                    output.path.display()
                ),
            ));
        }
        let context = lower[d].max(upper[d]);
        if let Some((j, a)) = shared_without_conflict(
            first[d],
            s,
            grid.grid_shape()[d],
            c,
            output.offset[d],
            spec.read_write_conflict,
            context,
        ) {
            return Err(straddle(spec, output, &chunk, d, j, a));
        }
    }
    Ok(())
}

/// On one axis: an offset `j` (in blocks) and a chunk begin `a` such that
/// the chunk `[a, a + chunk)` is written by the blocks at some `k` and
/// `k + j`, which do not conflict; None when there is none.
fn shared_without_conflict(
    first: i64,
    stride: i64,
    blocks: i64,
    chunk: i64,
    origin: i64,
    read_write_conflict: bool,
    context: i64,
) -> Option<(i64, i64)> {
    let repeat = chunk / gcd(stride, chunk) + 1;
    let mut j = 1;
    // blocks further apart than a chunk reaches share none
    while j < blocks && (j - 1) * stride < chunk {
        let conflicting = read_write_conflict && (j - 1) * stride < context;
        if !conflicting {
            for k in 0..(blocks - j).min(repeat) {
                let x = first + k * stride;
                // a chunk begin a (a = origin mod chunk) with a < x + stride
                // (it meets block k) and a + chunk > x + j * stride (and
                // block k + j): the first one after x + j*stride - chunk
                let low = x + j * stride - chunk + 1;
                let a = low + (origin - low).rem_euclid(chunk);
                if a < x + stride {
                    return Some((j, a));
                }
            }
        }
        j += 1;
    }
    None
}

fn gcd(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a.abs(), b.abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

fn straddle(
    spec: &TaskSpec,
    output: &DeclaredOutput,
    chunk: &Coord,
    d: usize,
    j: i64,
    a: i64,
) -> DaisyError {
    let stride = spec.write_roi.shape();
    let first = spec.total_write_roi().begin();
    let mut fits = stride;
    for axis in 0..stride.dims() {
        // chunks that divide the stride and start on the block grid
        fits[axis] = gcd(stride[axis], first[axis] - output.offset[axis]);
    }
    let apart = if j == 1 {
        "neighbouring blocks".to_string()
    } else {
        format!("blocks {j} apart")
    };
    let how = if spec.read_write_conflict {
        "which do not conflict (their read context does not reach the other's write region), so \
         they may run at once"
    } else {
        "which may run at once (read_write_conflict=False)"
    };
    DaisyError::invalid(
        "outputs",
        format!(
            "task {:?}: output {} is written in chunks of {chunk} (world units) but its write \
             blocks are {stride} from {first}: on axis {d} the chunk at {a}..{} is written by \
             {apart}, {how}; each reads the chunk, changes its part and writes it back, and \
             one block's writes are lost. Prepare the array with chunks that divide the \
             write_roi shape and start on the block grid (chunks of {fits} would do, and any \
             shape that divides it), or make the write_roi a multiple of the chunks",
            spec.task_id,
            output.path.display(),
            a + chunk[d]
        ),
    )
}

/// Which array directory an output was: a deleted and re-created array has
/// another (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputIdentity {
    /// The directory's device.
    pub dev: u64,
    /// Its inode.
    pub ino: u64,
    /// Its creation (birth) time in nanoseconds since the epoch, where the
    /// file system keeps one (`statx`); None elsewhere.
    pub created_ns: Option<i128>,
}

impl OutputIdentity {
    /// The identity of the directory at `path`, None if there is none.
    pub fn of(path: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).ok()?;
        let created_ns = meta.created().ok().and_then(|t| {
            t.duration_since(std::time::UNIX_EPOCH)
                .ok()
                .map(|d| d.as_nanos() as i128)
        });
        Some(Self {
            dev: meta.dev(),
            ino: meta.ino(),
            created_ns,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Roi;
    use crate::task_spec::Fit;

    fn cube_task(block: i64, context: i64, conflict: bool) -> TaskSpec {
        let cube = |o: i64, s: i64| Roi::from_slices(&[o; 3], &[s; 3]).unwrap();
        TaskSpec::new(
            "labels",
            cube(-context, 256 + 2 * context),
            cube(-context, block + 2 * context),
            cube(0, block),
            Fit::Valid,
            conflict,
            2,
            vec![],
        )
        .unwrap()
    }

    fn output(chunk: i64, offset: i64) -> DeclaredOutput {
        DeclaredOutput {
            path: PathBuf::from("/data/labels.zarr"),
            chunk: Some(Coord::new(&[chunk; 3]).unwrap()),
            offset: Coord::new(&[offset; 3]).unwrap(),
        }
    }

    #[test]
    fn chunks_that_straddle_write_blocks_run_at_once_are_refused() {
        // the case: 48^3 chunks, 64^3 write blocks, no conflicts
        let e = check_chunks(&cube_task(64, 0, false), &output(48, 0)).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("outputs: task \"labels\": output /data/labels.zarr"),
            "{text}"
        );
        assert!(text.contains("on axis 0 the chunk at 48..96"), "{text}");
        assert!(text.contains("chunks of (64, 64, 64) would do"), "{text}");
    }

    #[test]
    fn chunks_inside_the_write_blocks_are_fine() {
        for chunk in [64, 32, 16, 1] {
            check_chunks(&cube_task(64, 0, false), &output(chunk, 0)).unwrap();
        }
        // an unknown chunk shape (the array does not exist yet) is not checked
        let mut later = output(48, 0);
        later.chunk = None;
        check_chunks(&cube_task(64, 0, false), &later).unwrap();
    }

    #[test]
    fn a_chunk_grid_offset_from_the_block_grid_straddles_too() {
        assert!(check_chunks(&cube_task(64, 0, false), &output(64, 8)).is_err());
        check_chunks(&cube_task(64, 0, false), &output(8, 8)).unwrap();
    }

    #[test]
    fn blocks_that_share_a_chunk_but_conflict_never_run_at_once() {
        // neighbours with context conflict, so a chunk shared by neighbours
        // only is fine with read_write_conflict; without it, it is not
        check_chunks(&cube_task(64, 8, true), &output(48, 0)).unwrap();
        assert!(check_chunks(&cube_task(64, 8, false), &output(48, 0)).is_err());
        // a chunk wider than a block reaches blocks 2 apart, which do not
        // conflict with 8 of context: refused even with conflicts
        let e = check_chunks(&cube_task(64, 8, true), &output(160, 0)).unwrap_err();
        assert!(e.to_string().contains("blocks 2 apart"), "{e}");
    }

    #[test]
    fn the_rule_agrees_with_every_pair_of_blocks_on_a_line() {
        // brute force on one axis: chunks shared by two blocks that do not
        // conflict, over strides, chunks, offsets and contexts
        for stride in 1..7i64 {
            for chunk in 1..13i64 {
                for origin in 0..chunk {
                    for context in 0..4i64 {
                        for conflict in [false, true] {
                            let blocks = 9;
                            let mut bad = false;
                            for k in 0..blocks {
                                for m in (k + 1)..blocks {
                                    let j = m - k;
                                    let conflicts = conflict && (j - 1) * stride < context;
                                    let shares = (k * stride..(k + 1) * stride).any(|p| {
                                        let q = (p - origin).div_euclid(chunk);
                                        (m * stride..(m + 1) * stride)
                                            .any(|r| (r - origin).div_euclid(chunk) == q)
                                    });
                                    bad |= shares && !conflicts;
                                }
                            }
                            let found = shared_without_conflict(
                                0, stride, blocks, chunk, origin, conflict, context,
                            );
                            assert_eq!(
                                found.is_some(),
                                bad,
                                "stride {stride} chunk {chunk} origin {origin} context \
                                 {context} conflict {conflict}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_directory_made_again_has_another_identity() {
        let dir = std::env::temp_dir().join(format!("daisy-output-id-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let first = OutputIdentity::of(&dir).unwrap();
        std::fs::write(dir.join("chunk"), b"x").unwrap();
        assert_eq!(
            OutputIdentity::of(&dir).unwrap(),
            first,
            "a write is no new array"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(OutputIdentity::of(&dir).is_none());
        // keep the old inode busy so that the new directory cannot reuse it
        let hold = std::env::temp_dir().join(format!("daisy-output-hold-{}", std::process::id()));
        std::fs::create_dir(&hold).unwrap();
        std::fs::create_dir(&dir).unwrap();
        let second = OutputIdentity::of(&dir).unwrap();
        assert_ne!(second, first);
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&hold).unwrap();
    }
}
