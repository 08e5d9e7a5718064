//! Serial runs: every block in the calling thread, in dependency order.
//! [`run_serial`] owns the loop and the run's accounting; the caller
//! supplies the skip check, the block function and the post-check through
//! [`SerialHooks`] (in daisy, calls into Python).
//!
//! Tasks are visited in pipeline order and each is drained of ready blocks
//! before the next is visited; the sweep repeats until no task has a ready
//! block. A block of a task with resource tracking is measured around the
//! block function by the same [`BlockProfiler`] the workers use, and its
//! figures settle by the same first-measurement-wins rule. The run is
//! accounted by the same [`RunLedger`] as the server's, so its outcome, its
//! report and its `runs.jsonl` line follow the same rules.
//!
//! The first error returned by a hook stops the run: the block it was on
//! counts as a failed attempt, and the outcome comes back with `stopped`
//! set (the hook keeps its own error, so a Python exception reaches the
//! user with its own type and traceback).

use crate::block::{Block, BlockStatus, TaskIndex};
use crate::block_profile::BlockProfiler;
use crate::clock::wall_clock;
use crate::error::DaisyError;
use crate::gpu_profile::GpuProfiler;
use crate::run_report::{RunLedger, RunOutcome};
use crate::scheduler::Scheduler;
use crate::worker_timeline::WorkerSummary;

/// Calls from the serial runner into the embedding program. An error stops
/// the run.
pub trait SerialHooks {
    /// Whether a ready block is already done and can be skipped (the
    /// task's check function).
    fn already_done(&mut self, block: &Block) -> Result<bool, DaisyError>;
    /// Run the block's function; returns the status the function left. A
    /// measurement taken inside (`profile_block`) is attached to
    /// `block.stats`.
    fn process(&mut self, block: &mut Block) -> Result<BlockStatus, DaisyError>;
    /// After a block function that succeeded: whether the block's output
    /// checks out (the task's check function); false fails the block.
    fn post_check(&mut self, block: &Block) -> Result<bool, DaisyError>;
}

/// Run every block of `scheduler` through `hooks` until no block is ready
/// anywhere (every block completed, failed or orphaned), or a hook stops
/// the run. `measure[t]` says whether task `t` measures its blocks
/// (resource tracking) and whether with GPU figures. The outcome's reports
/// are appended to the tracking stores' `runs.jsonl`.
pub fn run_serial(
    scheduler: &mut Scheduler,
    measure: &[Measure],
    hooks: &mut impl SerialHooks,
) -> RunOutcome {
    let n = scheduler.pipeline().len();
    let mut ledger = RunLedger::planned(scheduler);
    scheduler.begin_run();
    let stopped = sweep(scheduler, measure, hooks, &mut ledger)
        .err()
        // a mark the disk had no room for ends the run as an error
        .or_else(|| scheduler.tracking_failure());
    if let Err(e) = scheduler.flush_tracking() {
        tracing::warn!("could not flush a tracking store: {e}");
    }
    let mut outcome = ledger.outcome(
        scheduler,
        stopped.is_some(),
        |_| WorkerSummary::default(),
        0,
        vec![0; n],
    );
    outcome.stopped = stopped;
    outcome.append_history(scheduler);
    scheduler.close_tracking();
    outcome
}

/// How a task's blocks are measured in a serial run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Measure {
    /// Not at all.
    #[default]
    Off,
    /// Wall, CPU, peak RSS and IO (`resource_tracking=True`).
    Host,
    /// Those and the GPU figures (`gpu_tracking` too).
    WithGpu,
}

impl Measure {
    /// The measure of a task's `resource_tracking` and `gpu_tracking`
    /// (GPU figures only with resource tracking).
    pub fn of(resource_tracking: bool, gpu_tracking: bool) -> Self {
        match (resource_tracking, gpu_tracking) {
            (false, _) => Self::Off,
            (true, false) => Self::Host,
            (true, true) => Self::WithGpu,
        }
    }
}

/// The serial run's profilers: one without GPU figures, and one with them
/// where a task asks (NVML loaded once per run; a failure to load it is
/// noted once in each asking task's report).
struct Profilers {
    host: BlockProfiler,
    gpu: Option<BlockProfiler>,
}

impl Profilers {
    fn new(measure: &[Measure], ledger: &mut RunLedger) -> Self {
        let asking = || {
            (0..measure.len())
                .filter(|&t| measure[t] == Measure::WithGpu)
                .map(|t| t as TaskIndex)
        };
        let gpu = match asking().next().map(|_| GpuProfiler::open()) {
            None => None,
            Some(Ok(g)) => Some(BlockProfiler::new().with_gpu(g)),
            Some(Err(why)) => {
                for t in asking() {
                    ledger.note(t, &why);
                }
                None
            }
        };
        Self {
            host: BlockProfiler::new(),
            gpu,
        }
    }

