//! One task's blocks: where they are, which level they belong to, and which
//! blocks of the same task they must wait for. [`BlockGrid`] owns this.
//!
//! ## Placement
//! Blocks tile the *total write ROI* (the total ROI without the read
//! context) at the stride of the write ROI's shape. Block `k` (a grid
//! position, `k >= 0` per axis) writes `first_write + k * stride` and reads
//! `first_read + k * stride`, where the first block's write region starts at
//! the total write ROI's begin. The fit decides how many positions exist per
//! axis: `valid` keeps `floor(W / stride)` (blocks entirely inside),
//! `overhang` and `shrink` keep `ceil(W / stride)` (every block whose write
//! region starts inside); `shrink` cuts the ROIs of border blocks to the
//! total ROI. The set of blocks is therefore always a box of positions,
//! enumerated lazily: nothing is allocated per block.
//!
//! ## Levels (read/write conflicts)
//! With `read_write_conflict`, two blocks may not run together when one
//! reads what the other writes. As daisy 1.x does, positions are split into
//! levels by their residue modulo a *level period* (in reverse C order of
//! the residues: the highest residue is level 0): per axis the smallest
//! multiple of the stride that is at least `max(context) + stride`, counted
//! in blocks. Blocks of one level never conflict. Level `L > 0` waits for
//! the blocks of level `L - 1` around it: per axis, the offset to the
//! previous level's residue `o` gives the neighbours `{o, o + p}` (for
//! `o < 0`), `{0}` (for `o == 0`) or `{o - p, o}` (for `o > 0`), combined
//! over axes. Only neighbours that exist are dependencies. Without
//! conflicts there is one level and no intra-task dependency. On a grid
//! thinner than the period some levels are empty; a level then waits for the
//! nearest earlier level that has blocks (daisy 1.x chains to the empty
//! level, which lets such blocks run beside conflicting level-0 blocks).
//!
//! ## Ids
//! A block's spatial id is the Cantor number (see `block_id`) of
//! `(write_offset - total_roi.offset) // write_shape`, i.e. its position
//! shifted by `context_lower // stride`, as in daisy 1.x.

use crate::block::{Block, BlockKey, BlockStatus, TaskIndex};
use crate::block_id::cantor_number;
use crate::error::DaisyError;
use crate::geometry::{Coord, GridIndexer, Roi};
use crate::task_spec::{Fit, TaskSpec};

/// Iterates the positions of a box `lo..hi` with a per-axis `step`, in C
/// order (last axis fastest). Allocation-free.
#[derive(Clone, Debug)]
pub struct BoxIter {
    lo: Coord,
    hi: Coord,
    step: Coord,
    cur: Coord,
    done: bool,
}

impl BoxIter {
    /// Positions `lo + i * step < hi` on every axis.
    pub fn new(lo: Coord, hi: Coord, step: Coord) -> Self {
        let done = (0..lo.dims()).any(|d| lo[d] >= hi[d]);
        Self {
            lo,
            hi,
            step,
            cur: lo,
            done,
        }
    }

    /// Number of positions the iterator yields from the start.
    pub fn count_all(&self) -> u64 {
        (0..self.lo.dims())
            .map(|d| {
                let extent = self.hi[d] - self.lo[d];
                if extent <= 0 {
                    0
                } else {
                    ((extent + self.step[d] - 1) / self.step[d]) as u64
                }
            })
            .fold(1u64, u64::saturating_mul)
    }
}

impl Iterator for BoxIter {
    type Item = Coord;
    #[inline]
    fn next(&mut self) -> Option<Coord> {
        if self.done {
            return None;
        }
        let out = self.cur;
        let mut d = self.cur.dims();
        loop {
            if d == 0 {
                self.done = true;
                break;
            }
            d -= 1;
            self.cur[d] += self.step[d];
            if self.cur[d] < self.hi[d] {
                break;
            }
            self.cur[d] = self.lo[d];
        }
        Some(out)
    }
}

