//! Block-level dependencies across a whole pipeline: [`DependencyGraph`].
//!
//! A block waits for
//! * the blocks of its own task on the previous level around it (read/write
//!   conflicts, see `block_grid`), and
//! * for every upstream task, exactly the upstream blocks whose write ROI
//!   overlaps its read ROI.
//!
//! Nothing is materialised: upstream and downstream sets are computed from
//! grid arithmetic when asked, into a caller-provided buffer, so a graph of
//! 10^6 blocks costs a few hundred bytes per task. A *root* is a block with
//! no upstream block at all (level 0 of its task and no overlapping upstream
//! block); a downstream block whose read ROI overlaps no upstream block is
//! a root too, so it is scheduled rather than waiting forever.

use crate::block::{Block, BlockKey, TaskIndex};
use crate::block_grid::{BlockGrid, BoxIter};
use crate::geometry::Roi;
use crate::pipeline::Pipeline;

/// The dependency structure of every block of a pipeline.
#[derive(Clone, Debug)]
pub struct DependencyGraph {
    pipeline: Pipeline,
    grids: Vec<BlockGrid>,
}

impl DependencyGraph {
    /// The key of the block of `task` whose (unshrunk) write ROI starts at
    /// `write_offset`: how a block the user rebuilt by hand is found again.
    /// None if no block of the task writes there.
    pub fn locate(
        &self,
        task: TaskIndex,
        write_offset: &crate::geometry::Coord,
    ) -> Option<BlockKey> {
        let grid = self.grid(task);
        grid.position_of_write_offset(write_offset)
            .map(|p| BlockKey {
                task,
                index: grid.indexer().flat(&p),
            })
    }

    /// The graph of a validated pipeline.
    pub fn new(pipeline: Pipeline) -> Self {
        let grids = pipeline
            .specs()
            .iter()
            .enumerate()
            .map(|(i, s)| BlockGrid::new(i as TaskIndex, s))
            .collect();
        Self { pipeline, grids }
    }

    /// The pipeline this graph was built from.
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// The block layout of one task.
    pub fn grid(&self, task: TaskIndex) -> &BlockGrid {
        &self.grids[task as usize]
    }

    /// Number of blocks of one task.
    pub fn num_blocks(&self, task: TaskIndex) -> u64 {
        self.grid(task).num_blocks()
    }

    /// The block for a key.
    #[inline]
    pub fn block(&self, key: BlockKey) -> Block {
        self.grid(key.task).block(key.index)
    }

    /// Every block this block waits for, appended to `out`.
    pub fn upstream(&self, block: &Block, out: &mut Vec<BlockKey>) {
        let grid = self.grid(block.key.task);
        grid.intra_upstream(&block.position, out);
        for &u in self.pipeline.upstream_of(block.key.task) {
            self.grid(u).writers_of(&block.read_roi, out);
        }
    }

    /// Number of blocks this block waits for.
    pub fn upstream_count(&self, block: &Block, scratch: &mut Vec<BlockKey>) -> u32 {
        let grid = self.grid(block.key.task);
        let mut n = grid.intra_upstream_count(&block.position);
        for &u in self.pipeline.upstream_of(block.key.task) {
            scratch.clear();
            self.grid(u).writers_of(&block.read_roi, scratch);
            n += scratch.len() as u32;
        }
        n
    }

    /// Every block that waits for this block, appended to `out`.
    pub fn downstream(&self, block: &Block, out: &mut Vec<BlockKey>) {
        let grid = self.grid(block.key.task);
        grid.intra_downstream(&block.position, out);
        for &d in self.pipeline.downstream_of(block.key.task) {
            self.grid(d).readers_of(&block.write_roi, out);
        }
    }

    /// True if the block has an upstream block in another task.
    pub fn has_inter_task_upstream(&self, block: &Block, scratch: &mut Vec<BlockKey>) -> bool {
        self.pipeline.upstream_of(block.key.task).iter().any(|&u| {
            scratch.clear();
            self.grid(u).writers_of(&block.read_roi, scratch);
            !scratch.is_empty()
        })
    }

    /// A cursor over the roots of a task, for [`DependencyGraph::next_root`].
    pub fn root_cursor(&self, task: TaskIndex) -> RootCursor {
        RootCursor {
            task,
            level: 0,
            positions: None,
        }
    }

