//! How long the blocks still to run take on the workers a run would give
//! them: [`makespan`], a list-scheduling simulation of the run.
//!
//! It plays the scheduler's part with predicted block times: a block is
//! ready when every block it waits for (its task's conflicting neighbours
//! on earlier levels, the upstream blocks it reads) has finished; each task
//! runs up to its own number of workers; a free worker takes the task's
//! oldest ready block, as the scheduler hands them out. What it leaves out
//! is what the forecast adds around it: the time before the first block
//! (worker start-up) and after the last (teardown), measured on the
//! sample's run.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// One block still to run.
#[derive(Clone, Debug, PartialEq)]
pub struct SimBlock {
    /// Its task (index into the worker counts).
    pub task: usize,
    /// Seconds a worker is busy with it.
    pub seconds: f64,
    /// The blocks (indices into the same list) it waits for.
    pub upstream: Vec<usize>,
}

/// What the simulation found.
#[derive(Clone, Debug, PartialEq)]
pub struct Simulated {
    /// Seconds from the first block's start to the last block's end.
    pub makespan: f64,
    /// When each task's last block ends (0 for a task with none).
    pub task_end: Vec<f64>,
}

/// An f64 ordered for the event heap (finite times only).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Time(f64);
impl Eq for Time {}
impl PartialOrd for Time {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Time {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Simulate `blocks` on `workers[task]` workers per task (at least one
/// each). A block waiting on itself or in a cycle never runs; the
/// dependency graph has none.
pub fn makespan(blocks: &[SimBlock], workers: &[u32]) -> Simulated {
    let tasks = workers.len();
    let mut waiting: Vec<usize> = blocks.iter().map(|b| b.upstream.len()).collect();
    let mut downstream: Vec<Vec<usize>> = vec![Vec::new(); blocks.len()];
    for (i, b) in blocks.iter().enumerate() {
        for &u in &b.upstream {
            if let Some(d) = downstream.get_mut(u) {
                d.push(i);
            }
        }
    }
    let mut ready: Vec<VecDeque<usize>> = vec![VecDeque::new(); tasks];
    for (i, b) in blocks.iter().enumerate() {
        if waiting[i] == 0
            && let Some(q) = ready.get_mut(b.task)
        {
            q.push_back(i);
        }
    }
    let mut free: Vec<u32> = workers.iter().map(|w| (*w).max(1)).collect();
    let mut task_end = vec![0.0f64; tasks];
    let mut events: BinaryHeap<Reverse<(Time, usize)>> = BinaryHeap::new();
    let mut now = 0.0f64;
    loop {
        for t in 0..tasks {
            while free[t] > 0 {
                let Some(i) = ready[t].pop_front() else { break };
                free[t] -= 1;
                events.push(Reverse((Time(now + blocks[i].seconds.max(0.0)), i)));
            }
        }
        let Some(Reverse((Time(at), i))) = events.pop() else {
            break;
        };
        now = at;
        let t = blocks[i].task;
        free[t] += 1;
        task_end[t] = task_end[t].max(now);
        for &d in &downstream[i] {
            waiting[d] -= 1;
            if waiting[d] == 0 {
                ready[blocks[d].task].push_back(d);
            }
        }
    }
    Simulated {
        makespan: now,
        task_end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free_blocks(task: usize, seconds: &[f64]) -> Vec<SimBlock> {
        seconds
            .iter()
            .map(|&s| SimBlock {
                task,
                seconds: s,
                upstream: vec![],
            })
            .collect()
    }

    #[test]
    fn equal_blocks_on_four_workers_take_a_quarter_of_their_sum() {
        let s = makespan(&free_blocks(0, &[0.06; 400]), &[4]);
        assert!((s.makespan - 6.0).abs() < 1e-9, "{s:?}");
    }

    #[test]
    fn a_long_block_handed_out_last_sets_the_end() {
        let mut seconds = vec![1.0; 8];
        seconds.push(5.0);
        let s = makespan(&free_blocks(0, &seconds), &[4]);
        // 8 one-second blocks in 2 s on 4 workers, then the 5 s block
        assert!((s.makespan - 7.0).abs() < 1e-9, "{s:?}");
    }

    #[test]
    fn a_downstream_block_waits_for_its_upstream_and_tasks_keep_their_own_workers() {
        let blocks = vec![
            SimBlock {
                task: 0,
                seconds: 2.0,
                upstream: vec![],
            },
            SimBlock {
                task: 0,
                seconds: 2.0,
                upstream: vec![],
            },
            SimBlock {
                task: 1,
                seconds: 1.0,
                upstream: vec![0],
            },
            SimBlock {
                task: 1,
                seconds: 1.0,
                upstream: vec![1],
            },
        ];
        let one_each = makespan(&blocks, &[1, 1]);
        assert!((one_each.makespan - 5.0).abs() < 1e-9, "{one_each:?}");
        assert_eq!(one_each.task_end, vec![4.0, 5.0]);
        let two_each = makespan(&blocks, &[2, 2]);
        assert!((two_each.makespan - 3.0).abs() < 1e-9, "{two_each:?}");
    }

    #[test]
    fn nothing_to_run_takes_no_time() {
        let s = makespan(&[], &[3]);
        assert_eq!(s.makespan, 0.0);
        assert_eq!(s.task_end, vec![0.0]);
    }
}
