//! The run plan: what a run is made of before it starts, and the one place
//! that turns it into a scheduler. Both runners (the server and the serial
//! loop) start from a [`RunPlan`], so a task's store is opened, its skip
//! mask set and its run history placed the same way whichever runs it; the
//! bindings only convert Python's values into one.
//!
//! A task's run history (`runs.jsonl`, one report line per run) lives in
//! its tracking store when it has one, else next to its worker logs under
//! the run's log directory (`<log dir>/<task id>/runs.jsonl`, when worker
//! output goes to files), else nowhere: [`crate::tracking_store::history_file`]
//! says which, for
//! the writer (the run's end, [`crate::run_report::RunOutcome::append_history`])
//! and for readers alike. A task id is path-safe by
//! [`crate::task_id::check_task_id`], so joining it is safe.

use crate::error::DaisyError;
use crate::pipeline::Pipeline;
use crate::pipeline_coverage::{UncoveredRead, uncovered_reads};
use crate::scheduler::Scheduler;
use crate::serial::Measure;
use crate::server::LogMode;
use crate::task_outputs::{DeclaredOutput, check_chunks};
use crate::task_spec::TaskSpec;
use crate::tracking_store::TrackingStore;
use std::path::{Path, PathBuf};

/// One task of a run: its spec and what it keeps, skips and measures.
#[derive(Clone, Debug)]
pub struct TaskPlan {
    /// The task.
    pub spec: TaskSpec,
    /// Its tracking store directory (None: untracked, or the run's
    /// `block_tracking=False`).
    pub tracking_path: Option<PathBuf>,
    /// One byte per block, C order of the placement grid; nonzero skips
    /// the block.
    pub skip_mask: Option<Vec<u8>>,
    /// Whether and how its blocks are measured.
    pub measure: Measure,
    /// The arrays it declares it writes (`Task(outputs=...)`): their
    /// chunks are checked against its write blocks, and their identities
    /// against what its store recorded ([`crate::task_outputs`]).
    pub outputs: Vec<DeclaredOutput>,
}

/// A whole run's tasks and where untracked tasks' histories go.
#[derive(Clone, Debug)]
pub struct RunPlan {
    /// The tasks, in any order (the pipeline orders them).
    pub tasks: Vec<TaskPlan>,
    /// The run's log directory when worker output goes to files: the base
    /// of untracked tasks' histories (see [`crate::tracking_store::history_file`]).
    pub history_base: Option<PathBuf>,
    /// Whether the run uses the tasks' tracking stores (daisy 2.0.0's
    /// `block_tracking`; False: no block is skipped for a mark, none is
    /// marked, and every history goes next to the logs).
    pub block_tracking: bool,
    /// Whether a downstream task whose blocks read where no upstream
    /// block writes ([`crate::pipeline_coverage`]) refuses the run instead
    /// of warning (`run_blockwise(strict=True)`).
    pub strict: bool,
}

impl Default for RunPlan {
    fn default() -> Self {
        Self {
            tasks: Vec::new(),
            history_base: None,
            block_tracking: true,
            strict: false,
        }
    }
}

