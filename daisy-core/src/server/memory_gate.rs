//! Blocks let in by measured memory, and the guard that acts before the
//! kernel's OOM killer does. (Not `admission`: that one lets connections
//! in.)
//!
//! Blocks in this field vary in memory by an order of magnitude across a
//! volume; a worker count picked by hand is either too careful (idle
//! cores) or too bold (the kernel kills workers, and their blocks count as
//! failures). The gate and the guard make the count safe instead:
//!
//! * **The budget** is the run's [`MemoryBudget`] (the cgroup's limit, a
//!   SLURM job's allocation, the machine's available memory, or declared);
//!   what is in use is read by the guard's thread (the cgroup's working
//!   set, else the processes' resident memory) every [`GUARD_EVERY`].
//! * **The gate**: a block is handed out only when what is in use now,
//!   plus what the running blocks are still expected to add, plus what
//!   this block is expected to add, stays under [`ADMIT_AT`] of the
//!   budget. A block's expected addition is its task's measured
//!   [`TYPICAL_QUANTILE`] (a block's peak resident memory above its
//!   worker's resident memory when the block began), or, for a block the
//!   guard held back, twice what it held when it was stopped. A block's
//!   addition is measured by the guard itself (the most its worker's
//!   resident memory rose above the first look while the block ran), so
//!   it needs no `resource_tracking`; a block too short to be seen (under
//!   a look) adds nothing worth counting. Until a task has a measured
//!   block, each of its blocks is expected to add
//!   1/[`UNKNOWN_SHARE`] of the budget: blocks of unknown size start
//!   cautiously, a few at a time. With nothing running every block is let
//!   in: a block runs alone if it must.
//! * **The guard**: a thread that reads the memory in use every
//!   [`GUARD_EVERY`] while blocks run, and when it reaches [`STOP_AT`] of
//!   the budget stops (SIGKILL to its process group) the busy worker whose
//!   memory grew fastest since the last look, the newest block's on a tie.
//!   Its block is held back: not a failed attempt, not counted against
//!   `max_retries` nor `max_worker_restarts`, handed out again when it
//!   fits. A block stopped while it ran alone cannot fit: it fails, once,
//!   with its figure and the budget's. After a stop the guard waits
//!   [`STOP_SETTLE`] (or until the stopped process is gone) before it
//!   judges again, so one overshoot costs one worker.
//!
//! [`GUARD_EVERY`] is 10 ms: measured here, a block touches fresh memory
//! at 0.3 to 3 GiB/s, so the last 8 % of a 3 GiB budget (250 MiB) lasts
//! 80 ms at the fastest; a read of the cgroup's two files costs about
//! 30 µs, 0.3 % of a core. [`ADMIT_AT`] leaves room for the driver and
//! the blocks' growth between looks; [`STOP_AT`] is below the kernel's
//! reclaim, which slows every block long before it kills.

use super::memory_watch::resident_bytes;
use crate::block::{BlockKey, PerTask, TaskIndex};
use crate::memory_budget::{BudgetSource, MemoryBudget, MemoryCgroup, machine_memory, mib};
use crate::run_report::MemoryReport;
use crate::run_stats::LogHistogram;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The share of the budget the gate fills with expected peaks.
pub(super) const ADMIT_AT: f64 = 0.85;

/// The share of the budget at which the guard stops a worker.
pub(super) const STOP_AT: f64 = 0.92;

/// How often the guard reads the memory in use while blocks run.
pub(super) const GUARD_EVERY: Duration = Duration::from_millis(10);

/// How often it reads it while no block runs.
const IDLE_EVERY: Duration = Duration::from_millis(100);

/// How soon a worker the gate kept waiting looks again, though nothing
/// returned: a few of the guard's looks.
pub(super) const GATE_RECHECK: Duration = Duration::from_millis(50);

/// The longest the guard waits after a stop for the memory to fall.
pub(super) const STOP_SETTLE: Duration = Duration::from_secs(1);

/// The quantile of a task's measured additions a block is expected to add.
pub(super) const TYPICAL_QUANTILE: f64 = 0.75;

/// A block of a task with no measured block yet is expected to add this
/// fraction of the budget (1/4: three at once, beside what is in use).
pub(super) const UNKNOWN_SHARE: u64 = 4;