/// Number of positions `p = first + k * period` in `0..extent` for which
/// some offset `o` keeps `p + o` in `0..extent`: points of an arithmetic
/// progression inside the union of the intervals `[-o, extent - o)`.
/// Closed form, so it costs nothing however long the axis.
fn count_with_neighbour(first: i64, period: i64, extent: i64, offsets: &[i64]) -> u64 {
    // points of the progression in [lo, hi)
    let points_in = |lo: i64, hi: i64| -> i64 {
        let lo = lo.max(0).max(first);
        let hi = hi.min(extent);
        if lo >= hi {
            return 0;
        }
        let k_lo = (lo - first + period - 1).div_euclid(period);
        let k_hi = (hi - 1 - first).div_euclid(period);
        (k_hi - k_lo + 1).max(0)
    };
    let mut intervals: Vec<(i64, i64)> = offsets.iter().map(|o| (-o, extent - o)).collect();
    intervals.sort_unstable();
    // merge overlapping intervals, then count each once
    let mut merged: Vec<(i64, i64)> = Vec::new();
    for (lo, hi) in intervals {
        match merged.last_mut() {
            Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    merged
        .iter()
        .map(|&(lo, hi)| points_in(lo, hi))
        .sum::<i64>() as u64
}

/// The offsets from a block of the level at `level` to the blocks of the
/// level at `prev` it conflicts with, for levels repeating every `period`
/// (any unit: grid cells, or world units with a world period): per axis
/// the nearest one on each side (one where they line up), and all their
/// combinations in C order. Also returns the per-axis choices.
pub fn conflict_offsets(
    level: &Coord,
    prev: &Coord,
    period: &Coord,
) -> (Vec<Vec<i64>>, Vec<Coord>) {
    let dims = level.dims();
    let to_prev = prev.sub(level);
    let mut options: Vec<Vec<i64>> = Vec::with_capacity(dims);
    for d in 0..dims {
        let (o, p) = (to_prev[d], period[d]);
        options.push(match o.cmp(&0) {
            std::cmp::Ordering::Less => vec![o, o + p],
            std::cmp::Ordering::Equal => vec![0],
            std::cmp::Ordering::Greater => vec![o - p, o],
        });
    }
    let mut combos = vec![Coord::splat(0, dims)];
    for (d, opts) in options.iter().enumerate() {
        let mut next = Vec::with_capacity(combos.len() * opts.len());
        for c in &combos {
            for &o in opts {
                let mut c2 = *c;
                c2[d] = o;
                next.push(c2);
            }
        }
        combos = next;
    }
    (options, combos)
}

/// A task's levels in world units, as daisy 1.x's graph reports them.
#[derive(Clone, Debug, PartialEq)]
pub struct LevelLayout {
    /// How far apart two blocks of one level are (the level period times
    /// the block stride).
    pub stride: Coord,
    /// Per level: the read offset of its first block, relative to the
    /// total read ROI's.
    pub offsets: Vec<Coord>,
    /// Per level: the offsets to the blocks of the previous level it
    /// waits for.
    pub conflicts: Vec<Vec<Coord>>,
}

/// The block layout of one task.
#[derive(Clone, Debug)]
pub struct BlockGrid {
    task: TaskIndex,
    fit: Fit,
    stride: Coord,
    first_read: Roi,
    first_write: Roi,
    total_read: Roi,
    total_write: Roi,
    grid: GridIndexer,
    id_shift: Coord,
    period: Coord,
    period_grid: GridIndexer,
    /// Level of each residue (flat C-order over `period`).
    level_of_residue: Vec<u32>,
    /// Residue of each level, in grid units.
    level_offsets: Vec<Coord>,
    /// Per level: grid offsets to the blocks of the previous level it waits
    /// for (empty for level 0).
    conflicts: Vec<Vec<Coord>>,
    /// Per level and axis: the neighbour offsets `conflicts` combines.
    conflict_axes: Vec<Vec<Vec<i64>>>,
    /// Per level: the level that waits for it (the next non-empty one).
    next_level: Vec<Option<usize>>,
    /// Per level: how many of its blocks wait for no block of this task
    /// (all of level 0; at a border, a few of the others).
    intra_roots: Vec<u64>,
}

/// The level period of a task's grid, per axis, in blocks: blocks a
/// period apart never conflict, so the residues of a period are the
/// levels. 1 without `read_write_conflict`; else the context's reach plus
/// a block, capped by the grid extent, as daisy 1.x does: beyond it a
/// residue has no blocks, and the level tables stay as small as the grid
/// however wide the context.
fn level_period(spec: &TaskSpec, stride: &Coord, grid_shape: &Coord) -> Coord {
    let dims = stride.dims();
    let mut period = Coord::splat(1, dims);
    if spec.read_write_conflict {
        let lo = spec.context_lower();
        let hi = spec.context_upper();
        for d in 0..dims {
            let min_level_stride = lo[d].max(hi[d]) + stride[d];
            period[d] = ((min_level_stride + stride[d] - 1) / stride[d])
                .min(grid_shape[d])
                .max(1);
        }
    }
    period
}

/// Per level: the grid offsets to the blocks of the level it waits for,
/// the per-axis neighbour offsets they combine, and the level that waits
/// for it.
#[allow(clippy::type_complexity)]
fn chain_levels(
    level_offsets: &[Coord],
    grid_shape: &Coord,
    period: &Coord,
) -> (Vec<Vec<Coord>>, Vec<Vec<Vec<i64>>>, Vec<Option<usize>>) {
    let mut conflicts = vec![Vec::new()];
    let mut conflict_axes = vec![Vec::new()];
    // Each level waits for the nearest earlier level that has blocks: on
    // a grid thinner than the level period some levels are empty, and
    // chaining across them keeps the levels ordered (a level chained to
    // an empty one would wait for nothing and run beside level 0).
    let non_empty = |off: &Coord| BoxIter::new(*off, *grid_shape, *period).count_all() > 0;
    let mut prev = 0usize;
    let mut next_level = vec![None; level_offsets.len()];
    for level in 1..level_offsets.len() {
        let (options, combos) =
            conflict_offsets(&level_offsets[level], &level_offsets[prev], period);
        if non_empty(&level_offsets[level]) {
            next_level[prev] = Some(level);
            prev = level;
        }
        conflicts.push(combos);
        conflict_axes.push(options);
    }
    (conflicts, conflict_axes, next_level)
}

/// Per level, how many of its blocks wait for no block of this task.
fn intra_roots(
    level_offsets: &[Coord],
    grid_shape: &Coord,
    period: &Coord,
    conflict_axes: &[Vec<Vec<i64>>],
) -> Vec<u64> {
    let dims = grid_shape.dims();
    (0..level_offsets.len())
        .map(|level| {
            if level == 0 {
                return BoxIter::new(level_offsets[0], *grid_shape, *period).count_all();
            }
            // A block waits for nothing iff on some axis none of its
            // neighbour offsets stays on the grid; count the complement
            // axis by axis.
            let all = BoxIter::new(level_offsets[level], *grid_shape, *period).count_all();
            let mut with_neighbours = 1u64;
            for d in 0..dims {
                with_neighbours = with_neighbours.saturating_mul(count_with_neighbour(
                    level_offsets[level][d],
                    period[d],
                    grid_shape[d],
                    &conflict_axes[level][d],
                ));
            }
            all.saturating_sub(with_neighbours)
        })
        .collect()
}

impl BlockGrid {
    /// Refuse a task whose block grid is too large for 64-bit block ids:
    /// checked when a task spec is built from user input and again when a
    /// pipeline is assembled, so no grid with overflowing ids is ever made.
    pub fn check_ids(spec: &TaskSpec) -> Result<(), DaisyError> {
        let grid = Self::new(0, spec);
        if grid.num_blocks() > 0 && grid.max_spatial_id().is_none() {
            return Err(DaisyError::invalid(
                "total_roi",
                format!(
                    "task {:?}: {} blocks per axis is too many for 64-bit block ids; use a \
                     larger write_roi or split the task",
                    spec.task_id,
                    grid.grid_shape()
                ),
            ));
        }
        Ok(())
    }

    /// The layout of `spec`, which is task `task` of its pipeline.
    pub fn new(task: TaskIndex, spec: &TaskSpec) -> Self {
        let dims = spec.total_roi.dims();
        let stride = spec.write_roi.shape();
        let total_write = spec.total_write_roi();
        let shift = total_write.begin().sub(&spec.write_roi.begin());
        let first_write = spec.write_roi.shift(&shift);
        let first_read = spec.read_roi.shift(&shift);
        let mut grid_shape = Coord::splat(0, dims);
        for d in 0..dims {
            let w = total_write.shape()[d];
            let s = stride[d];
            grid_shape[d] = match spec.fit {
                Fit::Valid => w / s,
                Fit::Overhang | Fit::Shrink => (w + s - 1) / s,
            };
        }
        let id_shift = total_write
            .begin()
            .sub(&spec.total_roi.begin())
            .div_floor(&stride);

        let period = level_period(spec, &stride, &grid_shape);
        let period_grid = GridIndexer::new(period);
        // daisy 1.x orders levels by residue in reverse C order: the last
        // residue is level 0.
        let mut level_offsets: Vec<Coord> =
            BoxIter::new(Coord::splat(0, dims), period, Coord::splat(1, dims)).collect();
        level_offsets.reverse();
        let mut level_of_residue = vec![0u32; level_offsets.len()];
        for (level, off) in level_offsets.iter().enumerate() {
            level_of_residue[period_grid.flat(off) as usize] = level as u32;
        }
        let (conflicts, conflict_axes, next_level) =
            chain_levels(&level_offsets, &grid_shape, &period);
        let grid = GridIndexer::new(grid_shape);
        let intra_roots = intra_roots(&level_offsets, &grid_shape, &period, &conflict_axes);

        Self {
            task,
            fit: spec.fit,
            stride,
            first_read,
            first_write,
            total_read: spec.total_roi,
            total_write,
            grid,
            id_shift,
            period,
            period_grid,
            level_of_residue,
            level_offsets,
            conflicts,
            conflict_axes,
            next_level,
            intra_roots,
        }
    }

    /// Per level, how many blocks wait for no other block of this task.
    pub fn intra_roots_per_level(&self) -> &[u64] {
        &self.intra_roots
    }

    /// True if the block at `pos` waits for some block of this task.
    #[inline]
    pub fn has_intra_upstream(&self, pos: &Coord) -> bool {
        let level = self.level_of(pos) as usize;
        level > 0
            && self.conflict_axes[level]
                .iter()
                .enumerate()
                .all(|(d, opts)| {
                    opts.iter()
                        .any(|o| (0..self.grid.shape()[d]).contains(&(pos[d] + o)))
                })
    }

    /// The largest spatial id of the grid (at its far corner), or None if it
    /// does not fit in 64 bits.
    pub fn max_spatial_id(&self) -> Option<u64> {
        let one = Coord::splat(1, self.grid.shape().dims());
        let corner = self.grid.shape().sub(&one).add(&self.id_shift);
        crate::block_id::cantor_number_checked(corner.as_slice())
    }

    /// Which task of the pipeline this grid belongs to.
    pub fn task(&self) -> TaskIndex {
        self.task
    }

    /// Blocks per axis.
    pub fn grid_shape(&self) -> Coord {
        self.grid.shape()
    }

    /// The C-order indexer of the placement grid.
    pub fn indexer(&self) -> &GridIndexer {
        &self.grid
    }

    /// Total number of blocks.
    pub fn num_blocks(&self) -> u64 {
        self.grid.len()
    }

    /// The interval block position `k` of axis `d` reads, `[begin, end)`
    /// (cut to the total ROI under `shrink`, as [`Self::block_at`] cuts
    /// it): blocks are a box of positions, so what a task's blocks read
    /// along one axis is known without making a block.
    pub fn read_interval(&self, d: usize, k: i64) -> (i64, i64) {
        let begin = self.first_read.begin()[d] + k * self.stride[d];
        let end = begin + self.first_read.shape()[d];
        if self.fit == Fit::Shrink {
            let (lo, hi) = (self.total_read.begin()[d], self.total_read.end()[d]);
            return (begin.max(lo), end.min(hi));
        }
        (begin, end)
    }

    /// The region the task's blocks may write: its total ROI without the
    /// read context.
    pub fn total_write_roi(&self) -> Roi {
        self.total_write
    }

    /// The region the blocks write, as one box: the total write ROI from
    /// its begin, as far as the last block's write ROI reaches inside it
    /// (`valid` leaves its last partial block of each axis out; `shrink`
    /// and `overhang` reach its end). Empty when the task has no blocks.
    pub fn written_roi(&self) -> Roi {
        let dims = self.stride.dims();
        let mut end = self.total_write.end();
        for d in 0..dims {
            let reach = self.first_write.begin()[d] + self.grid.shape()[d] * self.stride[d];
            end[d] = end[d].min(reach).max(self.total_write.begin()[d]);
        }
        let begin = self.total_write.begin();
        // end >= begin on every axis and both lie in the total write ROI
        Roi::new_unchecked(begin, end.sub(&begin))
    }

    /// The levels in world units (daisy 1.x's `compute_level_*`).
    pub fn level_layout(&self) -> LevelLayout {
        let base = self.first_read.begin().sub(&self.total_read.begin());
        LevelLayout {
            stride: self.period.mul(&self.stride),
            offsets: self
                .level_offsets
                .iter()
                .map(|o| o.mul(&self.stride).add(&base))
                .collect(),
            conflicts: self
                .conflicts
                .iter()
                .map(|level| level.iter().map(|c| c.mul(&self.stride)).collect())
                .collect(),
        }
    }

    /// Number of levels (1 without read/write conflicts).
    pub fn num_levels(&self) -> usize {
        self.level_offsets.len()
    }

    /// The level of a grid position.
    #[inline]
    pub fn level_of(&self, pos: &Coord) -> u32 {
        let mut residue = *pos;
        for d in 0..pos.dims() {
            residue[d] = pos[d].rem_euclid(self.period[d]);
        }
        self.level_of_residue[self.period_grid.flat(&residue) as usize]
    }

    /// Positions of one level, in C order, lazily.
    pub fn level_positions(&self, level: usize) -> BoxIter {
        BoxIter::new(self.level_offsets[level], self.grid.shape(), self.period)
    }

    /// The block at a grid position (which must be on the grid).
    #[inline]
    pub fn block_at(&self, pos: Coord) -> Block {
        let shift = pos.mul(&self.stride);
        let requested_write_roi = self.first_write.shift(&shift);
        let mut write_roi = requested_write_roi;
        let mut read_roi = self.first_read.shift(&shift);
        if self.fit == Fit::Shrink {
            write_roi = write_roi.intersect(&self.total_write);
            read_roi = read_roi.intersect(&self.total_read);
        }
        Block {
            key: BlockKey {
                task: self.task,
                index: self.grid.flat(&pos),
            },
            spatial_id: cantor_number(pos.add(&self.id_shift).as_slice()),
            position: pos,
            read_roi,
            write_roi,
            requested_write_roi,
            status: BlockStatus::Created,
            stats: None,
        }
    }

    /// The block with a flat grid index `< num_blocks()`.
    #[inline]
    pub fn block(&self, index: u64) -> Block {
        self.block_at(self.grid.unflat(index))
    }

    /// The grid position whose (unshrunk) write ROI starts at `offset`, if
    /// that is a position on the grid.
    pub fn position_of_write_offset(&self, offset: &Coord) -> Option<Coord> {
        if offset.dims() != self.stride.dims() {
            return None;
        }
        let rel = offset.sub(&self.first_write.begin());
        let pos = rel.div_floor(&self.stride);
        if pos.mul(&self.stride) != rel || !self.grid.contains(&pos) {
            return None;
        }
        Some(pos)
    }

    /// Positions of the same task this block waits for (previous level).
    pub fn intra_upstream(&self, pos: &Coord, out: &mut Vec<BlockKey>) {
        let level = self.level_of(pos) as usize;
        for off in &self.conflicts[level] {
            let q = pos.add(off);
            if self.grid.contains(&q) {
                out.push(self.key_of(&q));
            }
        }
    }

    /// Number of blocks of the same task this block waits for.
    pub fn intra_upstream_count(&self, pos: &Coord) -> u32 {
        let level = self.level_of(pos) as usize;
        self.conflicts[level]
            .iter()
            .filter(|off| self.grid.contains(&pos.add(off)))
            .count() as u32
    }

    /// Positions of the same task that wait for this block (next level).
    pub fn intra_downstream(&self, pos: &Coord, out: &mut Vec<BlockKey>) {
        let Some(next) = self.next_level[self.level_of(pos) as usize] else {
            return;
        };
        // conflict offsets ascend, so reversed they give the downstream
        // positions in row-major order (daisy 1.x's order of readiness)
        for off in self.conflicts[next].iter().rev() {
            let q = pos.sub(off);
            if self.grid.contains(&q) {
                out.push(self.key_of(&q));
            }
        }
    }

    #[inline]
    fn key_of(&self, pos: &Coord) -> BlockKey {
        BlockKey {
            task: self.task,
            index: self.grid.flat(pos),
        }
    }

    /// Clamp a per-axis candidate range to the grid.
    fn clamped(&self, lo: Coord, hi: Coord) -> BoxIter {
        let zero = Coord::splat(0, lo.dims());
        let lo = lo.max(&zero);
        let hi = hi.min(&self.grid.shape());
        BoxIter::new(lo, hi, Coord::splat(1, lo.dims()))
    }

    /// Keys of the blocks whose write ROI overlaps `roi`.
    pub fn writers_of(&self, roi: &Roi, out: &mut Vec<BlockKey>) {
        if roi.is_empty() {
            return;
        }
        let rel_begin = roi.begin().sub(&self.first_write.begin());
        let rel_end = roi.end().sub(&self.first_write.begin());
        let lo = rel_begin.div_floor(&self.stride);
        let hi = rel_end.snap_up(&self.stride).div_floor(&self.stride);
        for pos in self.clamped(lo, hi) {
            if self.fit != Fit::Shrink || self.block_at(pos).write_roi.intersects(roi) {
                out.push(self.key_of(&pos));
            }
        }
    }

    /// Keys of the blocks whose read ROI overlaps `roi`.
    pub fn readers_of(&self, roi: &Roi, out: &mut Vec<BlockKey>) {
        if roi.is_empty() {
            return;
        }
        let r = self.first_read.shape();
        let rel_begin = roi.begin().sub(&self.first_read.begin()).sub(&r);
        let rel_end = roi.end().sub(&self.first_read.begin());
        let one = Coord::splat(1, roi.dims());
        let lo = rel_begin.div_floor(&self.stride).add(&one);
        let hi = rel_end.snap_up(&self.stride).div_floor(&self.stride);
        for pos in self.clamped(lo, hi) {
            if self.fit != Fit::Shrink || self.block_at(pos).read_roi.intersects(roi) {
                out.push(self.key_of(&pos));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_beyond_64_bit_ids_are_refused() {
        let big = 1i64 << 34;
        let unit = Roi::from_slices(&[0, 0], &[1, 1]).unwrap();
        let spec = TaskSpec::new(
            "huge",
            Roi::from_slices(&[0, 0], &[big, big]).unwrap(),
            unit,
            unit,
            Fit::Valid,
            true,
            0,
            vec![],
        )
        .unwrap();
        let e = BlockGrid::check_ids(&spec).unwrap_err();
        assert!(e.to_string().starts_with("total_roi:"), "{e}");
        assert!(e.to_string().contains("64-bit block ids"), "{e}");
        let e = crate::pipeline::Pipeline::new(vec![spec]).unwrap_err();
        assert!(e.to_string().contains("64-bit block ids"), "{e}");
    }

    fn roi(o: &[i64], s: &[i64]) -> Roi {
        Roi::from_slices(o, s).unwrap()
    }

    fn grid(total: Roi, read: Roi, write: Roi, fit: Fit, conflict: bool) -> BlockGrid {
        let spec = TaskSpec::new("t", total, read, write, fit, conflict, 0, vec![]).unwrap();
        BlockGrid::new(0, &spec)
    }

    #[test]
    fn block_counts_per_fit() {
        let total = roi(&[0], &[10]);
        let r = roi(&[-1], &[5]);
        let w = roi(&[0], &[3]);
        // total write = [1, 9), 8 long: valid 2, overhang/shrink 3
        assert_eq!(grid(total, r, w, Fit::Valid, true).num_blocks(), 2);
        assert_eq!(grid(total, r, w, Fit::Overhang, true).num_blocks(), 3);
        let g = grid(total, r, w, Fit::Shrink, true);
        assert_eq!(g.num_blocks(), 3);
        let last = g.block(2);
        assert_eq!(last.write_roi, roi(&[7], &[2]));
        assert_eq!(last.read_roi, roi(&[6], &[4]));
    }

    #[test]
    fn levels_never_conflict() {
        let g = grid(
            roi(&[0, 0], &[40, 40]),
            roi(&[-3, -1], &[9, 6]),
            roi(&[0, 0], &[4, 4]),
            Fit::Overhang,
            true,
        );
        assert!(g.num_levels() > 1);
        for level in 0..g.num_levels() {
            let blocks: Vec<Block> = g.level_positions(level).map(|p| g.block_at(p)).collect();
            for a in &blocks {
                assert_eq!(g.level_of(&a.position) as usize, level);
                for b in &blocks {
                    if a.key != b.key {
                        assert!(!a.read_roi.intersects(&b.write_roi));
                    }
                }
            }
        }
        let total: u64 = (0..g.num_levels())
            .map(|l| g.level_positions(l).count() as u64)
            .sum();
        assert_eq!(total, g.num_blocks());
    }

    #[test]
    fn intra_upstream_and_downstream_are_inverse() {
        let g = grid(
            roi(&[0, 0, 0], &[20, 20, 20]),
            roi(&[-2, -2, -2], &[7, 7, 7]),
            roi(&[0, 0, 0], &[3, 3, 3]),
            Fit::Shrink,
            true,
        );
        let mut up = Vec::new();
        let mut down = Vec::new();
        for i in 0..g.num_blocks() {
            let pos = g.indexer().unflat(i);
            up.clear();
            g.intra_upstream(&pos, &mut up);
            assert_eq!(up.len() as u32, g.intra_upstream_count(&pos));
            for u in &up {
                down.clear();
                g.intra_downstream(&g.indexer().unflat(u.index), &mut down);
                assert!(down.contains(&BlockKey { task: 0, index: i }));
            }
        }
    }

    #[test]
    fn writers_and_readers_match_brute_force() {
        for fit in [Fit::Valid, Fit::Overhang, Fit::Shrink] {
            let g = grid(
                roi(&[-5, 3], &[31, 29]),
                roi(&[-2, -1], &[7, 6]),
                roi(&[0, 0], &[4, 3]),
                fit,
                false,
            );
            let probe = roi(&[2, 10], &[9, 4]);
            let mut got = Vec::new();
            g.writers_of(&probe, &mut got);
            let want: Vec<BlockKey> = (0..g.num_blocks())
                .map(|i| g.block(i))
                .filter(|b| b.write_roi.intersects(&probe))
                .map(|b| b.key)
                .collect();
            assert_eq!(got, want, "{fit}");
            got.clear();
            g.readers_of(&probe, &mut got);
            let want: Vec<BlockKey> = (0..g.num_blocks())
                .map(|i| g.block(i))
                .filter(|b| b.read_roi.intersects(&probe))
                .map(|b| b.key)
                .collect();
            assert_eq!(got, want, "{fit}");
        }
    }

    #[test]
    fn neighbour_count_matches_a_walk() {
        for extent in 0..12 {
            for period in 1..5 {
                for first in 0..period {
                    for offsets in [vec![0], vec![-1, 1], vec![-2, 1], vec![-3, 0], vec![1, 4]] {
                        let mut walk = 0;
                        let mut p = first;
                        while p < extent {
                            if offsets.iter().any(|o| (0..extent).contains(&(p + o))) {
                                walk += 1;
                            }
                            p += period;
                        }
                        assert_eq!(
                            count_with_neighbour(first, period, extent, &offsets),
                            walk,
                            "{first} {period} {extent} {offsets:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn wide_context_keeps_level_tables_small() {
        let g = grid(
            roi(&[0, 0, 0], &[202, 202, 202]),
            roi(&[-100, -100, -100], &[201, 201, 201]),
            roi(&[0, 0, 0], &[1, 1, 1]),
            Fit::Valid,
            true,
        );
        assert_eq!(g.num_blocks(), 8);
        assert_eq!(g.num_levels(), 8);
    }

    #[test]
    fn box_iter_counts() {
        let it = BoxIter::new(
            Coord::new(&[1, 0]).unwrap(),
            Coord::new(&[6, 3]).unwrap(),
            Coord::new(&[2, 1]).unwrap(),
        );
        assert_eq!(it.count_all(), 9);
        assert_eq!(it.count(), 9);
    }
}