impl RunPlan {
    /// The rules of a run's stores: no two tasks on one store and none
    /// inside another's ([`crate::tracking_store::placement::check_distinct`]);
    /// a task that measures its blocks records the figures in its tracking
    /// store, so it needs one, and the run must use it (`block_tracking`).
    pub fn check(&self) -> Result<(), DaisyError> {
        if self.block_tracking {
            let stores: Vec<(&str, &Path)> = self
                .tasks
                .iter()
                .filter_map(|t| Some((t.spec.task_id.as_str(), t.tracking_path.as_deref()?)))
                .collect();
            crate::tracking_store::placement::check_distinct(&stores)?;
        }
        for plan in self.tasks.iter().filter(|t| t.measure != Measure::Off) {
            let id = &plan.spec.task_id;
            if !self.block_tracking {
                return Err(DaisyError::invalid(
                    "block_tracking",
                    format!(
                        "False runs without tracking stores, but task {id:?} has \
                         resource_tracking=True, which records its figures in its store; drop \
                         one of the two"
                    ),
                ));
            }
            if plan.tracking_path.is_none() {
                return Err(DaisyError::invalid(
                    "resource_tracking",
                    format!(
                        "task {id:?} measures its blocks but has no tracking store to record \
                         them in; give it tracking_path=... or call \
                         daisy.set_tracking_basedir(...) before the run"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The downstream tasks of `pipeline` that read where no upstream
    /// block writes ([`crate::pipeline_coverage::uncovered_reads`]), to
    /// warn of; under [`Self::strict`] the first refuses the run.
    pub fn check_coverage(&self, pipeline: &Pipeline) -> Result<Vec<UncoveredRead>, DaisyError> {
        let found = uncovered_reads(pipeline);
        match found.first() {
            Some(first) if self.strict => {
                let more = match found.len() - 1 {
                    0 => String::new(),
                    n => format!(" ({n} more pair(s) of tasks like it)"),
                };
                Err(DaisyError::invalid(
                    "strict",
                    format!(
                        "True refuses this pipeline: {}{more}; fix the geometry, or drop \
                         strict=True to run with a warning",
                        first.text
                    ),
                ))
            }
            _ => Ok(found),
        }
    }

    /// The history base of a run that logs to `log_dir` in `mode`: the
    /// directory itself, unless output stays on the console.
    pub fn history_base_for(log_dir: Option<&Path>, mode: LogMode) -> Option<PathBuf> {
        match mode {
            LogMode::Console => None,
            LogMode::File | LogMode::Both => log_dir.map(Path::to_path_buf),
        }
    }

    /// The scheduler of this plan: its rules checked ([`Self::check`]),
    /// the pipeline checked (cycles, duplicate ids), each task's tracking
    /// store opened (unless the run does without: `block_tracking`) (a store of another layout
    /// or task is refused) and its skip mask set, and the history base
    /// kept for the run's end.
    pub fn scheduler(&self) -> Result<Scheduler, DaisyError> {
        self.check()?;
        let pipeline = Pipeline::new(self.tasks.iter().map(|t| t.spec.clone()).collect())?;
        let uncovered = self.check_coverage(&pipeline)?;
        let mut scheduler = Scheduler::new(pipeline);
        for found in uncovered {
            tracing::warn!(
                "daisy: {}; run_blockwise(strict=True) makes this an error",
                found.text
            );
            scheduler.add_plan_notice(found.task, found.text);
        }
        for plan in &self.tasks {
            for output in &plan.outputs {
                check_chunks(&plan.spec, output)?;
            }
        }
        for plan in &self.tasks {
            let t = scheduler.pipeline().index_of(&plan.spec.task_id)?;
            if let Some(path) = plan.tracking_path.as_ref().filter(|_| self.block_tracking) {
                let tracking = TrackingStore::open(path, &plan.spec, plan.measure != Measure::Off)?;
                tracking.check_outputs(&plan.spec.task_id, &plan.outputs)?;
                scheduler.set_tracking(t, tracking);
            }
            if let Some(mask) = &plan.skip_mask {
                scheduler.set_skip_mask(t, mask.clone())?;
            }
        }
        scheduler.set_history_base(self.history_base.clone());
        Ok(scheduler)
    }

    /// Each task's measure, in the order of `pipeline` (a task the plan
    /// does not name is not measured).
    pub fn measures(&self, pipeline: &Pipeline) -> Vec<Measure> {
        pipeline
            .specs()
            .iter()
            .map(|s| {
                self.tasks
                    .iter()
                    .find(|t| t.spec.task_id == s.task_id)
                    .map_or(Measure::Off, |t| t.measure)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::{Coord, Roi};
    use crate::task_spec::Fit;
    use crate::tracking_store::history_file;

    fn roi(offset: i64, shape: i64) -> Roi {
        Roi::new(
            Coord::new(&[offset]).unwrap(),
            Coord::new(&[shape]).unwrap(),
        )
        .unwrap()
    }

    fn plan(id: &str) -> TaskPlan {
        let spec = TaskSpec::new(
            id,
            roi(0, 20),
            roi(0, 10),
            roi(0, 10),
            crate::task_spec::Fit::Valid,
            true,
            0,
            Vec::new(),
        )
        .unwrap();
        TaskPlan {
            spec,
            tracking_path: None,
            skip_mask: None,
            measure: Measure::Off,
            outputs: Vec::new(),
        }
    }

    #[test]
    fn a_history_is_in_the_store_else_next_to_the_logs_else_nowhere() {
        let store = Path::new("/s/a.store");
        let base = Path::new("/logs");
        assert_eq!(
            history_file("a", Some(store), Some(base)),
            Some(store.join("runs.jsonl"))
        );
        assert_eq!(
            history_file("a", None, Some(base)),
            Some(PathBuf::from("/logs/a/runs.jsonl"))
        );
        assert_eq!(history_file("a", None, None), None);
        let logs = Path::new("/logs");
        assert_eq!(
            RunPlan::history_base_for(Some(logs), LogMode::Console),
            None
        );
        assert_eq!(
            RunPlan::history_base_for(Some(logs), LogMode::Both),
            Some(logs.to_path_buf())
        );
    }

    #[test]
    fn the_plan_opens_stores_sets_masks_and_keeps_the_history_base() {
        let dir = std::env::temp_dir().join(format!("daisy-run-plan-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let run = RunPlan {
            tasks: vec![
                TaskPlan {
                    skip_mask: Some(vec![1, 0]),
                    ..plan("b")
                },
                TaskPlan {
                    tracking_path: Some(dir.as_path().join("a.store")),
                    measure: Measure::Host,
                    ..plan("a")
                },
            ],
            history_base: Some(dir.as_path().join("logs")),
            block_tracking: true,
            strict: false,
        };
        let scheduler = run.scheduler().unwrap();
        let a = scheduler.pipeline().index_of("a").unwrap();
        let b = scheduler.pipeline().index_of("b").unwrap();
        assert!(scheduler.tracking(a).is_some());
        assert!(scheduler.tracking(b).is_none());
        assert_eq!(
            scheduler.history_file(a),
            Some(dir.as_path().join("a.store").join("runs.jsonl"))
        );
        assert_eq!(
            scheduler.history_file(b),
            Some(dir.as_path().join("logs").join("b").join("runs.jsonl"))
        );
        let measures = run.measures(scheduler.pipeline());
        assert_eq!(measures[a as usize], Measure::Host);
        assert_eq!(measures[b as usize], Measure::Off);
        // a mask of the wrong length is refused by the plan, naming it
        let bad = RunPlan {
            tasks: vec![TaskPlan {
                skip_mask: Some(vec![1]),
                ..plan("c")
            }],
            history_base: None,
            block_tracking: true,
            strict: false,
        };
        assert!(bad.scheduler().is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_measuring_task_needs_a_store_and_a_run_that_uses_it() {
        let measured = TaskPlan {
            measure: Measure::Host,
            ..plan("m")
        };
        let run = |tracking_path: Option<PathBuf>, block_tracking| RunPlan {
            tasks: vec![TaskPlan {
                tracking_path,
                ..measured.clone()
            }],
            history_base: None,
            block_tracking,
            strict: false,
        };
        let e = run(None, true).check().unwrap_err().to_string();
        assert!(
            e.starts_with("resource_tracking: task \"m\" measures its blocks"),
            "{e}"
        );
        let store = Some(PathBuf::from("/nowhere/m"));
        let e = run(store.clone(), false).check().unwrap_err().to_string();
        assert!(
            e.starts_with("block_tracking: False runs without tracking stores"),
            "{e}"
        );
        assert!(run(store, true).check().is_ok());
        // an unmeasured task needs neither
        let plain = RunPlan {
            tasks: vec![plan("p")],
            history_base: None,
            block_tracking: false,
            strict: false,
        };
        assert!(plain.check().is_ok());
        assert!(plain.scheduler().is_ok());
    }

    #[test]
    fn a_read_of_what_no_upstream_block_writes_warns_or_under_strict_refuses() {
        let line = |o: i64, s: i64| Roi::from_slices(&[o], &[s]).unwrap();
        // up (fit valid) writes [0, 90) of [0, 95); down reads all of [0, 100)
        let up = TaskSpec::new(
            "up",
            line(0, 95),
            line(0, 10),
            line(0, 10),
            Fit::Valid,
            false,
            0,
            vec![],
        )
        .unwrap();
        let down = TaskSpec::new(
            "down",
            line(0, 100),
            line(0, 10),
            line(0, 10),
            Fit::Valid,
            false,
            0,
            vec!["up".into()],
        )
        .unwrap();
        let task = |spec: &TaskSpec| TaskPlan {
            spec: spec.clone(),
            ..plan("x")
        };
        let mut run = RunPlan {
            tasks: vec![task(&up), task(&down)],
            ..RunPlan::default()
        };
        let scheduler = run.scheduler().unwrap();
        let notices = scheduler.plan_notices();
        assert_eq!(notices.len(), 1, "{notices:?}");
        let down_index = scheduler.pipeline().index_of("down").unwrap();
        assert_eq!(notices[0].0, down_index);
        assert!(
            notices[0]
                .1
                .contains("1 of its 10 blocks read where no block"),
            "{}",
            notices[0].1
        );
        run.strict = true;
        let e = run.scheduler().err().unwrap().to_string();
        assert!(
            e.starts_with("strict: True refuses this pipeline: task \"down\""),
            "{e}"
        );
    }
}
