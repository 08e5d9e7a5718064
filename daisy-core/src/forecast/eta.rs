//! The ETA of a running task from the model, not a mean rate: the blocks
//! still to run, each as costly as its nearest measured block (this run's,
//! and the tracking store's from earlier runs and a forecast's sample),
//! played on the task's workers after the blocks in flight.
//!
//! A mean rate says "eta 26s" at 37 of 64 blocks of a task whose costly
//! blocks lie in the middle rows still to come; the model sees them where
//! they were measured (a forecast's sample is spread over the volume).
//! The blocks this run did also show what the earlier measurements missed:
//! a block that took more than [`TAIL_FACTOR`] times what they predicted
//! for it is of a kind the sample did not see (2 % of blocks 30 times the
//! rest, a sample of 20 that met none), and its excess, spread over the
//! blocks this run did, is added to every block still to run: the rest
//! is expected to hold that kind as often. A smaller miss is the model's
//! own spread (a costly disk's border is a block or two off, five times
//! the background's cost) and is left to the nearest block; scaling every
//! block by this run's time over the predicted was tried and dropped: the
//! first rows of the disk benchmark were predicted part-costly from the
//! sample's disk blocks, and the scale halved the disk still to come (ETA
//! at a quarter 42 % low, against 1 to 8 % without). Nearest is by steps on the block grid (a breadth-first search from
//! every measured block at once, so one ETA costs a pass over the grid,
//! not one per block and measured block); the blocks are handed out in
//! grid order, as the scheduler does within a level. What it leaves out:
//! waiting for upstream tasks and for conflicting neighbours of earlier
//! levels (a task's ETA is its own blocks on its own workers).

use crate::geometry::{Coord, GridIndexer};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Instant;

/// Checkpoints a task's ETA is recomputed and recorded at: one every 5 %
/// of its blocks (issue 54), so a run's `runs.jsonl` line holds at most
/// this many per task and the model runs that often, whatever the size.
pub const CHECKPOINTS: u64 = 20;

/// How many times its prediction a block of this run must take to be of
/// a kind the earlier measurements missed (the forecast's own bound on an
/// unseen kind, see `forecast`).
pub use super::TAIL_FACTOR;

/// What a task's blocks were before this run's first checkpoint: which are
/// to run (not marked done, not skipped by a mask) and which the tracking
/// store measured in earlier runs (`(index, seconds)`).
#[derive(Clone, Debug)]
pub struct Prior {
    /// The task's block grid (placement grid) shape.
    pub shape: Coord,
    /// Per block (placement index): it is to run in this run.
    pub to_run: Vec<bool>,
    /// Blocks measured before, with their seconds.
    pub measured: Vec<(u64, f64)>,
}

/// One task's ETA through a run: its blocks done in this run, when the
/// next checkpoint is due, and the model's last ETA.
#[derive(Clone, Debug)]
pub struct TaskEta {
    step: u64,
    next_at: u64,
    done: Vec<(u64, f64)>,
    done_mask: Vec<bool>,
    prior: Option<Prior>,
    /// What the earlier measurements alone predict for each block.
    prior_cost: Option<Vec<f64>>,
    latest: Option<(Instant, f64)>,
}

impl TaskEta {
    /// The ETA of a task of `total` blocks.
    pub fn new(total: u64) -> Self {
        let step = total.div_ceil(CHECKPOINTS).max(1);
        Self {
            step,
            next_at: step,
            done: Vec::new(),
            done_mask: Vec::new(),
            prior: None,
            prior_cost: None,
            latest: None,
        }
    }

    /// Block `index` came back done after `seconds`: true when a
    /// checkpoint is due.
    pub fn block_done(&mut self, index: u64, seconds: f64) -> bool {
        self.done.push((index, seconds));
        if let Some(d) = self.done_mask.get_mut(index as usize) {
            *d = true;
        }
        if (self.done.len() as u64) < self.next_at {
            return false;
        }
        self.next_at += self.step;
        true
    }

