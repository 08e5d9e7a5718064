//! What the server can know of a worker the kernel killed for memory:
//! whether the OOM killer did it, and what the block it died on held
//! (this process's memory cgroup is found by `crate::memory_budget`).
//!
//! A SIGKILL daisy did not send is most often the OOM killer's, and the
//! worker's log says nothing then. The kernel counts its kills per cgroup
//! (v2 `memory.events`, v1 `memory.oom_control`: `oom_kill N`), and local
//! workers are in the driver's cgroup: a count that grew since the last
//! kill the server looked at makes the cause certain, one that did not
//! rules the OOM killer out. The memory of the dying block is sampled
//! while it runs (resident memory from `/proc/<pid>/statm`): a worker
//! killed mid-block never reports its figures.
//!
//! [`SAMPLE_EVERY`] is 1 s: a block that runs out of memory takes seconds
//! to fill it, and one read of a small `/proc` file per busy local worker
//! per second (about 10 µs each) is nothing beside the main loop's work;
//! [`MAX_SAMPLED`] bounds a pass on a node with thousands of workers.

use crate::block::BlockKey;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// The least time between two samples of the busy workers' memory.
pub(super) const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// The most workers sampled in one pass.
pub(super) const MAX_SAMPLED: usize = 512;

/// What the server knows of a worker killed by a SIGKILL it did not send.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct KillFacts {
    /// Some(true): the cgroup counts an OOM kill since the last one looked
    /// at; Some(false): it counts none; None: the count cannot be read.
    pub oom: Option<bool>,
    /// The most resident memory sampled while it ran the block it died
    /// on, in bytes.
    pub held: Option<u64>,
}

/// The OOM-kill count last looked at and the busy workers' samples.
#[derive(Debug, Default)]
pub(super) struct MemoryWatch {
    oom_kills: Option<u64>,
    /// Per worker: the block it runs and the most memory sampled in it.
    held: HashMap<u32, (BlockKey, u64)>,
    sampled_at: Option<Instant>,
}

impl MemoryWatch {
    /// A watch from now: the kills counted so far are not this run's.
    pub(super) fn new() -> Self {
        Self {
            oom_kills: oom_kill_count(),
            ..Self::default()
        }
    }

    /// Sample the memory of `busy` (worker id, local pid, the block it
    /// runs), unless the last pass was under [`SAMPLE_EVERY`] ago.
    pub(super) fn sample(
        &mut self,
        now: Instant,
        busy: impl Iterator<Item = (u32, u32, BlockKey)>,
    ) {
        if self
            .sampled_at
            .is_some_and(|at| now.duration_since(at) < SAMPLE_EVERY)
        {
            return;
        }
        self.sampled_at = Some(now);
        let mut seen = HashSet::new();
        for (worker, pid, key) in busy.take(MAX_SAMPLED) {
            seen.insert(worker);
            let Some(bytes) = resident_bytes(pid) else {
                continue;
            };
            let entry = self.held.entry(worker).or_insert((key, 0));
            if entry.0 != key {
                *entry = (key, 0); // a new block: its own figure
            }
            entry.1 = entry.1.max(bytes);
        }
        if seen.len() < MAX_SAMPLED {
            self.held.retain(|w, _| seen.contains(w));
        }
    }

    /// Worker `worker` was killed by a SIGKILL nobody asked for, holding
    /// block `key` (None: its block was taken back already, its connection
    /// having closed first; the last block sampled is then the one): what
    /// is known. Takes the kill off the count, so a second death is judged
    /// by its own.
    pub(super) fn killed(&mut self, worker: u32, key: Option<BlockKey>) -> KillFacts {
        let held = self
            .held
            .remove(&worker)
            .filter(|(k, _)| key.is_none_or(|key| *k == key))
            .map(|(_, bytes)| bytes)
            .filter(|&b| b > 0);
        let now = oom_kill_count();
        let oom = match (self.oom_kills, now) {
            (Some(before), Some(now)) if now > before => {
                self.oom_kills = Some(before + 1);
                Some(true)
            }
            (Some(_), Some(_)) => Some(false),
            _ => None,
        };
        KillFacts { oom, held }
    }
}

/// How many processes of this process's cgroup the kernel's OOM killer
/// has killed; None where the cgroup does not say.
pub(super) fn oom_kill_count() -> Option<u64> {
    crate::memory_budget::MemoryCgroup::of_this_process()?.oom_kills()
}

/// The resident memory of process `pid` in bytes (`/proc/<pid>/statm`).
pub(crate) fn resident_bytes(pid: u32) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the system
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_judged_by_what_was_sampled_while_it_ran() {
        let me = std::process::id();
        let key = |index| BlockKey { task: 0, index };
        let mut watch = MemoryWatch::default();
        let t0 = Instant::now();
        watch.sample(t0, [(3, me, key(1))].into_iter());
        assert!(watch.held[&3].1 > 0, "this process's own memory");
        // too soon: not sampled again
        watch.held.get_mut(&3).unwrap().1 = 5;
        watch.sample(
            t0 + Duration::from_millis(10),
            [(3, me, key(1))].into_iter(),
        );
        assert_eq!(watch.held[&3].1, 5);
        // the worker moved on to another block: the old figure is not its
        watch.sample(t0 + SAMPLE_EVERY, [(3, me, key(2))].into_iter());
        assert_ne!(watch.held[&3], (key(1), 5));
        let facts = watch.killed(3, Some(key(2)));
        assert!(facts.held.is_some_and(|b| b > 5));
        // none twice, and nothing for another block
        assert_eq!(watch.killed(3, Some(key(2))).held, None);
        watch.sample(t0 + 2 * SAMPLE_EVERY, [(4, me, key(5))].into_iter());
        assert_eq!(watch.killed(4, Some(key(6))).held, None);
    }

    #[test]
    fn a_kill_the_cgroup_counts_is_the_oom_killers_once() {
        let mut watch = MemoryWatch {
            oom_kills: oom_kill_count().map(|n| n.saturating_sub(1)),
            ..MemoryWatch::default()
        };
        match oom_kill_count() {
            Some(n) if n > 0 => {
                assert_eq!(watch.killed(1, None).oom, Some(true));
                assert_eq!(
                    watch.killed(2, None).oom,
                    Some(false),
                    "one kill, one death"
                );
            }
            Some(_) => assert_eq!(watch.killed(1, None).oom, Some(false)),
            None => assert_eq!(watch.killed(1, None).oom, None),
        }
    }
}