    fn for_task(&mut self, measure: Measure) -> &mut BlockProfiler {
        match (&mut self.gpu, measure) {
            (Some(gpu), Measure::WithGpu) => gpu,
            _ => &mut self.host,
        }
    }
}

fn sweep(
    scheduler: &mut Scheduler,
    measure: &[Measure],
    hooks: &mut impl SerialHooks,
    ledger: &mut RunLedger,
) -> Result<(), DaisyError> {
    let n = scheduler.pipeline().len() as TaskIndex;
    let mut profilers = Profilers::new(measure, ledger);
    loop {
        let mut progressed = false;
        for task in 0..n {
            while let Some(mut block) = scheduler.acquire_block(task, |b| hooks.already_done(b))? {
                // the block function sees it processing, as 2.0.0's did
                block.status = BlockStatus::Processing;
                progressed = true;
                let sent_at = wall_clock();
                ledger.sent(task, sent_at);
                let how = measure.get(task as usize).copied().unwrap_or_default();
                let status = if how == Measure::Off {
                    hooks.process(&mut block)
                } else {
                    let profiler = profilers.for_task(how);
                    profiler.start();
                    let status = hooks.process(&mut block);
                    profiler.stop_into(&mut block.stats);
                    status
                };
                let checked = match status {
                    Ok(BlockStatus::Failed) => Ok(Some("the block function set status FAILED")),
                    Ok(_) => hooks
                        .post_check(&block)
                        .map(|ok| (!ok).then_some("check_function returned False after the block")),
                    Err(e) => Err(e),
                };
                if !matches!(checked, Ok(None)) {
                    let span = (sent_at, wall_clock());
                    ledger.failed_span(block.key, block.spatial_id, None, span, false);
                }
                let mut fail = |reason: String| {
                    if let Some(attempt) = scheduler.fail_attempt(block.key, &reason, false) {
                        ledger.failed(&attempt, None, reason);
                    }
                };
                match checked {
                    Ok(None) => {
                        ledger.complete(&block, None, None);
                        scheduler.complete_block(&block, None, sent_at, wall_clock())?;
                    }
                    Ok(Some(reason)) => fail(reason.into()),
                    Err(e) => {
                        // the block is not lost: count it as a failed attempt
                        fail(e.to_string());
                        return Err(e);
                    }
                }
            }
        }
        if !progressed {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Roi;
    use crate::pipeline::Pipeline;
    use crate::run_report::Outcome;
    use crate::task_spec::{Fit, TaskSpec};
    use crate::tracking_store::TrackingStore;

    fn sched() -> Scheduler {
        let r = Roi::from_slices(&[0, 0], &[12, 12]).unwrap();
        let read = Roi::from_slices(&[-1, -1], &[5, 5]).unwrap();
        let w = Roi::from_slices(&[0, 0], &[3, 3]).unwrap();
        let spec = TaskSpec::new("a", r, read, w, Fit::Shrink, true, 1, vec![]).unwrap();
        Scheduler::new(Pipeline::new(vec![spec]).unwrap())
    }

    /// Hooks built from closures, for the tests.
    struct Fns<P, C> {
        process: P,
        post: C,
    }

    impl<P, C> SerialHooks for Fns<P, C>
    where
        P: FnMut(&mut Block) -> Result<BlockStatus, DaisyError>,
        C: FnMut(&Block) -> Result<bool, DaisyError>,
    {
        fn already_done(&mut self, _: &Block) -> Result<bool, DaisyError> {
            Ok(false)
        }
        fn process(&mut self, block: &mut Block) -> Result<BlockStatus, DaisyError> {
            (self.process)(block)
        }
        fn post_check(&mut self, block: &Block) -> Result<bool, DaisyError> {
            (self.post)(block)
        }
    }

    fn hooks(
        process: impl FnMut(&mut Block) -> Result<BlockStatus, DaisyError>,
    ) -> impl SerialHooks {
        Fns {
            process,
            post: |_: &Block| Ok(true),
        }
    }

    #[test]
    fn runs_all_blocks() {
        let mut s = sched();
        let mut ran = 0;
        let out = run_serial(
            &mut s,
            &[Measure::Off],
            &mut hooks(|_| {
                ran += 1;
                Ok(BlockStatus::Success)
            }),
        );
        assert_eq!(ran, s.graph().num_blocks(0));
        assert!(s.task_state(0).all_completed());
        assert_eq!(out.stopped, None);
        assert_eq!(out.reports[0].outcome, Outcome::Completed);
        assert_eq!(out.reports[0].blocks.count, ran);
        assert!(!out.reports[0].blocks.has_stats);
    }

    #[test]
    fn first_error_stops_the_run_with_an_interrupted_outcome() {
        let mut s = sched();
        let mut ran = 0;
        let out = run_serial(
            &mut s,
            &[Measure::Off],
            &mut hooks(|_| {
                ran += 1;
                if ran == 3 {
                    Err(DaisyError::Stopped)
                } else {
                    Ok(BlockStatus::Success)
                }
            }),
        );
        assert_eq!(out.stopped, Some(DaisyError::Stopped));
        assert_eq!(ran, 3);
        assert_eq!(out.reports[0].outcome, Outcome::Interrupted);
        assert_eq!(out.states[0].completed_count, 2);
        assert_eq!(out.states[0].failed_attempts, 1, "the block it was on");
    }

    #[test]
    fn a_stopped_run_lets_go_of_its_store_while_the_scheduler_lives() {
        // a notebook keeps the traceback of an interrupted run, and with it
        // the scheduler: the run's end, not the scheduler's, frees the store
        let path = std::env::temp_dir().join(format!("daisy-serial-close-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        let mut s = sched();
        let spec = s.pipeline().spec(0).clone();
        let store = TrackingStore::open(&path, &spec, false).unwrap();
        assert!(TrackingStore::open(&path, &spec, false).is_err(), "locked");
        s.set_tracking(0, store);
        let mut ran = 0;
        let out = run_serial(
            &mut s,
            &[Measure::Off],
            &mut hooks(|_| {
                ran += 1;
                if ran == 3 {
                    Err(DaisyError::Stopped)
                } else {
                    Ok(BlockStatus::Success)
                }
            }),
        );
        assert_eq!(out.stopped, Some(DaisyError::Stopped));
        let again = TrackingStore::open(&path, &spec, false).expect("the store is free");
        let grid = crate::block_grid::BlockGrid::new(0, &spec);
        let marked = (0..grid.num_blocks())
            .filter(|&i| again.is_marked_done(&grid.block(i)))
            .count();
        assert_eq!(marked, 2, "the two blocks done before the stop");
        drop((again, s));
        std::fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn failed_status_is_retried_then_failed() {
        let mut s = sched();
        let mut calls = 0;
        let out = run_serial(
            &mut s,
            &[Measure::Off],
            &mut hooks(|b| {
                calls += 1;
                Ok(if b.spatial_id == 0 {
                    BlockStatus::Failed
                } else {
                    BlockStatus::Success
                })
            }),
        );
        let st = s.task_state(0);
        assert_eq!(st.failed_count, 1);
        assert_eq!(st.failed_attempts, 2);
        assert!(st.is_done());
        assert!(!st.all_completed());
        assert_eq!(out.reports[0].outcome, Outcome::Failed);
        assert_eq!(out.failures.len(), 2);
        assert!(out.failures[0].reason.contains("FAILED"));
        // both failed attempts are in the report with their times
        let spans = &out.reports[0].failed_attempts;
        assert_eq!(spans.len(), 2);
        assert!(
            spans
                .iter()
                .all(|a| a.block == 0 && a.worker_id.is_none() && !a.timed_out)
        );
        assert!(
            spans
                .iter()
                .all(|a| a.sent_at > 0.0 && a.returned_at >= a.sent_at)
        );
    }

    #[test]
    fn a_failed_post_check_fails_the_block() {
        let mut s = sched();
        let out = run_serial(
            &mut s,
            &[Measure::Off],
            &mut Fns {
                process: |_: &mut Block| Ok(BlockStatus::Success),
                post: |b: &Block| Ok(b.spatial_id != 0),
            },
        );
        assert_eq!(s.task_state(0).failed_count, 1);
        assert!(out.failures[0].reason.contains("check_function"));
    }

    #[test]
    fn measured_tasks_get_figures_and_an_inner_measurement_wins() {
        let mut s = sched();
        let inner = crate::block_profile::BlockStats {
            wall_seconds: 123.0,
            cpu_seconds: 0.0,
            peak_rss_bytes: 1,
            io_read_bytes: 0,
            io_write_bytes: 0,
            gpu_util_pct: f32::NAN,
            gpu_mem_bytes: 0,
            run_queue_seconds: f64::NAN,
        };
        let out = run_serial(
            &mut s,
            &[Measure::Host],
            &mut hooks(|b| {
                if b.spatial_id == 0 {
                    b.stats = Some(inner);
                }
                Ok(BlockStatus::Success)
            }),
        );
        let blocks = &out.reports[0].blocks;
        assert!(blocks.has_stats);
        assert_eq!(blocks.wall.n, s.graph().num_blocks(0));
        assert!(blocks.wall.max >= 123.0, "the inner measurement was kept");
        assert!(
            blocks.wall.min < 1.0,
            "the others were measured around the call"
        );
    }
}