    /// Blocks done in this run.
    pub fn done_count(&self) -> u64 {
        self.done.len() as u64
    }

    /// Whether the state before the run is known.
    pub fn has_prior(&self) -> bool {
        self.prior.is_some()
    }

    /// The state before the run (read once, at the first checkpoint).
    pub fn set_prior(&mut self, prior: Prior) {
        let mut mask = vec![false; prior.to_run.len()];
        for &(i, _) in &self.done {
            if let Some(d) = mask.get_mut(i as usize) {
                *d = true;
            }
        }
        self.done_mask = mask;
        self.prior_cost = nearest_costs(&prior.shape, &prior.measured);
        self.prior = Some(prior);
    }

    /// The model's ETA now, with the blocks in flight (`(index, seconds
    /// they ran)`) on `workers` workers; kept for [`Self::eta_now`]. None
    /// before [`Self::set_prior`] or without a measured block.
    pub fn checkpoint(
        &mut self,
        now: Instant,
        in_flight: &[(u64, f64)],
        workers: u32,
    ) -> Option<f64> {
        let prior = self.prior.as_ref()?;
        // the earlier measurements first: a tie between one of them and one
        // of this run's goes to the earlier, whose blocks were spread over
        // the volume (this run's first blocks are its first rows; ties to
        // them carried the cheap first rows of the disk benchmark into the
        // disk, ETA at a quarter 10-15 % low against 1-8 %)
        let mut measured = prior.measured.clone();
        measured.extend_from_slice(&self.done);
        let excess = self.unseen_excess();
        let cost: Vec<f64> = nearest_costs(&prior.shape, &measured)?
            .into_iter()
            .map(|c| c + excess)
            .collect();
        let flying: std::collections::HashSet<u64> = in_flight.iter().map(|f| f.0).collect();
        let remaining: Vec<f64> = (0..prior.to_run.len())
            .filter(|&i| {
                prior.to_run[i]
                    && !self.done_mask.get(i).copied().unwrap_or(false)
                    && !flying.contains(&(i as u64))
            })
            .map(|i| cost[i])
            .collect();
        let busy: Vec<f64> = in_flight
            .iter()
            .map(|&(i, ran)| cost.get(i as usize).copied().unwrap_or(0.0) - ran)
            .collect();
        let eta = eta_seconds(&remaining, &busy, workers);
        self.latest = Some((now, eta));
        Some(eta)
    }

    /// Seconds a block still to run is expected to take beyond the model:
    /// what this run's blocks took beyond [`TAIL_FACTOR`] times the earlier
    /// measurements' prediction, over the blocks this run did; 0 without
    /// earlier measurements or such blocks.
    fn unseen_excess(&self) -> f64 {
        let Some(predicted) = &self.prior_cost else {
            return 0.0;
        };
        if self.done.is_empty() {
            return 0.0;
        }
        let excess: f64 = self
            .done
            .iter()
            .filter_map(|&(i, s)| {
                let p = *predicted.get(i as usize)?;
                (s > TAIL_FACTOR * p).then_some(s - p)
            })
            .sum();
        excess / self.done.len() as f64
    }

    /// The last checkpoint's ETA less the time since (at least 0); None
    /// before the first.
    pub fn eta_now(&self, now: Instant) -> Option<f64> {
        self.latest
            .map(|(at, eta)| (eta - now.saturating_duration_since(at).as_secs_f64()).max(0.0))
    }
}