/// Buckets per doubling of the additions' histogram: an estimate is at
/// most 19 % above the figure it stands for.
const PER_OCTAVE: u32 = 4;

/// How the memory in use is read.
#[derive(Debug)]
enum Usage {
    /// The cgroup's working set.
    Cgroup(MemoryCgroup),
    /// The driver's and its busy workers' resident memory.
    Processes,
    /// What the machine's available memory fell by since the run began.
    Machine { available_at_start: u64 },
}

impl Usage {
    fn for_budget(budget: &MemoryBudget) -> Self {
        match &budget.source {
            BudgetSource::Cgroup(_) => match MemoryCgroup::of_this_process() {
                Some(cg) => Self::Cgroup(cg),
                None => Self::Processes,
            },
            BudgetSource::MachineAvailable => Self::Machine {
                available_at_start: budget.bytes,
            },
            _ => Self::Processes,
        }
    }

    fn read(&self, view: &View) -> Option<u64> {
        match self {
            Self::Cgroup(cg) => cg.working_set(),
            Self::Processes => {
                let own = resident_bytes(std::process::id()).unwrap_or(0);
                Some(own + view.busy.values().map(|b| b.last_rss).sum::<u64>())
            }
            Self::Machine { available_at_start } => {
                let now = machine_memory("MemAvailable:")?;
                Some(available_at_start.saturating_sub(now))
            }
        }
    }
}

/// A busy local worker, as the guard watches it.
#[derive(Clone, Debug)]
struct Busy {
    pid: u32,
    key: BlockKey,
    since: Instant,
    /// Its resident memory at the first look after its block began.
    first_rss: Option<u64>,
    /// At the last look, and the one before.
    last_rss: u64,
    prev_rss: u64,
    /// The most at any look while the block ran.
    max_rss: u64,
}

impl Busy {
    fn grown(&self) -> u64 {
        self.first_rss
            .map_or(0, |first| self.last_rss.saturating_sub(first))
    }
}

/// A worker the guard stopped, until the run has accounted for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Stopped {
    /// The block it ran, held back.
    pub(super) key: BlockKey,
    /// What the block had added when it was stopped.
    pub(super) grown: u64,
    /// It was the only block running: it cannot fit.
    pub(super) alone: bool,
    /// The memory in use when it was stopped.
    pub(super) in_use: u64,
}

/// What the server's thread and the guard's share.
#[derive(Debug, Default)]
struct View {
    busy: HashMap<u32, Busy>,
    stopped: HashMap<u32, Stopped>,
}

#[derive(Debug, Default)]
struct Shared {
    view: Mutex<View>,
    in_use: AtomicU64,
    quit: AtomicBool,
}

