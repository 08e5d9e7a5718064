//! The server's decisions, as pure functions of what the server knows:
//! whether a task needs another worker and whether it fits the resource
//! budget, which idle worker to retire for another task, which blocks are
//! past their deadline, when a task's workers died too often, what a
//! worker's exit means and what a returned block counts as.
//!
//! Policy decides and never acts: it starts, kills and counts nothing. The
//! main loop (`server/mod.rs`) asks it and then acts through supervision
//! (`server/supervision.rs`) and the run's state (`server/state.rs`); a
//! worker's exit reaches policy as an event the main loop hands over, so
//! neither side calls the other back.

use crate::block::{BlockKey, TaskIndex};
use crate::error::DaisyError;
use crate::worker_timeline::WorkerExit;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What policy needs to know of one worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct WorkerFlags {
    /// The task it serves.
    pub task: TaskIndex,
    /// Its process is running.
    pub alive: bool,
    /// Holds a block now.
    pub busy: bool,
    /// In an acquire with nothing to give.
    pub waiting: bool,
    /// Told to leave at its next acquire (resources wanted elsewhere, or
    /// its task was abandoned).
    pub retire: bool,
    /// Was told there are no more blocks (so a clean exit is expected).
    pub dismissed: bool,
    /// Blocks handed to it.
    pub blocks_taken: u64,
    /// A block it held was taken back because it left or lost its
    /// connection in the middle of it: whatever its exit status, no clean
    /// exit.
    pub lost_block: bool,
}

/// Resources held by the live workers: each holds its task's `requires`.
pub(crate) fn resources_in_use<'a>(
    workers: impl Iterator<Item = &'a WorkerFlags>,
    requires: impl Fn(TaskIndex) -> &'a BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    let mut used = BTreeMap::new();
    for w in workers.filter(|w| w.alive) {
        for (k, v) in requires(w.task) {
            *used.entry(k.clone()).or_insert(0) += v;
        }
    }
    used
}

/// Whether one more worker needing `req` fits in `budget` next to `used`.
/// A resource the budget does not name is unlimited.
pub(crate) fn fits(
    budget: &BTreeMap<String, u64>,
    used: &BTreeMap<String, u64>,
    req: &BTreeMap<String, u64>,
) -> bool {
    req.iter().all(|(k, v)| {
        let have = budget.get(k).copied().unwrap_or(u64::MAX);
        used.get(k).copied().unwrap_or(0).saturating_add(*v) <= have
    })
}

/// What a task's workforce needs now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Staffing {
    /// Its idle workers cover its ready blocks, or it has `max_workers`.
    Enough,
    /// Start one more worker.
    Start,
    /// It needs one more but the resource budget is spent: ask an idle
    /// worker of another task to leave.
    NoRoom,
}

/// Whether task `task` needs another worker: more ready blocks than idle
/// workers, fewer than `max_workers` alive, within the budget.
pub(crate) fn staffing<'a>(
    task: TaskIndex,
    ready: u64,
    max_workers: u32,
    workers: impl Iterator<Item = &'a WorkerFlags> + Clone,
    fits_budget: bool,
) -> Staffing {
    let mine = workers.filter(|w| w.alive && w.task == task);
    let alive = mine.clone().count() as u64;
    let idle = mine.filter(|w| !w.busy && !w.retire).count() as u64;
    if ready <= idle || alive >= u64::from(max_workers) {
        Staffing::Enough
    } else if fits_budget {
        Staffing::Start
    } else {
        Staffing::NoRoom
    }
}

/// How many workers task may have alive now: `max_workers`, less the
/// workers that left on their own ([`WorkerExit::Left`]) since the task
/// last had none alive. A worker that leaves normally is not replaced
/// while another of its task serves it (daisy 1.x's rule: the workers
/// that stay serve the task); once none is left, the task starts afresh
/// up to `max_workers` (where 1.2.2 hung). Leaving after some blocks is a
/// worker's choice, so a worker function that leaves after each block is
/// served one pool at a time, never faster than its own pace.
pub(crate) fn worker_cap(max_workers: u32, left: u32, alive: u32) -> u32 {
    if alive == 0 {
        max_workers
    } else {
        max_workers.saturating_sub(left)
    }
}

