//! What a downstream task reads that no block of its upstream task writes,
//! found from the two tasks' geometry when the run is planned, before any
//! block runs. [`uncovered_reads`] owns the rule; the run plan warns with
//! it (or refuses the run under `strict`), and the report keeps it as a
//! notice of the downstream task.
//!
//! ## The rule
//! An upstream task means to write its *total write ROI* (its total ROI
//! without the read context). Its blocks write less when its fit leaves
//! some out: `valid` keeps only blocks whose read ROI fits whole, so the
//! last partial block of each axis is dropped and a band at the far end of
//! every axis is never written ([`crate::task_spec::TaskSpec::coverage_note`]
//! warns of that for the task alone). A downstream block whose read ROI
//! reaches into that band reads what no upstream block wrote — zeros, or
//! a previous run's data — and nothing else would tell: it has no upstream
//! block to wait for there, so it runs and succeeds. Those blocks are
//! counted and named here.
//!
//! What a downstream block reads *outside* the upstream's total write ROI
//! is not counted: context that reaches past the upstream's output (the
//! volume's border, padded by the function, or data another step wrote) is
//! how pipelines are written, and the upstream never meant to write there.
//!
//! ## Cost
//! The blocks of a task are a box of grid positions, so a block's read ROI
//! misses the band exactly when, on every axis, its read interval either
//! misses the upstream's total write interval or stays inside the written
//! part. The count is a product of per-axis counts: one pass over the
//! positions of each axis, never over the blocks.

use crate::block::TaskIndex;
use crate::block_grid::BlockGrid;
use crate::pipeline::Pipeline;

/// A downstream task some of whose blocks read where its upstream task's
/// blocks never write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UncoveredRead {
    /// The downstream task.
    pub task: TaskIndex,
    /// The upstream task it reads from.
    pub upstream: TaskIndex,
    /// How many of the downstream task's blocks read there.
    pub blocks: u64,
    /// How many blocks the downstream task has.
    pub of: u64,
    /// The finding in words, with the fix.
    pub text: String,
}

/// Every downstream task of `pipeline` with blocks that read part of an
/// upstream task's total write ROI that no upstream block writes, in
/// pipeline order (upstream tasks before downstream ones).
pub fn uncovered_reads(pipeline: &Pipeline) -> Vec<UncoveredRead> {
    let grids: Vec<BlockGrid> = (0..pipeline.len())
        .map(|t| BlockGrid::new(t as TaskIndex, pipeline.spec(t as TaskIndex)))
        .collect();
    let mut found = Vec::new();
    for (t, down) in grids.iter().enumerate() {
        let t = t as TaskIndex;
        for &u in pipeline.upstream_of(t) {
            let blocks = blocks_reading_the_gap(down, &grids[u as usize]);
            if blocks > 0 {
                found.push(UncoveredRead {
                    task: t,
                    upstream: u,
                    blocks,
                    of: down.num_blocks(),
                    text: describe(
                        pipeline,
                        t,
                        u,
                        blocks,
                        down.num_blocks(),
                        &grids[u as usize],
                    ),
                });
            }
        }
    }
    found
}

/// How many blocks of `down` read part of `up`'s total write ROI that no
/// block of `up` writes.
fn blocks_reading_the_gap(down: &BlockGrid, up: &BlockGrid) -> u64 {
    let total = up.total_write_roi();
    let written = up.written_roi();
    if written == total || down.num_blocks() == 0 {
        return 0;
    }
    let (t0, t1) = (total.begin(), total.end());
    let (w0, w1) = (written.begin(), written.end());
    let shape = down.grid_shape();
    // per axis: positions whose read interval meets the total write
    // interval, and those of them whose part inside it is all written
    let mut meeting = 1u64;
    let mut inside = 1u64;
    for d in 0..shape.dims() {
        let (mut m, mut i) = (0u64, 0u64);
        for k in 0..shape[d] {
            let (r0, r1) = down.read_interval(d, k);
            let (c0, c1) = (r0.max(t0[d]), r1.min(t1[d]));
            if c0 >= c1 {
                continue;
            }
            m += 1;
            if c0 >= w0[d] && c1 <= w1[d] {
                i += 1;
            }
        }
        meeting = meeting.saturating_mul(m);
        inside = inside.saturating_mul(i);
    }
    meeting - inside
}

