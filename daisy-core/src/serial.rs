//! Serial runs: every block in the calling thread, in dependency order.
//! [`run_serial`] owns the loop; the caller supplies the skip check and the
//! block function (in daisy, calls into Python).
//!
//! Tasks are visited in pipeline order and each is drained of ready blocks
//! before the next is visited; the sweep repeats until no task has a ready
//! block. The first error returned by the block function or the check
//! stops the run and is returned unchanged, so a Python exception reaches
//! the user with its own type and traceback.

use crate::block::{Block, BlockStatus, TaskIndex};
use crate::error::DaisyError;
use crate::run_report::wall_clock;
use crate::scheduler::Scheduler;

/// Run every block of `scheduler` through `process`, which returns the
/// block's final status. Returns when no block is ready anywhere (every
/// block completed, failed or orphaned).
pub fn run_serial<E: From<DaisyError>>(
    scheduler: &mut Scheduler,
    mut is_done: impl FnMut(&Block) -> Result<bool, E>,
    mut process: impl FnMut(&mut Block) -> Result<BlockStatus, E>,
) -> Result<(), E> {
    let n = scheduler.pipeline().len() as TaskIndex;
    loop {
        let mut progressed = false;
        for task in 0..n {
            while let Some(mut block) = scheduler.acquire_block(task, &mut is_done)? {
                progressed = true;
                let sent_at = wall_clock();
                let status = match process(&mut block) {
                    Ok(status) => status,
                    Err(e) => {
                        // the block is not lost: count it as a failed attempt
                        let _ = scheduler.release_block(block.key, BlockStatus::Failed);
                        return Err(e);
                    }
                };
                if status == BlockStatus::Success
                    && let Some(stats) = block.stats
                    && let Some(tracking) = scheduler.tracking_mut(task)
                {
                    tracking.record_stats(&block, &stats, None, sent_at, wall_clock());
                }
                scheduler.release_block(block.key, status)?;
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
    use crate::task_spec::{Fit, TaskSpec};

    fn sched() -> Scheduler {
        let r = Roi::from_slices(&[0, 0], &[12, 12]).unwrap();
        let read = Roi::from_slices(&[-1, -1], &[5, 5]).unwrap();
        let w = Roi::from_slices(&[0, 0], &[3, 3]).unwrap();
        let spec = TaskSpec::new("a", r, read, w, Fit::Shrink, true, 1, vec![]).unwrap();
        Scheduler::new(Pipeline::new(vec![spec]).unwrap())
    }

    #[test]
    fn runs_all_blocks() {
        let mut s = sched();
        let mut ran = 0;
        run_serial::<DaisyError>(
            &mut s,
            |_| Ok(false),
            |_| {
                ran += 1;
                Ok(BlockStatus::Success)
            },
        )
        .unwrap();
        assert_eq!(ran, s.graph().num_blocks(0));
        assert!(s.task_state(0).all_completed());
    }

    #[test]
    fn first_error_stops_the_run() {
        let mut s = sched();
        let mut ran = 0;
        let e = run_serial::<DaisyError>(
            &mut s,
            |_| Ok(false),
            |_| {
                ran += 1;
                if ran == 3 {
                    Err(DaisyError::invalid("x", "boom"))
                } else {
                    Ok(BlockStatus::Success)
                }
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("boom"));
        assert_eq!(ran, 3);
    }

    #[test]
    fn failed_status_is_retried_then_failed() {
        let mut s = sched();
        let mut calls = 0;
        run_serial::<DaisyError>(
            &mut s,
            |_| Ok(false),
            |b| {
                calls += 1;
                Ok(if b.spatial_id == 0 {
                    BlockStatus::Failed
                } else {
                    BlockStatus::Success
                })
            },
        )
        .unwrap();
        let st = s.task_state(0);
        assert_eq!(st.failed_count, 1);
        assert_eq!(st.failed_attempts, 2);
        assert!(st.is_done());
        assert!(!st.all_completed());
    }
}