/// Each cell's figure from its nearest measured cell (steps along the
/// axes; ties to the one listed first). `measured` are `(flat index,
/// seconds)`; None without any.
pub fn nearest_costs(shape: &Coord, measured: &[(u64, f64)]) -> Option<Vec<f64>> {
    let grid = GridIndexer::new(*shape);
    let n = grid.len() as usize;
    if measured.is_empty() || n == 0 {
        return None;
    }
    let mut cost = vec![f64::NAN; n];
    let mut queue = VecDeque::new();
    for &(i, s) in measured {
        if let Some(c) = cost.get_mut(i as usize)
            && c.is_nan()
        {
            *c = s;
            queue.push_back(i);
        }
    }
    // neighbours by strides on the flat index: no coordinate is made (a
    // pass over a 10^6-block grid, 20 times a run)
    let sizes: Vec<u64> = shape.as_slice().iter().map(|&n| n.max(0) as u64).collect();
    let mut strides = vec![1u64; sizes.len()];
    for d in (0..sizes.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * sizes[d + 1];
    }
    while let Some(i) = queue.pop_front() {
        let here = cost[i as usize];
        for (&size, &stride) in sizes.iter().zip(&strides) {
            let at = (i / stride) % size;
            let mut visit = |j: u64| {
                if cost[j as usize].is_nan() {
                    cost[j as usize] = here;
                    queue.push_back(j);
                }
            };
            if at > 0 {
                visit(i - stride);
            }
            if at + 1 < size {
                visit(i + stride);
            }
        }
    }
    Some(cost)
}