/// A worker of another task than `needy` that waits for work and may be
/// retired so its resources go to `needy`, when `needy` would otherwise
/// starve: it has no live worker at all. A task that has workers waits
/// for the budget to free instead of taking another task's: retiring a
/// waiting worker whenever a task wanted one more churned workers on a
/// busy node (a recolor task of 4 workers started 8 to 12, each dismissed
/// a moment after it started, while its upstream tasks took turns).
pub(crate) fn retiree<'a>(
    workers: impl Iterator<Item = (u32, &'a WorkerFlags)> + Clone,
    needy: TaskIndex,
) -> Option<u32> {
    if workers.clone().any(|(_, w)| w.alive && w.task == needy) {
        return None;
    }
    workers
        .filter(|(_, w)| w.alive && w.task != needy && w.waiting && !w.retire)
        .map(|(id, _)| id)
        .next()
}

/// How long a worker may wait for a block before it is handed back: the
/// task's own `idle_timeout`, else the run's, else its spawner's default
/// (remote spawners have one: an idle node is a node someone else could
/// use); None: it waits as long as its task has blocks to come.
pub(crate) fn idle_timeout(
    task: Option<Duration>,
    run: Option<Duration>,
    spawner: Option<Duration>,
) -> Option<Duration> {
    task.or(run).or(spawner)
}

/// Blocks whose deadline has passed at `now`.
pub(crate) fn expired(
    deadlines: impl Iterator<Item = (BlockKey, Option<Instant>)>,
    now: Instant,
) -> Vec<BlockKey> {
    deadlines
        .filter(|(_, d)| d.is_some_and(|d| d <= now))
        .map(|(k, _)| k)
        .collect()
}

/// Whether a failure to start a worker process may pass by itself (out of
/// file descriptors, processes or memory for the moment): such a start is
/// retried later and is not the task's fault. Anything else (the program
/// is missing, not executable) will not pass, and abandons the task.
pub(crate) fn spawn_error_is_transient(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::EAGAIN | libc::ENOMEM)
    ) || e.kind() == std::io::ErrorKind::OutOfMemory
}

/// Whether the `restarts`-th unexpected stop of a task's workers is
/// replaced: while it is within `max_worker_restarts`. The one home of the
/// cap: past it, [`restart_limit`] abandons the task.
pub(crate) fn replaced(restarts: u32, max_worker_restarts: u32) -> bool {
    restarts <= max_worker_restarts
}

/// Why a task is abandoned after its workers stopped unexpectedly
/// `restarts` times, and what to change (`(reason, next)`, the
/// `Abandonment` the state makes of them), or None while that is within
/// `max_worker_restarts`. `empty_exits` of those left cleanly without
/// taking a block: when all did, the logs hold nothing (the function
/// returned), so the reason says what happened instead: a worker function
/// that never asked for a block, most often a block function whose `block`
/// parameter was forgotten. `killed` of them were killed by a SIGKILL
/// daisy did not send: when all were, their logs hold nothing either (the
/// kernel's OOM killer sends it), so the reason says so and the change is
/// memory.
pub(crate) fn restart_limit(
    restarts: u32,
    max_worker_restarts: u32,
    empty_exits: u32,
    killed: u32,
) -> Option<(String, String)> {
    (!replaced(restarts, max_worker_restarts)).then(|| {
        let raise = "or raise Task(max_worker_restarts=...)";
        if killed >= restarts {
            (
                format!(
                    "its workers were killed (SIGKILL) {restarts} times \
                     (max_worker_restarts={max_worker_restarts}), most likely by the kernel's \
                     OOM killer, which leaves nothing in their logs"
                ),
                format!(
                    "give its workers more memory (fewer workers per node, or smaller blocks), \
                     {raise}"
                ),
            )
        } else if empty_exits >= restarts {
            let reason = format!(
                "its workers exited {restarts} times without taking a block \
                 (max_worker_restarts={max_worker_restarts}): its process_function takes no \
                 argument, so it runs as a worker function, and it returned without calling \
                 daisy.Client().acquire_block(). A block function takes the block: \
                 `def process(block): ...`; a worker function asks for blocks until there are \
                 none: `client = daisy.Client()` and `while (block := \
                 client.acquire_block()) is not None: ...`"
            );
            (
                reason,
                "give its process_function a block parameter, or make its worker function \
                 ask for blocks (above)"
                    .into(),
            )
        } else {
            (
                format!(
                    "its workers stopped unexpectedly {restarts} times \
                     (max_worker_restarts={max_worker_restarts}); their logs say why"
                ),
                format!("fix what makes its workers stop (their logs say), {raise}"),
            )
        }
    })
}

