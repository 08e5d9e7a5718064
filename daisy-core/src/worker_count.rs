//! `max_workers="auto"`: how many workers a task's run starts when the user
//! let the run choose, from the machine's cores and the run's memory budget.
//!
//! The count is a ceiling; what runs at once below it is the memory gate's
//! to decide block by block (`server::memory_gate`), so a count too high
//! for the budget costs nothing but a few idle interpreters.
//!
//! [`PER_CORE`] is 3: blocks in this field overlap computing with waiting
//! (reading chunks from a shared filesystem, a network store, a sleep in
//! a rate-limited service), so one worker per core leaves cores idle.
//! Measured on the memory benchmark (`benchmarks/memory_fit.py`: 120
//! blocks touching 150 MiB and waiting 0.3 s, 2 cores, a 3 GiB cgroup),
//! 2 workers took 26.5 s, 3 19.8 s, 4 15.2 s, 6 12.9 s and 8 13.2 s: the
//! gain stops near 3 per core. Where blocks only compute, the panel's
//! "waiting for a core" verdict says so with the figure, and the advice is
//! a fixed count.
//!
//! [`WORKER_FLOOR`] is 256 MiB: a Python worker with numpy imported holds
//! about 60 MiB before its first block; a budget that does not hold a
//! quarter GiB per worker makes a worker per core a waste of memory.

use crate::memory_budget::{MemoryBudget, mib};

/// Workers per core.
pub const PER_CORE: u32 = 3;

/// The least memory budget per worker the automatic count allows.
pub const WORKER_FLOOR: u64 = 256 << 20;

/// The count a task's `max_workers="auto"` resolved to, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AutoWorkers {
    /// Workers at most.
    pub count: u32,
    /// The reason, in words, for the run's log and its report.
    pub reason: String,
}

/// The cores this process may run on (its CPU affinity and cgroup quota,
/// as `std::thread::available_parallelism` reads them); 1 where unknown.
pub fn cores() -> u32 {
    std::thread::available_parallelism()
        .map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX))
        .unwrap_or(1)
}

/// The automatic count of local workers on `cores` cores under `budget`.
pub fn auto_workers(cores: u32, budget: &MemoryBudget) -> AutoWorkers {
    let by_cores = cores.max(1).saturating_mul(PER_CORE);
    let by_memory = u32::try_from(budget.bytes / WORKER_FLOOR)
        .unwrap_or(u32::MAX)
        .max(1);
    let count = by_cores.min(by_memory);
    let plural = if cores == 1 { "" } else { "s" };
    let limit = if by_memory < by_cores {
        format!(
            "the {} budget from {} holds {by_memory} at {} each (the cores would take {by_cores})",
            mib(budget.bytes),
            budget.source,
            mib(WORKER_FLOOR)
        )
    } else {
        format!(
            "{PER_CORE} per core on {cores} core{plural}; the {} budget from {} holds {by_memory} \
             at {} each",
            mib(budget.bytes),
            budget.source,
            mib(WORKER_FLOOR)
        )
    };
    AutoWorkers {
        count,
        reason: format!(
            "max_workers=\"auto\" chose {count} worker{}: {limit}; the memory gate lets each \
             block in by its measured memory",
            if count == 1 { "" } else { "s" }
        ),
    }
}

/// The automatic count of a task whose workers run elsewhere (a batch
/// job's node): one job's workers (`workers_per_job`), whose cores and
/// memory the job's own request decides.
pub fn auto_workers_per_job(workers_per_job: u32) -> AutoWorkers {
    let count = workers_per_job.max(1);
    AutoWorkers {
        count,
        reason: format!(
            "max_workers=\"auto\" chose {count} worker{}: one job's workers_per_job (the job's \
             request sizes its node)",
            if count == 1 { "" } else { "s" }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory_budget::BudgetSource;

    fn budget(gib: u64) -> MemoryBudget {
        MemoryBudget {
            bytes: gib << 30,
            source: BudgetSource::Declared,
        }
    }

    #[test]
    fn cores_decide_when_the_budget_is_roomy() {
        let chosen = auto_workers(2, &budget(3));
        assert_eq!(chosen.count, 6);
        assert!(
            chosen.reason.contains("3 per core on 2 cores"),
            "{}",
            chosen.reason
        );
        assert!(chosen.reason.contains("memory_budget"), "{}", chosen.reason);
    }

    #[test]
    fn the_budget_decides_when_it_is_tight() {
        let chosen = auto_workers(64, &budget(4));
        assert_eq!(chosen.count, 16);
        assert!(chosen.reason.contains("holds 16"), "{}", chosen.reason);
        assert!(
            chosen.reason.contains("the cores would take 192"),
            "{}",
            chosen.reason
        );
    }

    #[test]
    fn never_fewer_than_one() {
        let tiny = MemoryBudget {
            bytes: 128 << 20,
            source: BudgetSource::Declared,
        };
        assert_eq!(auto_workers(0, &tiny).count, 1);
        assert_eq!(auto_workers_per_job(0).count, 1);
        assert_eq!(auto_workers_per_job(4).count, 4);
    }
}