fn describe(
    pipeline: &Pipeline,
    task: TaskIndex,
    upstream: TaskIndex,
    blocks: u64,
    of: u64,
    up: &BlockGrid,
) -> String {
    let down_id = &pipeline.spec(task).task_id;
    let up_spec = pipeline.spec(upstream);
    let up_id = &up_spec.task_id;
    let written = up.written_roi();
    let what = if written.is_empty() {
        format!("{up_id:?} has no blocks, so nothing of it is written")
    } else {
        format!(
            "the blocks of {up_id:?} write only {} of its total write ROI {} (fit='{}' drops \
             the blocks that do not fit whole)",
            written.slices(),
            up.total_write_roi().slices(),
            up_spec.fit.as_str()
        )
    };
    format!(
        "task {down_id:?}: {blocks} of its {of} blocks read where no block of upstream task \
         {up_id:?} writes: {what}; those blocks read data {up_id:?} never wrote. Give \
         {up_id:?} fit='shrink' (or 'overhang') to write all of it, or keep {down_id:?}'s \
         total_roi inside what {up_id:?} writes (context that reaches past {up_id:?}'s \
         total write ROI is not counted)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Roi;
    use crate::task_spec::{Fit, TaskSpec};

    fn cube(offset: i64, shape: i64) -> Roi {
        Roi::from_slices(&[offset; 3], &[shape; 3]).unwrap()
    }

    fn spec(id: &str, total: Roi, read: Roi, write: Roi, fit: Fit, up: &[&str]) -> TaskSpec {
        TaskSpec::new(
            id,
            total,
            read,
            write,
            fit,
            true,
            2,
            up.iter().map(|s| s.to_string()).collect(),
        )
        .unwrap()
    }

    /// The issue's pipeline: `smooth` (5 voxels of context, fit valid)
    /// drops its last partial block per axis; `label` reads the whole
    /// volume in 64 blocks of 64^3, 37 of them into what smooth never
    /// writes (the 27 of the first three per axis read only written data
    /// or smooth's border context, which it never meant to write).
    fn issue_pipeline(fit: Fit) -> Pipeline {
        let smooth = spec("smooth", cube(0, 256), cube(-5, 74), cube(0, 64), fit, &[]);
        let label = spec(
            "label",
            cube(0, 256),
            cube(0, 64),
            cube(0, 64),
            Fit::Valid,
            &["smooth"],
        );
        Pipeline::new(vec![smooth, label]).unwrap()
    }

    #[test]
    fn a_downstream_block_reading_what_a_valid_fit_dropped_is_found() {
        let found = uncovered_reads(&issue_pipeline(Fit::Valid));
        assert_eq!(found.len(), 1, "{found:?}");
        let f = &found[0];
        assert_eq!((f.task, f.upstream, f.blocks, f.of), (1, 0, 37, 64));
        assert!(f.text.contains("37 of its 64 blocks"), "{}", f.text);
        assert!(
            f.text.contains(
                "write only [5:197, 5:197, 5:197] of its total write ROI [5:251, 5:251, 5:251]"
            ),
            "{}",
            f.text
        );
    }

    #[test]
    fn an_upstream_that_writes_all_it_means_to_leaves_nothing_to_find() {
        assert!(uncovered_reads(&issue_pipeline(Fit::Shrink)).is_empty());
        assert!(uncovered_reads(&issue_pipeline(Fit::Overhang)).is_empty());
    }

    #[test]
    fn context_past_the_upstream_output_is_not_counted() {
        // up means to write [10, 90) but writes [10, 85) (5 whole blocks of
        // 15); down's blocks read [-5, 85): their context before 10 is past
        // up's output, which is how border blocks are written, and counts
        // for nothing
        let line = |o: i64, s: i64| Roi::from_slices(&[o], &[s]).unwrap();
        let up = spec(
            "up",
            line(0, 100),
            line(-10, 35),
            line(0, 15),
            Fit::Valid,
            &[],
        );
        let down = |end: i64| {
            spec(
                "down",
                line(-5, end + 10),
                line(-5, 20),
                line(0, 10),
                Fit::Valid,
                &["up"],
            )
        };
        let p = Pipeline::new(vec![up.clone(), down(80)]).unwrap();
        assert!(uncovered_reads(&p).is_empty());
        // one block more reads [75, 95), into [85, 90), which up never writes
        let p = Pipeline::new(vec![up, down(90)]).unwrap();
        let found = uncovered_reads(&p);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].blocks, found[0].of), (1, 9));
    }

    #[test]
    fn every_block_is_counted_against_a_brute_force_check() {
        // 2-D, uneven strides and context, both fits of the downstream
        let area = |o: [i64; 2], s: [i64; 2]| Roi::from_slices(&o, &s).unwrap();
        for down_fit in [Fit::Valid, Fit::Shrink, Fit::Overhang] {
            let up = spec(
                "up",
                area([0, 0], [103, 77]),
                area([-3, -2], [20, 15]),
                area([0, 0], [14, 11]),
                Fit::Valid,
                &[],
            );
            let down = spec(
                "down",
                area([0, 0], [103, 77]),
                area([-4, -4], [17, 13]),
                area([0, 0], [9, 5]),
                down_fit,
                &["up"],
            );
            let p = Pipeline::new(vec![up, down]).unwrap();
            let (ug, dg) = (BlockGrid::new(0, p.spec(0)), BlockGrid::new(1, p.spec(1)));
            let (total, written) = (ug.total_write_roi(), ug.written_roi());
            let brute = (0..dg.num_blocks())
                .filter(|&i| {
                    let read = dg.block(i).read_roi.intersect(&total);
                    !read.is_empty() && !written.contains_roi(&read)
                })
                .count() as u64;
            let found = uncovered_reads(&p);
            assert!(brute > 0, "the case must have a gap ({down_fit:?})");
            assert_eq!(found.len(), 1);
            assert_eq!(found[0].blocks, brute, "{down_fit:?}");
        }
    }
}