/// What a worker's exit means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ExitVerdict {
    /// How the worker ended, for its timeline.
    pub exit: WorkerExit,
    /// Why the exit was unexpected (it counts as a restart), or None.
    pub unexpected: Option<String>,
    /// It exited cleanly, unasked, having taken no block while its task had
    /// work (a worker function that returned at once).
    pub took_nothing: bool,
}

/// Classify a worker's exit. `expected` is set when the server killed or
/// retired it on purpose; `status` is its exit status (None: unknown) and
/// `status_text` its description.
///
/// A worker that leaves while its task still has work, without having been
/// told there is none and without having taken a single block (a worker
/// function that returns at once), counts like a crash: otherwise it would
/// be replaced forever. One that did some work and left (to cap its memory,
/// say) made progress: it [`WorkerExit::Left`], no death and no restart,
/// and [`worker_cap`] replaces it only once no worker of its task is left.
pub(crate) fn classify_exit(
    expected: Option<WorkerExit>,
    success: Option<bool>,
    status_text: &str,
    flags: &WorkerFlags,
    task_finished: bool,
) -> ExitVerdict {
    let took_nothing = expected.is_none()
        && success == Some(true)
        && !flags.lost_block
        && !flags.dismissed
        && flags.blocks_taken == 0
        && !task_finished;
    let unexpected = match expected {
        Some(_) => None,
        None if success != Some(true) => Some(format!("died ({status_text})")),
        None if flags.lost_block => {
            Some(format!("exited ({status_text}) in the middle of a block"))
        }
        None if !flags.dismissed && flags.blocks_taken == 0 && !task_finished => {
            Some("exited before the task was finished without taking a block".to_string())
        }
        None => None,
    };
    let exit = match (expected, &unexpected) {
        (Some(kind), _) => kind,
        (None, Some(_)) => WorkerExit::Error,
        // not told there was no more: it left while its task had work
        (None, None) if !flags.dismissed && !task_finished => WorkerExit::Left,
        (None, None) => WorkerExit::Clean,
    };
    ExitVerdict {
        exit,
        unexpected,
        took_nothing,
    }
}

/// What a block a worker sent back counts as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Returned {
    /// Completed.
    Done,
    /// A failed attempt, with the reason.
    Failed(String),
    /// Reported done without the measurements its task requires: a broken
    /// rule. The block is not done (a rerun must measure it) and the run
    /// stops.
    Unmeasured,
}

/// Judge a returned block: `error` is the worker's failure text, if any;
/// `status_failed` whether the block's status says FAILED; `resource_tracking`
/// whether the task has resource tracking; `has_stats` whether the block
/// carries figures.
pub(crate) fn returned(
    error: Option<String>,
    status_failed: bool,
    resource_tracking: bool,
    has_stats: bool,
) -> Returned {
    match error {
        Some(e) => Returned::Failed(e),
        None if status_failed => Returned::Failed("the block function set status FAILED".into()),
        None if resource_tracking && !has_stats => Returned::Unmeasured,
        None => Returned::Done,
    }
}