    /// The next root of the cursor's task, lazily: level by level, skipping
    /// levels with no block free of intra-task upstream blocks, and (for
    /// tasks with upstream tasks) blocks that read upstream output.
    pub fn next_root(&self, cursor: &mut RootCursor, scratch: &mut Vec<BlockKey>) -> Option<Block> {
        let grid = self.grid(cursor.task);
        let has_upstream_tasks = !self.pipeline.upstream_of(cursor.task).is_empty();
        loop {
            if cursor.positions.is_none() {
                let roots = grid.intra_roots_per_level();
                while cursor.level < roots.len() && roots[cursor.level] == 0 {
                    cursor.level += 1;
                }
                if cursor.level >= roots.len() {
                    return None;
                }
                cursor.positions = Some(grid.level_positions(cursor.level));
            }
            let positions = cursor.positions.as_mut()?;
            for pos in positions.by_ref() {
                if grid.has_intra_upstream(&pos) {
                    continue;
                }
                let block = grid.block_at(pos);
                if has_upstream_tasks && self.has_inter_task_upstream(&block, scratch) {
                    continue; // released by its upstream blocks instead
                }
                return Some(block);
            }
            cursor.positions = None;
            cursor.level += 1;
        }
    }

    /// Count the roots of a task: a closed form for tasks without upstream
    /// tasks, a walk over the candidates otherwise.
    pub fn count_roots(&self, task: TaskIndex) -> u64 {
        if self.pipeline.upstream_of(task).is_empty() {
            return self.grid(task).intra_roots_per_level().iter().sum();
        }
        let mut cursor = self.root_cursor(task);
        let mut scratch = Vec::new();
        let mut n = 0;
        while self.next_root(&mut cursor, &mut scratch).is_some() {
            n += 1;
        }
        n
    }
}

/// A lazy walk over one task's blocks in daisy 1.x's order: level by
/// level, row-major within a level (what `enumerate_all_dependencies` and
/// `level_blocks` stream). It holds one level's position iterator, never
/// the blocks, so its memory is flat in the number of blocks.
#[derive(Clone, Debug)]
pub struct LevelWalk {
    task: TaskIndex,
    level: usize,
    /// Past this level the walk ends.
    last_level: usize,
    positions: Option<BoxIter>,
}

impl DependencyGraph {
    /// A walk over every block of `task`, or over one level of it (an
    /// empty walk for a level the task does not have).
    pub fn level_walk(&self, task: TaskIndex, only_level: Option<usize>) -> LevelWalk {
        let levels = self.grid(task).num_levels();
        let (level, last_level) = match only_level {
            Some(l) => (l, l),
            None => (0, levels.saturating_sub(1)),
        };
        LevelWalk {
            task,
            level: if level < levels { level } else { usize::MAX },
            last_level,
            positions: None,
        }
    }

    /// The next block of a walk.
    pub fn next_in_walk(&self, walk: &mut LevelWalk) -> Option<Block> {
        let grid = self.grid(walk.task);
        loop {
            if walk.level > walk.last_level || walk.level >= grid.num_levels() {
                return None;
            }
            let positions = walk
                .positions
                .get_or_insert_with(|| grid.level_positions(walk.level));
            if let Some(pos) = positions.next() {
                return Some(grid.block_at(pos));
            }
            walk.positions = None;
            walk.level += 1;
        }
    }

    /// Keys of the blocks of `task` whose write ROI (with `read`, read ROI)
    /// intersects `roi`, row-major over the grid.
    pub fn blocks_touching(&self, task: TaskIndex, roi: &Roi, read: bool, out: &mut Vec<BlockKey>) {
        let grid = self.grid(task);
        if read {
            grid.readers_of(roi, out);
        } else {
            grid.writers_of(roi, out);
        }
    }
}

/// Position of a lazy walk over one task's roots.
#[derive(Clone, Debug)]
pub struct RootCursor {
    task: TaskIndex,
    level: usize,
    positions: Option<BoxIter>,
}