#[derive(Clone, Copy, PartialEq)]
struct At(f64);
impl Eq for At {}
impl PartialOrd for At {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for At {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Seconds until the last of `remaining` (costs in hand-out order) ends on
/// `workers` workers, the first of them busy for `in_flight` more seconds
/// each (a block in flight: its cost less what it ran already, at least
/// 0).
pub fn eta_seconds(remaining: &[f64], in_flight: &[f64], workers: u32) -> f64 {
    let workers = (workers.max(1) as usize).max(in_flight.len());
    let mut free: BinaryHeap<Reverse<At>> = (0..workers)
        .map(|w| Reverse(At(in_flight.get(w).copied().unwrap_or(0.0).max(0.0))))
        .collect();
    let mut end = in_flight.iter().copied().fold(0.0f64, f64::max);
    for &c in remaining {
        let Some(Reverse(At(at))) = free.pop() else {
            break;
        };
        let done = at + c.max(0.0);
        end = end.max(done);
        free.push(Reverse(At(done)));
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_come_every_twentieth_of_the_blocks_and_the_eta_counts_down() {
        let shape = Coord::new(&[1, 40]).unwrap();
        let mut eta = TaskEta::new(40);
        let due: Vec<bool> = (0..4).map(|i| eta.block_done(i, 1.0)).collect();
        assert_eq!(due, vec![false, true, false, true]);
        let t0 = Instant::now();
        assert!(eta.checkpoint(t0, &[], 2).is_none(), "no prior yet");
        eta.set_prior(Prior {
            shape,
            to_run: vec![true; 40],
            measured: vec![(39, 3.0)],
        });
        // 35 left after the one in flight: those nearer block 3 at 1 s (this
        // run's), those nearer block 39 at 3 s (the store's), on 2 workers
        let e = eta.checkpoint(t0, &[(4, 0.5)], 2).unwrap();
        let cheap = 17.0; // blocks 5..=21, about half
        let expected = (cheap * 1.0 + (35.0 - cheap) * 3.0 + 0.5) / 2.0;
        assert!((e - expected).abs() <= 3.0, "{e} {expected}");
        assert_eq!(eta.eta_now(t0), Some(e));
        let later = t0 + std::time::Duration::from_secs(1);
        assert!((eta.eta_now(later).unwrap() - (e - 1.0)).abs() < 1e-9);
        assert_eq!(eta.done_count(), 4);
    }

    #[test]
    fn a_kind_of_block_the_sample_missed_raises_the_eta_of_all_the_rest() {
        let shape = Coord::new(&[1, 100]).unwrap();
        let prior = || Prior {
            shape,
            to_run: vec![true; 100],
            measured: vec![(50, 1.0)],
        };
        let t0 = Instant::now();
        let mut plain = TaskEta::new(100);
        let mut met = TaskEta::new(100);
        let mut spread = TaskEta::new(100);
        for i in 0..10 {
            plain.block_done(i, 1.0);
            // one block of 10 took 31 s where the sample predicted 1 s
            met.block_done(i, if i == 3 { 31.0 } else { 1.0 });
            // all twice the prediction: the model's spread, not a new kind
            spread.block_done(i, 2.0);
        }
        for e in [&mut plain, &mut met, &mut spread] {
            e.set_prior(prior());
        }
        let a = plain.checkpoint(t0, &[], 1).unwrap();
        assert!((a - 90.0).abs() < 1e-9, "{a}");
        // 30 s of excess over 10 blocks: 3 s more for each of the 90 left
        let b = met.checkpoint(t0, &[], 1).unwrap();
        assert!((b - a - 90.0 * 3.0).abs() < 31.0, "{a} {b}");
        assert_eq!(spread.unseen_excess(), 0.0);
    }

    #[test]
    fn nearest_by_steps_on_a_3d_grid_reaches_every_cell_from_its_nearest_source() {
        let shape = Coord::new(&[3, 4, 5]).unwrap();
        let grid = GridIndexer::new(shape);
        let a = grid.flat(&Coord::new(&[0, 0, 0]).unwrap());
        let b = grid.flat(&Coord::new(&[2, 3, 4]).unwrap());
        let cost = nearest_costs(&shape, &[(a, 1.0), (b, 9.0)]).unwrap();
        for i in 0..grid.len() {
            let p = grid.unflat(i);
            let to_a: i64 = p.as_slice().iter().sum();
            let to_b: i64 = p
                .as_slice()
                .iter()
                .zip([2, 3, 4])
                .map(|(x, y)| (x - y).abs())
                .sum();
            if to_a < to_b {
                assert_eq!(cost[i as usize], 1.0, "{p:?}");
            } else if to_b < to_a {
                assert_eq!(cost[i as usize], 9.0, "{p:?}");
            }
        }
    }

    #[test]
    fn every_cell_takes_its_nearest_measured_cells_cost() {
        let shape = Coord::new(&[1, 7]).unwrap();
        let c = nearest_costs(&shape, &[(0, 1.0), (6, 5.0)]).unwrap();
        assert_eq!(c, vec![1.0, 1.0, 1.0, 1.0, 5.0, 5.0, 5.0]);
        assert!(nearest_costs(&shape, &[]).is_none());
    }

    #[test]
    fn a_costly_middle_measured_by_a_spread_sample_is_seen_before_its_rows_run() {
        // 20 x 20, costly within 6 of (10, 10); a sample at 5 x 4 strata centres
        let shape = Coord::new(&[20, 20]).unwrap();
        let grid = GridIndexer::new(shape);
        let cost = |x: i64, y: i64| {
            if (x - 10).pow(2) + (y - 10).pow(2) <= 36 {
                0.2
            } else {
                0.04
            }
        };
        let mut measured = Vec::new();
        for x in [1, 5, 9, 13, 17] {
            for y in [2, 7, 12, 17] {
                measured.push((grid.flat(&Coord::new(&[x, y]).unwrap()), cost(x, y)));
            }
        }
        let model = nearest_costs(&shape, &measured).unwrap();
        let truth: f64 = (0..400)
            .map(|i| {
                let p = grid.unflat(i);
                cost(p.as_slice()[0], p.as_slice()[1])
            })
            .sum();
        let predicted: f64 = model.iter().sum();
        assert!(
            (predicted - truth).abs() / truth < 0.15,
            "{predicted} {truth}"
        );
    }

    #[test]
    fn the_eta_plays_the_blocks_left_after_those_in_flight() {
        assert!((eta_seconds(&[1.0; 8], &[], 4) - 2.0).abs() < 1e-12);
        // two workers busy for 0.5 s more, two free: 4 blocks of 1 s
        assert!((eta_seconds(&[1.0; 4], &[0.5, 0.5], 4) - 1.5).abs() < 1e-12);
        assert_eq!(eta_seconds(&[], &[], 3), 0.0);
        // more blocks in flight than workers (a worker count that fell)
        assert!((eta_seconds(&[], &[0.2, 0.7, 0.1], 1) - 0.7).abs() < 1e-12);
    }
}