/// The message that stops a run whose block came back unmeasured.
pub(crate) fn unmeasured_message(spatial_id: u64, task_id: &str) -> String {
    format!(
        "block {spatial_id} of task {task_id:?} came back without measurements, but the task has \
         resource_tracking=True; a hand-written client must measure each block (wrap it in \
         daisy.profile_block(block), or use daisy.Client, which measures automatically)"
    )
}

/// What a distributed run does when a task's check function fails on
/// `block` (its spatial id): an ordinary error in it is the check failing,
/// which is logged, and the block is processed as not done (a wrong
/// "done" would lose it, a needless run only costs time); an interruption
/// ([`DaisyError::Stopped`]: Ctrl-C, `SystemExit`) stops the run. A
/// serial run's user code runs in the caller's own thread and any error
/// of it stops the run (see `serial`).
pub(crate) fn after_check_error(e: DaisyError, block: Option<u64>) -> Result<bool, DaisyError> {
    match e {
        DaisyError::Stopped => Err(e),
        e => {
            match block {
                Some(id) => {
                    tracing::warn!("check_function failed for block {id}: {e}; it is processed")
                }
                None => tracing::warn!("check_function failed: {e}; the block is processed"),
            }
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tasks_idle_timeout_wins_then_the_runs_then_the_spawners() {
        let s = |n| Some(Duration::from_secs(n));
        assert_eq!(idle_timeout(s(1), s(2), s(3)), s(1));
        assert_eq!(idle_timeout(None, s(2), s(3)), s(2));
        assert_eq!(idle_timeout(None, None, s(3)), s(3));
        assert_eq!(idle_timeout(None, None, None), None);
    }

    fn worker(task: TaskIndex) -> WorkerFlags {
        WorkerFlags {
            task,
            alive: true,
            ..WorkerFlags::default()
        }
    }

    fn budget(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn a_resource_the_budget_does_not_name_is_unlimited() {
        let used = budget(&[("cpu", 100)]);
        assert!(fits(&budget(&[]), &used, &budget(&[("cpu", 1)])));
        assert!(fits(&budget(&[("gpu", 2)]), &used, &budget(&[("cpu", 1)])));
    }

    #[test]
    fn fits_counts_what_is_held() {
        let b = budget(&[("gpu", 2)]);
        assert!(fits(&b, &budget(&[("gpu", 1)]), &budget(&[("gpu", 1)])));
        assert!(!fits(&b, &budget(&[("gpu", 2)]), &budget(&[("gpu", 1)])));
        assert!(!fits(&b, &budget(&[]), &budget(&[("gpu", 3)])));
        assert!(
            !fits(&b, &budget(&[("gpu", u64::MAX)]), &budget(&[("gpu", 1)])),
            "no overflow"
        );
    }

    #[test]
    fn only_live_workers_hold_resources() {
        let req = [budget(&[("gpu", 1)]), budget(&[("cpu", 4)])];
        let mut dead = worker(0);
        dead.alive = false;
        let workers = [worker(0), worker(0), worker(1), dead];
        let used = resources_in_use(workers.iter(), |t| &req[t as usize]);
        assert_eq!(used, budget(&[("gpu", 2), ("cpu", 4)]));
    }

    #[test]
    fn staffing_starts_workers_for_ready_blocks_up_to_the_cap() {
        let none: [WorkerFlags; 0] = [];
        assert_eq!(staffing(0, 3, 2, none.iter(), true), Staffing::Start);
        assert_eq!(staffing(0, 0, 2, none.iter(), true), Staffing::Enough);
        let two = [worker(0), worker(0)];
        assert_eq!(
            staffing(0, 5, 2, two.iter(), true),
            Staffing::Enough,
            "at max_workers"
        );
        assert_eq!(
            staffing(0, 2, 4, two.iter(), true),
            Staffing::Enough,
            "two idle workers cover two ready blocks"
        );
        let mut busy = [worker(0), worker(0)];
        busy[0].busy = true;
        assert_eq!(staffing(0, 2, 4, busy.iter(), true), Staffing::Start);
        assert_eq!(staffing(0, 2, 4, busy.iter(), false), Staffing::NoRoom);
        let other = [worker(1), worker(1)];
        assert_eq!(
            staffing(0, 1, 1, other.iter(), true),
            Staffing::Start,
            "another task's workers do not count"
        );
    }

    #[test]
    fn a_retiring_worker_is_not_idle() {
        let mut w = [worker(0)];
        w[0].retire = true;
        assert_eq!(staffing(0, 1, 4, w.iter(), true), Staffing::Start);
    }

    #[test]
    fn the_retiree_waits_for_work_in_another_task() {
        let mut a = worker(0);
        a.waiting = true;
        let mut b = worker(1);
        b.waiting = true;
        let mut c = worker(1);
        c.waiting = true;
        c.retire = true;
        let busy = worker(1);
        let ws = [(1, &busy), (2, &c), (3, &b)];
        assert_eq!(retiree(ws.into_iter(), 0), Some(3));
        assert_eq!(retiree([(0, &a)].into_iter(), 0), None, "not its own task");
        // a task that has a worker waits for the budget: no one is retired
        let ws = [(0, &a), (1, &busy), (2, &c), (3, &b)];
        assert_eq!(retiree(ws.into_iter(), 0), None, "it would not starve");
    }

    #[test]
    fn expired_takes_only_past_deadlines() {
        let now = Instant::now();
        let key = |index| BlockKey { task: 0, index };
        let got = expired(
            [
                (key(0), Some(now - Duration::from_secs(1))),
                (key(1), Some(now + Duration::from_secs(1))),
                (key(2), None),
                (key(3), Some(now)),
            ]
            .into_iter(),
            now,
        );
        assert_eq!(got, vec![key(0), key(3)]);
    }

    #[test]
    fn running_out_of_descriptors_is_transient_a_missing_program_is_not() {
        let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
        assert!(spawn_error_is_transient(&emfile));
        let eagain = std::io::Error::from_raw_os_error(libc::EAGAIN);
        assert!(spawn_error_is_transient(&eagain));
        let missing = std::io::Error::from_raw_os_error(libc::ENOENT);
        assert!(!spawn_error_is_transient(&missing));
    }

    #[test]
    fn a_task_is_abandoned_only_past_its_restart_cap() {
        assert_eq!(restart_limit(10, 10, 0, 0), None);
        let why = restart_limit(11, 10, 0, 0).unwrap().0;
        assert!(why.contains("11 times") && why.contains("max_worker_restarts=10"));
        assert!(restart_limit(1, 0, 0, 0).is_some());
        // workers that only ever returned at once: say what that means
        let empty = restart_limit(4, 3, 4, 0).unwrap().0;
        assert!(empty.contains("without taking a block"), "{empty}");
        assert!(empty.contains("def process(block)"), "{empty}");
        assert!(
            !restart_limit(4, 3, 2, 0)
                .unwrap()
                .0
                .contains("def process(block)")
        );
        // every one killed by a SIGKILL nobody asked for: memory, not logs
        let (reason, next) = restart_limit(4, 3, 0, 4).unwrap();
        assert!(reason.contains("killed (SIGKILL) 4 times"), "{reason}");
        assert!(!reason.contains("see the worker logs"), "{reason}");
        assert!(next.contains("more memory"), "{next}");
        let (mixed, _) = restart_limit(4, 3, 0, 3).unwrap();
        assert!(mixed.contains("stopped unexpectedly 4 times"), "{mixed}");
    }

    #[test]
    fn exits_the_server_caused_are_what_it_expected() {
        let w = worker(0);
        let v = classify_exit(
            Some(WorkerExit::Timeout),
            Some(false),
            "signal 9",
            &w,
            false,
        );
        assert_eq!(v.exit, WorkerExit::Timeout);
        assert_eq!(v.unexpected, None);
    }

    #[test]
    fn a_failing_exit_is_an_error() {
        let w = worker(0);
        let v = classify_exit(None, Some(false), "exit status: 1", &w, true);
        assert_eq!(v.exit, WorkerExit::Error);
        assert!(v.unexpected.unwrap().contains("exit status: 1"));
        let v = classify_exit(None, None, "unknown status", &w, true);
        assert_eq!(v.exit, WorkerExit::Error);
    }

    #[test]
    fn leaving_in_the_middle_of_a_block_is_no_clean_exit() {
        let w = WorkerFlags {
            blocks_taken: 4,
            lost_block: true,
            ..worker(0)
        };
        let v = classify_exit(None, Some(true), "exit status: 0", &w, true);
        assert_eq!(v.exit, WorkerExit::Error);
        assert!(v.unexpected.unwrap().contains("in the middle of a block"));
    }

    #[test]
    fn leaving_early_without_a_block_counts_as_a_crash() {
        let w = worker(0);
        let v = classify_exit(None, Some(true), "exit status: 0", &w, false);
        assert_eq!(v.exit, WorkerExit::Error);
        assert!(v.took_nothing);
        assert!(v.unexpected.unwrap().contains("without taking a block"));
        // a crash is no empty exit
        assert!(!classify_exit(None, Some(false), "signal: 9", &w, false).took_nothing);
        // dismissed, or the task is finished: clean; did some work and
        // left while the task had more: left, on its own (no death)
        let dismissed = WorkerFlags {
            dismissed: true,
            ..w
        };
        let worked = WorkerFlags {
            blocks_taken: 3,
            ..w
        };
        let cases = [
            (&dismissed, false, WorkerExit::Clean),
            (&worked, false, WorkerExit::Left),
            (&worked, true, WorkerExit::Clean),
            (&w, true, WorkerExit::Clean),
        ];
        for (flags, finished, exit) in cases {
            let v = classify_exit(None, Some(true), "exit status: 0", flags, finished);
            assert_eq!(
                v,
                ExitVerdict {
                    exit,
                    unexpected: None,
                    took_nothing: false,
                }
            );
        }
    }

    #[test]
    fn a_worker_that_left_is_replaced_only_once_none_of_its_task_is_left() {
        assert_eq!(worker_cap(2, 0, 1), 2);
        assert_eq!(worker_cap(2, 1, 1), 1, "one left, one serves: no third");
        assert_eq!(worker_cap(2, 5, 1), 0);
        assert_eq!(worker_cap(2, 5, 0), 2, "none left: the task starts afresh");
    }

    #[test]
    fn a_returned_block_is_judged_by_error_status_and_figures() {
        assert_eq!(returned(None, false, false, false), Returned::Done);
        assert_eq!(returned(None, false, true, true), Returned::Done);
        assert_eq!(returned(None, false, true, false), Returned::Unmeasured);
        assert_eq!(
            returned(Some("boom".into()), false, true, false),
            Returned::Failed("boom".into()),
            "a failure needs no figures"
        );
        assert!(
            matches!(returned(None, true, true, false), Returned::Failed(r) if r.contains("FAILED"))
        );
    }

    #[test]
    fn a_failed_check_runs_the_block_and_an_interrupted_one_stops_the_run() {
        let failed = DaisyError::UserCode("ValueError: the store is down".into());
        assert_eq!(
            after_check_error(failed, Some(3)),
            Ok(false),
            "processed, not skipped"
        );
        assert_eq!(
            after_check_error(DaisyError::Stopped, None),
            Err(DaisyError::Stopped)
        );
    }
}