impl Shared {
    fn view(&self) -> MutexGuard<'_, View> {
        // a panic on the guard's thread leaves the view as it was: go on
        self.view.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The gate and its guard (see the module's doc).
#[derive(Debug)]
pub(super) struct MemoryGate {
    budget: MemoryBudget,
    shared: Arc<Shared>,
    guard: Option<std::thread::JoinHandle<()>>,
    /// Per task: its blocks' measured additions.
    tasks: PerTask<LogHistogram>,
    /// The expected addition counted for each block out.
    out: HashMap<BlockKey, u64>,
    committed: u64,
    /// Held-back blocks' expected additions.
    held: HashMap<BlockKey, u64>,
    /// Workers the guard stopped whose stop was accounted for.
    accounted: std::collections::HashSet<u32>,
}

impl MemoryGate {
    /// A gate for `tasks` tasks within `budget`, its guard started where
    /// `guard` is on.
    pub(super) fn new(budget: MemoryBudget, tasks: usize, guard: bool) -> Self {
        let shared = Arc::new(Shared::default());
        let usage = Usage::for_budget(&budget);
        let limit = (budget.bytes as f64 * STOP_AT) as u64;
        let thread = guard.then(|| {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("daisy-memory-guard".into())
                .spawn(move || watch(&shared, &usage, limit))
                .ok()
        });
        Self {
            budget,
            shared,
            guard: thread.flatten(),
            tasks: (0..tasks).map(|_| LogHistogram::new(PER_OCTAVE)).collect(),
            out: HashMap::new(),
            committed: 0,
            held: HashMap::new(),
            accounted: Default::default(),
        }
    }

    /// What a task's report says of the budget and the guard, with the
    /// blocks the task held back (the scheduler counts them:
    /// `TaskState::held_back_count`).
    pub(super) fn report(&self, held_back: u64) -> MemoryReport {
        MemoryReport {
            budget_bytes: self.budget.bytes,
            budget_source: self.budget.source.to_string(),
            held_back,
        }
    }

    /// What block `key` of `task` is expected to add (see the module's
    /// doc).
    fn expected(&self, task: TaskIndex, key: Option<BlockKey>) -> u64 {
        if let Some(need) = key.and_then(|k| self.held.get(&k)) {
            return *need;
        }
        self.tasks[task]
            .quantile(TYPICAL_QUANTILE)
            .unwrap_or(self.budget.bytes / UNKNOWN_SHARE)
    }

    /// Whether a block of `task` (`held`: the held-back block `key`) may
    /// go out now.
    pub(super) fn admits(&self, task: TaskIndex, held: Option<BlockKey>) -> bool {
        if self.out.is_empty() {
            return true; // alone if it must
        }
        let need = self.expected(task, held);
        let in_use = self.shared.in_use.load(Ordering::Relaxed);
        let limit = (self.budget.bytes as f64 * ADMIT_AT) as u64;
        if in_use + self.committed + need <= limit {
            return true;
        }
        // what the running blocks added already is in `in_use`
        let view = self.shared.view();
        let credit: u64 = view
            .busy
            .values()
            .map(|b| {
                let counted = self.out.get(&b.key).copied().unwrap_or(0);
                b.grown().min(counted)
            })
            .sum();
        in_use + self.committed.saturating_sub(credit) + need <= limit
    }

    /// Whether block `key` is one the guard held back.
    #[cfg(test)]
    pub(super) fn is_held(&self, key: BlockKey) -> bool {
        self.held.contains_key(&key)
    }

    /// Block `key` went out to `worker` (its local process `pid`, if any).
    pub(super) fn handed_out(&mut self, key: BlockKey, worker: Option<u32>, pid: Option<u32>) {
        let need = self.expected(key.task, Some(key));
        self.committed += need;
        self.out.insert(key, need);
        if let (Some(worker), Some(pid)) = (worker, pid) {
            self.shared.view().busy.insert(
                worker,
                Busy {
                    pid,
                    key,
                    since: Instant::now(),
                    first_rss: None,
                    last_rss: 0,
                    prev_rss: 0,
                    max_rss: 0,
                },
            );
        }
    }

    /// Block `key` came back from `worker` (done, failed or lost): what
    /// its worker's memory rose by while it ran is its task's measure.
    pub(super) fn returned(&mut self, key: BlockKey, worker: Option<u32>) {
        if let Some(need) = self.out.remove(&key) {
            self.committed = self.committed.saturating_sub(need);
        }
        let busy = worker.and_then(|w| {
            let mut view = self.shared.view();
            match view.busy.get(&w) {
                Some(b) if b.key == key => view.busy.remove(&w),
                _ => None,
            }
        });
        if let Some(b) = busy {
            // never looked at: shorter than a look, nothing worth counting
            let added = b
                .first_rss
                .map_or(0, |first| b.max_rss.saturating_sub(first));
            self.tasks[key.task].push(added);
            self.held.remove(&key);
        }
    }

    /// Whether the guard stopped `worker` (its exit is then expected),
    /// without taking it off the list.
    #[cfg(test)]
    pub(super) fn stopped(&self, worker: u32) -> Option<Stopped> {
        self.shared.view().stopped.get(&worker).copied()
    }

    /// Account for the guard's stop of `worker`, once: its block is held
    /// back with twice what it held (the block had not finished growing),
    /// or, where it ran alone, returned to fail. None where the guard did
    /// not stop it.
    pub(super) fn take_stopped(&mut self, worker: u32) -> Option<Stopped> {
        let stopped = self.shared.view().stopped.remove(&worker)?;
        self.accounted.insert(worker);
        if !stopped.alone {
            let before = self.held.get(&stopped.key).copied().unwrap_or(0);
            let need = stopped
                .grown
                .saturating_mul(2)
                .max(before.saturating_mul(2));
            self.held.insert(stopped.key, need.max(1 << 20));
        }
        Some(stopped)
    }

    /// Whether the guard stopped `worker`, accounted for or not yet.
    pub(super) fn stopped_by_guard(&self, worker: u32) -> bool {
        self.accounted.contains(&worker) || self.shared.view().stopped.contains_key(&worker)
    }

    /// Why a block that ran alone was stopped, for its failure.
    pub(super) fn too_big(&self, stopped: &Stopped) -> String {
        format!(
            "the block alone reached {} of the {} memory budget ({}, {} added by the block); \
             the memory guard stopped it before the kernel's OOM killer would: give the task \
             smaller blocks, or run where more memory is allowed (a larger --mem, or \
             memory_budget=)",
            mib(stopped.in_use),
            mib(self.budget.bytes),
            self.budget.source,
            mib(stopped.grown)
        )
    }
}

impl Drop for MemoryGate {
    fn drop(&mut self) {
        self.shared.quit.store(true, Ordering::Relaxed);
        if let Some(thread) = self.guard.take() {
            let _ = thread.join();
        }
    }
}

/// The guard's loop: look at the memory in use, and stop a worker at
/// `limit` (see the module's doc).
fn watch(shared: &Shared, usage: &Usage, limit: u64) {
    let mut settle: Option<(u32, Instant)> = None;
    while !shared.quit.load(Ordering::Relaxed) {
        let busy = {
            let mut view = shared.view();
            for b in view.busy.values_mut() {
                let rss = resident_bytes(b.pid).unwrap_or(b.last_rss);
                b.prev_rss = if b.first_rss.is_some() {
                    b.last_rss
                } else {
                    rss
                };
                b.first_rss.get_or_insert(rss);
                b.last_rss = rss;
                b.max_rss = b.max_rss.max(rss);
            }
            let in_use = usage.read(&view);
            if let Some(in_use) = in_use {
                shared.in_use.store(in_use, Ordering::Relaxed);
            }
            if let Some((pid, at)) = settle {
                let gone = !std::path::Path::new(&format!("/proc/{pid}")).exists();
                if gone || at.elapsed() >= STOP_SETTLE {
                    settle = None;
                }
            }
            if settle.is_none()
                && let Some(in_use) = in_use.filter(|&u| u >= limit)
                && let Some((worker, b)) = victim(&view.busy)
            {
                let alone = view.busy.len() == 1;
                let (key, grown, pid) = (b.key, b.grown(), b.pid);
                view.busy.remove(&worker);
                view.stopped.insert(
                    worker,
                    Stopped {
                        key,
                        grown,
                        alone,
                        in_use,
                    },
                );
                // recorded before the kill, so that whichever of its exit
                // and its connection's end the server sees first knows
                // SAFETY: kill(2) with a negative pid signals the process
                // group the worker leads; no memory-safety preconditions.
                unsafe {
                    libc::kill(-(pid as i32), libc::SIGKILL);
                }
                settle = Some((pid, Instant::now()));
            }
            !view.busy.is_empty()
        };
        std::thread::sleep(if busy { GUARD_EVERY } else { IDLE_EVERY });
    }
}

/// The worker to stop: the one whose memory grew most since the last look,
/// the newest block's on a tie.
fn victim(busy: &HashMap<u32, Busy>) -> Option<(u32, Busy)> {
    busy.iter()
        .max_by_key(|(_, b)| (b.last_rss.saturating_sub(b.prev_rss), b.since))
        .map(|(w, b)| (*w, b.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(budget: u64) -> MemoryGate {
        let budget = MemoryBudget {
            bytes: budget,
            source: BudgetSource::Declared,
        };
        MemoryGate::new(budget, 1, false)
    }

    fn key(index: u64) -> BlockKey {
        BlockKey { task: 0, index }
    }

    #[test]
    fn a_tasks_typical_addition_is_its_upper_quartile_within_a_bucket() {
        let mut a = LogHistogram::new(PER_OCTAVE);
        assert_eq!(a.quantile(0.75), None);
        for _ in 0..18 {
            a.push(150 << 20);
        }
        for _ in 0..2 {
            a.push(1200 << 20);
        }
        let q = a.quantile(TYPICAL_QUANTILE).unwrap();
        assert!((150 << 20..=180 << 20).contains(&q), "{q}");
        assert!(a.quantile(1.0).unwrap() >= 1200 << 20);
    }

    #[test]
    fn blocks_of_unknown_size_go_out_a_few_at_a_time_until_one_is_measured() {
        let mut g = gate(3 << 30);
        let mut out = 0;
        while g.admits(0, None) && out < 10 {
            g.handed_out(key(out), Some(out as u32), None);
            out += 1;
        }
        assert_eq!(out, 3, "a quarter of the budget each, under 85 %");
        // one measured by the guard's looks: 100 MiB at the first, 250 at most
        g.handed_out(key(20), Some(20), Some(std::process::id()));
        {
            let mut view = g.shared.view();
            let b = view.busy.get_mut(&20).unwrap();
            b.first_rss = Some(100 << 20);
            b.max_rss = 250 << 20;
        }
        g.returned(key(20), Some(20));
        assert_eq!(g.tasks[0].count(), 1);
        let typical = g.expected(0, None);
        assert!((150 << 20..=180 << 20).contains(&typical), "{typical}");
        for k in 0..3 {
            g.returned(key(k), Some(k as u32));
        }
        let mut out = 0;
        while g.admits(0, None) && out < 30 {
            g.handed_out(key(100 + out), Some(100 + out as u32), None);
            out += 1;
        }
        assert!(out >= 14, "150 MiB each in 2.6 GiB: {out}");
    }

    #[test]
    fn blocks_go_out_while_their_expected_peaks_fit_the_budget() {
        let mut g = gate(1 << 30);
        g.tasks[0].push(300 << 20); // each block adds about 300 MiB
        let mut out = 0;
        while g.admits(0, None) && out < 10 {
            g.handed_out(key(out), Some(out as u32), None);
            out += 1;
        }
        // 0.85 GiB holds two of them, and a third alone would not fit
        assert_eq!(out, 2);
        g.returned(key(0), Some(0));
        assert!(g.admits(0, None));
    }

    #[test]
    fn a_stopped_block_is_held_back_with_twice_what_it_held_and_waits_to_fit() {
        let mut g = gate(3 << 30);
        g.tasks[0].push(150 << 20);
        g.handed_out(key(7), Some(3), None);
        g.handed_out(key(8), Some(4), None);
        let stop = Stopped {
            key: key(8),
            grown: 700 << 20,
            alone: false,
            in_use: 2900 << 20,
        };
        g.shared.view().stopped.insert(4, stop);
        assert_eq!(g.stopped(4), Some(stop));
        g.returned(key(8), Some(4));
        assert_eq!(g.take_stopped(4), Some(stop));
        assert_eq!(g.take_stopped(4), None, "accounted once");
        assert!(g.is_held(key(8)));
        // 1.4 GiB expected: not beside 2.4 GiB in use
        g.shared.in_use.store(2000 << 20, Ordering::Relaxed);
        assert!(!g.admits(0, Some(key(8))));
        assert!(g.admits(0, None), "a typical block still fits");
        g.returned(key(7), Some(3));
        assert!(g.admits(0, Some(key(8))), "nothing running: alone");
        let alone = Stopped {
            alone: true,
            ..stop
        };
        g.shared.view().stopped.insert(5, alone);
        assert_eq!(g.take_stopped(5), Some(alone));
        assert!(g.too_big(&alone).contains("memory_budget"));
    }

    #[test]
    fn the_guard_stops_the_fastest_growing_worker_and_records_it_first() {
        let now = Instant::now();
        let busy = |rss: u64, prev: u64, ms: u64| Busy {
            pid: 1,
            key: key(rss),
            since: now + Duration::from_millis(ms),
            first_rss: Some(prev),
            last_rss: rss,
            prev_rss: prev,
            max_rss: rss,
        };
        let mut map = HashMap::new();
        map.insert(1, busy(500, 490, 0));
        map.insert(2, busy(400, 100, 5));
        map.insert(3, busy(300, 300, 9));
        assert_eq!(victim(&map).unwrap().0, 2, "grew most");
        map.remove(&2);
        map.insert(4, busy(300, 290, 20));
        assert_eq!(victim(&map).unwrap().0, 4, "a tie: the newest");
    }
}