impl RootCursor {
    /// Give no more roots: the task's blocks were settled without being
    /// enumerated (every one marked done: `Scheduler::begin_run`).
    pub fn exhaust(&mut self) {
        self.level = usize::MAX;
        self.positions = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Coord;
    use crate::task_spec::{Fit, TaskSpec};

    fn roi(o: &[i64], s: &[i64]) -> Roi {
        Roi::from_slices(o, s).unwrap()
    }

    fn two_task_graph(fit: Fit) -> DependencyGraph {
        let a = TaskSpec::new(
            "a",
            roi(&[0, 0], &[30, 33]),
            roi(&[-1, -2], &[6, 7]),
            roi(&[0, 0], &[4, 3]),
            fit,
            true,
            0,
            vec![],
        )
        .unwrap();
        let b = TaskSpec::new(
            "b",
            roi(&[2, -4], &[29, 40]),
            roi(&[-3, 0], &[11, 5]),
            roi(&[0, 0], &[5, 5]),
            fit,
            true,
            0,
            vec!["a".into()],
        )
        .unwrap();
        DependencyGraph::new(Pipeline::new(vec![a, b]).unwrap())
    }

    #[test]
    fn upstream_is_inverse_of_downstream() {
        for fit in [Fit::Valid, Fit::Overhang, Fit::Shrink] {
            let g = two_task_graph(fit);
            let mut ups = std::collections::BTreeSet::new();
            let mut downs = std::collections::BTreeSet::new();
            let mut buf = Vec::new();
            for t in 0..2 {
                for i in 0..g.num_blocks(t) {
                    let b = g.block(BlockKey { task: t, index: i });
                    buf.clear();
                    g.upstream(&b, &mut buf);
                    let mut scratch = Vec::new();
                    assert_eq!(buf.len() as u32, g.upstream_count(&b, &mut scratch));
                    for u in &buf {
                        ups.insert((*u, b.key));
                    }
                    buf.clear();
                    g.downstream(&b, &mut buf);
                    for d in &buf {
                        downs.insert((b.key, *d));
                    }
                }
            }
            assert_eq!(ups, downs, "{fit}");
            assert!(ups.iter().any(|(u, d)| u.task == 0 && d.task == 1));
        }
    }

    #[test]
    fn roots_are_exactly_the_blocks_without_upstream() {
        // a thin grid: levels with odd residues on the short axis have no
        // neighbours at all and must still be roots
        for (total, fit) in [
            (roi(&[0, 0], &[8, 6]), Fit::Valid),
            (roi(&[0, 0], &[30, 33]), Fit::Shrink),
        ] {
            let t = TaskSpec::new(
                "t",
                total,
                roi(&[0, -1], &[2, 6]),
                roi(&[0, 0], &[1, 4]),
                fit,
                true,
                0,
                vec![],
            )
            .unwrap();
            let g = DependencyGraph::new(Pipeline::new(vec![t]).unwrap());
            let mut buf = Vec::new();
            let want: Vec<BlockKey> = (0..g.num_blocks(0))
                .map(|i| g.block(BlockKey { task: 0, index: i }))
                .filter(|b| {
                    buf.clear();
                    g.upstream(b, &mut buf);
                    buf.is_empty()
                })
                .map(|b| b.key)
                .collect();
            let mut cursor = g.root_cursor(0);
            let mut got = Vec::new();
            while let Some(b) = g.next_root(&mut cursor, &mut buf) {
                got.push(b.key);
            }
            got.sort();
            assert_eq!(got, want);
            assert_eq!(g.count_roots(0), want.len() as u64);
        }
        let g = two_task_graph(Fit::Overhang);
        let mut buf = Vec::new();
        let want = (0..g.num_blocks(1))
            .filter(|&i| {
                buf.clear();
                g.upstream(&g.block(BlockKey { task: 1, index: i }), &mut buf);
                buf.is_empty()
            })
            .count() as u64;
        assert_eq!(g.count_roots(1), want);
    }

    #[test]
    fn inter_task_edges_are_exactly_the_overlaps() {
        let g = two_task_graph(Fit::Shrink);
        let mut buf = Vec::new();
        for i in 0..g.num_blocks(1) {
            let b = g.block(BlockKey { task: 1, index: i });
            buf.clear();
            g.upstream(&b, &mut buf);
            let got: Vec<u64> = buf
                .iter()
                .filter(|k| k.task == 0)
                .map(|k| k.index)
                .collect();
            let want: Vec<u64> = (0..g.num_blocks(0))
                .filter(|&j| {
                    g.block(BlockKey { task: 0, index: j })
                        .write_roi
                        .intersects(&b.read_roi)
                })
                .collect();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn a_level_walk_visits_every_block_once_level_by_level() {
        let g = two_task_graph(Fit::Overhang);
        let grid = g.grid(0);
        let mut walk = g.level_walk(0, None);
        let mut seen = std::collections::HashSet::new();
        let mut last_level = 0;
        let mut last_pos: Option<Coord> = None;
        while let Some(b) = g.next_in_walk(&mut walk) {
            let level = grid.level_of(&b.position);
            assert!(level as usize >= last_level, "levels ascend");
            if level as usize == last_level
                && let Some(p) = last_pos
            {
                assert!(p.as_slice() < b.position.as_slice(), "row-major in a level");
            }
            last_level = level as usize;
            last_pos = Some(b.position);
            assert!(seen.insert(b.key));
        }
        assert_eq!(seen.len() as u64, g.num_blocks(0));
        let mut one = g.level_walk(0, Some(1));
        let level_1: Vec<Block> = std::iter::from_fn(|| g.next_in_walk(&mut one)).collect();
        assert!(!level_1.is_empty());
        assert!(level_1.iter().all(|b| grid.level_of(&b.position) == 1));
        let mut none = g.level_walk(0, Some(grid.num_levels()));
        assert!(g.next_in_walk(&mut none).is_none());
    }
}
