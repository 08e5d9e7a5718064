//! Unit tests of the run report: aggregates, causes, outcomes, the ledger
//! and the published schema.

use super::*;
use crate::block::TaskIndex;

use crate::block_profile::BlockStats;
use crate::error::DaisyError;
use crate::geometry::Roi;
use crate::run_stats::StatSummary;
use crate::scheduler::Scheduler;
use crate::task_state::TaskState;
use crate::tracking_store::RUNS_FILE;
use crate::worker_timeline::WorkerSummary;

/// The schema shipped in the Python package is the one these types
/// generate: a key added to the report is published with it, or this
/// fails (`DAISY_WRITE_SCHEMA=1 cargo test report_schema` rewrites it).
#[test]
fn the_published_report_schema_is_the_generated_one() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../python/daisy/report_schema.json");
    let generated = serde_json::to_string_pretty(&report_schema()).unwrap() + "\n";
    if std::env::var_os("DAISY_WRITE_SCHEMA").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let shipped = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        shipped == generated,
        "{} is not the schema the report types generate; rerun with \
         DAISY_WRITE_SCHEMA=1 cargo test report_schema",
        path.display()
    );
}

#[test]
fn notices_are_kept_once_bounded_and_cut() {
    let mut ledger = RunLedger::new(2);
    for _ in 0..3 {
        ledger.note(1, "no GPU figures: NVML not found");
    }
    ledger.note(7, "a task that does not exist is ignored");
    ledger.note(1, "   ");
    for i in 0..(MAX_NOTES + 4) {
        ledger.note(1, &format!("note {i}"));
    }
    ledger.note(0, &"é".repeat(MAX_NOTE_BYTES));
    assert_eq!(ledger.notices[1].len(), MAX_NOTES);
    assert_eq!(
        ledger.notices[1][0], "no GPU figures: NVML not found",
        "once, first"
    );
    assert_eq!(
        ledger.notices[0][0].len(),
        MAX_NOTE_BYTES,
        "cut on a char boundary"
    );
}

#[test]
fn gpu_figures_join_the_aggregates_only_where_measured() {
    let mut agg = BlockAggregates::default();
    let stats = |util: f32, mem: u64| BlockStats {
        wall_seconds: 1.0,
        cpu_seconds: 1.0,
        peak_rss_bytes: 1,
        io_read_bytes: 0,
        io_write_bytes: 0,
        gpu_util_pct: util,
        gpu_mem_bytes: mem,
        run_queue_seconds: f64::NAN,
    };
    agg.record_success(None, Some(&stats(f32::NAN, 0)), true, 0);
    agg.record_success(None, Some(&stats(90.0, 2 << 30)), false, 1);
    agg.record_success(None, Some(&stats(10.0, 1 << 30)), false, 2);
    let s = agg.summary(&TaskState::default());
    assert_eq!(s.gpu_util.n, 2, "the unmeasured block is not a 0 %");
    assert_eq!(s.gpu_util.mean, 50.0);
    assert_eq!(s.gpu_mem.n, 2);
    assert_eq!(s.gpu_mem.max, (2u64 << 30) as f64);
    assert_eq!(s.wall.n, 3);
}

#[test]
fn failure_causes_count_distinct_last_lines_and_keep_the_first_text() {
    let mut causes = FailureCauses::default();
    let trace = "Traceback (most recent call last):\n  File \"x.py\", line 3\nValueError: corrupt";
    for _ in 0..3 {
        causes.note(trace);
    }
    causes.note("worker 2 died while processing the block\n");
    for i in 0..(MAX_CAUSES + 5) {
        causes.note(&format!("KeyError: {i}"));
    }
    assert_eq!(causes.first_traceback.as_deref(), Some(trace));
    assert_eq!(causes.messages.len(), MAX_CAUSES);
    assert_eq!(causes.messages[0].message, "ValueError: corrupt");
    assert_eq!(causes.messages[0].count, 3);
    assert_eq!(
        causes.messages[1].message,
        "worker 2 died while processing the block"
    );
    // 18 KeyErrors fit beside the first two messages; 7 more do not
    assert_eq!(causes.other, 7);
    let total: u64 = causes.messages.iter().map(|c| c.count).sum::<u64>() + causes.other;
    assert_eq!(total, 3 + 1 + MAX_CAUSES as u64 + 5);
}

#[test]
fn failed_blocks_group_attempts_in_order_of_first_failure() {
    let note = |spatial_id: u64, last_attempt: bool, reason: &str| FailureNote {
        task: 0,
        spatial_id,
        write_roi: Roi::from_slices(&[spatial_id as i64 * 10], &[10]).unwrap(),
        last_attempt,
        worker_id: Some(1),
        reason: reason.into(),
    };
    let outcome = RunOutcome {
        states: vec![],
        failures: vec![
            note(7, false, "Traceback ...\nValueError: first"),
            note(3, false, "KeyError: 'x'"),
            note(7, true, "Traceback ...\nValueError: second"),
        ],
        failures_unnoted: 0,
        abandoned: vec![],
        unmanaged_clients: 0,
        workers_started: vec![],
        reports: vec![],
        stopped: None,
    };
    let blocks = outcome.failed_blocks();
    assert_eq!(blocks.len(), 2);
    assert_eq!(
        (blocks[0].spatial_id, blocks[0].attempts, blocks[0].failed),
        (7, 2, true)
    );
    assert_eq!(blocks[0].message, "ValueError: second");
    assert_eq!(blocks[0].write_roi.slices(), "[70:80]");
    assert_eq!(
        (blocks[1].spatial_id, blocks[1].attempts, blocks[1].failed),
        (3, 1, false)
    );
}

#[test]
fn a_long_first_failure_keeps_its_end() {
    let mut causes = FailureCauses::default();
    let long = format!("{}\nRuntimeError: the end", "é frame\n".repeat(10_000));
    causes.note(&long);
    let kept = causes.first_traceback.unwrap();
    assert!(kept.len() <= FIRST_TRACEBACK_BYTES + "…".len());
    assert!(kept.starts_with('…'));
    assert!(kept.ends_with("RuntimeError: the end"));
}

#[test]
fn report_is_one_json_line_with_the_spec_keys() {
    let mut agg = BlockAggregates::default();
    let stats = BlockStats {
        wall_seconds: 0.05,
        cpu_seconds: 0.001,
        peak_rss_bytes: 1 << 20,
        io_read_bytes: 10,
        io_write_bytes: 0,
        gpu_util_pct: f32::NAN,
        gpu_mem_bytes: 0,
        run_queue_seconds: f64::NAN,
    };
    for _ in 0..12 {
        agg.record_success(Some(0.0505), Some(&stats), false, 0);
    }
    let state = TaskState {
        total_block_count: 12,
        completed_count: 12,
        ..TaskState::default()
    };
    let report = TaskReport {
        task_id: "seg".into(),
        started_at: 1.0,
        finished_at: 2.0,
        tracked: true,
        outcome: Outcome::Completed,
        blocks: agg.summary(&state),
        workers: WorkerSummary::default(),
        utilisation: None,
        ..TaskReport::default()
    };
    assert_eq!(report.blocks.count, 12);
    assert!((report.blocks.overhead.mean - 0.0005).abs() < 1e-9);
    let dir = std::env::temp_dir().join(format!("daisy-report-{}", std::process::id()));
    let line = serde_json::to_string(&report).unwrap();
    for _ in 0..2 {
        crate::tracking_store::append_runs_line(&dir.join(RUNS_FILE), &line).unwrap();
    }
    let text = std::fs::read_to_string(dir.join(RUNS_FILE)).unwrap();
    assert_eq!(text.lines().count(), 2);
    let v: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    for key in [
        "task_id",
        "started_at",
        "finished_at",
        "tracked",
        "blocks",
        "workers",
        "outcome",
        "utilisation",
        "first_block_at",
        "last_block_at",
        "failure_causes",
    ] {
        assert!(v.get(key).is_some(), "{key}");
    }
    assert_eq!(v["blocks"]["round_trip"]["n"], 12);
    assert!(v["blocks"]["wall"]["sum"].as_f64().unwrap() > 0.5);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn failure_texts_are_bounded_but_every_failure_is_counted() {
    use crate::geometry::Roi;
    use crate::pipeline::Pipeline;
    use crate::task_spec::{Fit, TaskSpec};
    let r = |s| Roi::from_slices(&[0], &[s]).unwrap();
    let spec = TaskSpec::new("t", r(2000), r(1), r(1), Fit::Valid, false, 2, vec![]).unwrap();
    let mut scheduler = Scheduler::new(Pipeline::new(vec![spec]).unwrap());
    let mut ledger = RunLedger::new(1);
    let traceback = |i: usize| format!("{}\nValueError: block {i} broke", "x".repeat(60_000));
    let mut failed = 0;
    while let Some(b) = scheduler
        .acquire_block(0, |_| Ok::<_, DaisyError>(false))
        .unwrap()
    {
        let reason = traceback(b.spatial_id as usize);
        let attempt = scheduler.fail_attempt(b.key, &reason, false).unwrap();
        ledger.failed(&attempt, None, reason);
        failed += 1;
    }
    assert_eq!(failed, 3 * 2000, "three attempts of every block");
    assert_eq!(ledger.failures.len(), failed, "every attempt is counted");
    let kept: usize = ledger.failures.iter().map(|f| f.reason.len()).sum();
    assert!(
        kept <= FAILURE_TEXT_BUDGET + failed * FAILURE_LINE_BYTES,
        "{kept}"
    );
    let first = &ledger.failures[0];
    assert!(
        first.reason.len() > 60_000,
        "a block's first failure is kept whole"
    );
    let short = ledger.failures.last().unwrap();
    assert!(
        short.reason.starts_with("ValueError: block"),
        "{}",
        short.reason
    );
}

#[test]
fn the_last_line_is_cut_on_a_character_boundary() {
    assert_eq!(
        last_line("Traceback\n  x\nKeyError: 'a'\n\n"),
        "KeyError: 'a'"
    );
    let long = "é".repeat(FAILURE_LINE_BYTES);
    let cut = last_line(&long);
    assert!(cut.len() <= FAILURE_LINE_BYTES && cut.chars().all(|c| c == 'é'));
}

#[test]
fn utilisation_is_block_seconds_over_worker_seconds() {
    use crate::worker_timeline::{StartKind, WorkerRecord};
    let record = |startup: f64, idle: f64, compute: f64, teardown: f64| WorkerRecord {
        worker_id: 0,
        startup: Some(startup),
        blocks_ok: 1,
        blocks_failed: 0,
        idle: StatSummary {
            n: 1,
            sum: idle,
            ..StatSummary::default()
        },
        compute: StatSummary {
            n: 1,
            sum: compute,
            ..StatSummary::default()
        },
        final_wait: Some(0.0),
        teardown: Some(teardown),
        exit: None,
        start: StartKind::Cold,
        job_id: None,
    };
    let workers = WorkerSummary {
        count: 2,
        compute: StatSummary {
            n: 2,
            sum: 6.0,
            ..StatSummary::default()
        },
        by_id: vec![record(1.0, 0.5, 3.0, 0.5), record(1.0, 0.5, 3.0, 0.5)],
        ..WorkerSummary::default()
    };
    let mut blocks = BlockSummary::default();
    let u = utilisation(&blocks, &workers).unwrap();
    assert!((u - 6.0 / 10.0).abs() < 1e-12, "round trips: {u}");
    blocks.has_stats = true;
    blocks.wall.sum = 5.0;
    let u = utilisation(&blocks, &workers).unwrap();
    assert!((u - 5.0 / 10.0).abs() < 1e-12, "the workers' own wall: {u}");
    assert_eq!(utilisation(&blocks, &WorkerSummary::default()), None);
}

fn traceback(block: u64) -> String {
    format!(
        "Traceback (most recent call last):\n  File \"/w/daisy/_worker.py\", line 90, in run\n    \
         f(block)\n  File \"/home/u/pipeline/smooth.py\", line 12, in smooth\n    raise \
         ValueError(f\"block {{block.block_id}} has NaN\")\nValueError: block ('smooth', {block}) \
         has NaN\n"
    )
}

#[test]
fn failures_group_by_exception_type_and_raising_line_not_by_message() {
    let mut causes = FailureCauses::default();
    for block in 0..30 {
        causes.note(&traceback(block));
    }
    causes.note("\n  File \"/x/other.py\", line 3, in load\nOSError: disk full\n");
    causes.note("the worker died (signal: 9 (SIGKILL))");
    causes.note("the worker died (signal: 9 (SIGKILL))");
    assert_eq!(causes.messages.len(), 3, "{:?}", causes.messages);
    let first = &causes.messages[0];
    assert_eq!(first.count, 30);
    assert_eq!(first.cause, "ValueError at smooth.py:12 in smooth");
    assert_eq!(first.message, "ValueError: block ('smooth', 0) has NaN");
    assert_eq!(causes.messages[1].cause, "OSError at other.py:3 in load");
    // a text that is no traceback groups by its last line, as before
    assert_eq!(causes.messages[2].cause, "");
    assert_eq!(causes.messages[2].count, 2);
    assert_eq!(causes.other, 0);
    assert_eq!(cause_of("ValueError: no frame here"), "");
}

#[test]
fn the_first_block_of_each_worker_and_the_slowest_blocks_are_kept() {
    let mut agg = BlockAggregates::default();
    let timed = |wall: f64, cpu: f64| BlockStats {
        wall_seconds: wall,
        cpu_seconds: cpu,
        peak_rss_bytes: 0,
        io_read_bytes: 0,
        io_write_bytes: 0,
        gpu_util_pct: f32::NAN,
        gpu_mem_bytes: 0,
        run_queue_seconds: f64::NAN,
    };
    // two workers: each starts with a 0.8 s block, then 0.02 s ones
    for (id, first) in [(0, true), (1, true)] {
        agg.record_success(None, Some(&timed(0.8, 0.4)), first, id);
    }
    for id in 2..12 {
        agg.record_success(
            None,
            Some(&timed(0.02 + id as f64 * 1e-4, 0.005)),
            false,
            id,
        );
    }
    let s = agg.summary(&TaskState::default());
    assert_eq!(s.first_on_worker.n, 2);
    assert!((s.first_on_worker.mean - 0.8).abs() < 1e-12);
    let ratio = s.warmup_ratio.unwrap();
    assert!(ratio > 30.0 && ratio < 40.0, "{ratio}");
    assert_eq!(s.slowest.len(), SLOWEST_BLOCKS);
    assert_eq!(
        s.slowest.iter().map(|b| b.spatial_id).collect::<Vec<_>>(),
        vec![0, 1, 11, 10, 9]
    );
    let cpu = s.cpu_per_wall.unwrap();
    assert!(
        (cpu - (0.8 + 0.05) / (1.6 + 0.2 + 0.0065)).abs() < 1e-9,
        "{cpu}"
    );
    // nothing measured, nothing said
    let none = BlockAggregates::default().summary(&TaskState::default());
    assert_eq!((none.warmup_ratio, none.cpu_per_wall), (None, None));
    assert!(none.slowest.is_empty());
}

#[test]
fn the_report_says_when_idle_nodes_could_have_been_handed_back() {
    use crate::worker_timeline::{StartKind, WorkerRecord};
    // a worker that lived 100 s: 60 s idle, 40 s on blocks
    let record = WorkerRecord {
        worker_id: 0,
        startup: Some(0.0),
        blocks_ok: 1,
        blocks_failed: 0,
        idle: StatSummary {
            n: 1,
            sum: 50.0,
            ..StatSummary::default()
        },
        compute: StatSummary {
            n: 1,
            sum: 40.0,
            ..StatSummary::default()
        },
        final_wait: Some(10.0),
        teardown: Some(0.0),
        exit: None,
        start: StartKind::Cold,
        job_id: None,
    };
    let slurm = WorkerSummary {
        spawner: "slurm".into(),
        count: 1,
        idle_seconds: 60.0,
        by_id: vec![record.clone()],
        ..WorkerSummary::default()
    };
    let hint = idle_hint(&slurm).expect("60% idle on a cluster");
    assert!(
        hint.starts_with("its workers waited 60 worker-seconds for blocks (60% of their time)")
            && hint.contains("idle_timeout"),
        "{hint}"
    );
    // already handing idle workers back, local, or busy enough: nothing
    let handing_back = WorkerSummary {
        idle_timeout: Some(30.0),
        ..slurm.clone()
    };
    let local = WorkerSummary {
        spawner: "local".into(),
        ..slurm.clone()
    };
    let busy = WorkerSummary {
        idle_seconds: 20.0,
        ..slurm.clone()
    };
    let short = WorkerSummary {
        idle_seconds: IDLE_HINT_SECONDS / 2.0,
        by_id: vec![WorkerRecord {
            compute: StatSummary::default(),
            idle: StatSummary::default(),
            final_wait: Some(IDLE_HINT_SECONDS / 2.0),
            ..record
        }],
        ..slurm
    };
    for quiet in [handing_back, local, busy, short] {
        assert_eq!(idle_hint(&quiet), None, "{quiet:?}");
    }
}

/// Issue 41: worker deaths that differ only in the worker's id (and the
/// figures of its last block) are one cause, shown without the id.
#[test]
fn worker_deaths_group_without_the_workers_ids() {
    let mut causes = FailureCauses::default();
    for (id, peak) in [(3, 139), (4, 1210), (7, 88), (9, 1400)] {
        causes.note(&format!(
            "worker {id} died (signal: 9 (SIGKILL); likely killed by the OOM killer (the kernel \
             ends a process with SIGKILL when memory runs out, and its log says nothing); its \
             last block peaked at {peak} MiB RSS; give its workers more memory)"
        ));
    }
    causes.note("worker 5 died (exit status: 1)");
    causes.note("worker 6 died (exit status: 1)");
    causes.note("worker 8 exited (exit status: 0) with the block in hand");
    assert_eq!(causes.messages.len(), 3, "{:?}", causes.messages);
    let killed = &causes.messages[0];
    assert_eq!(killed.count, 4);
    assert_eq!(killed.message, "a worker died (signal: 9 (SIGKILL))");
    assert_eq!(killed.cause, "", "no traceback: grouped by its message");
    assert_eq!(
        (
            causes.messages[1].count,
            causes.messages[1].message.as_str()
        ),
        (2, "a worker died (exit status: 1)")
    );
    assert_eq!(
        causes.messages[2].message,
        "a worker exited (exit status: 0) with the block in hand"
    );
    // the first whole text is kept, id and figures included
    assert!(
        causes
            .first_traceback
            .as_deref()
            .unwrap()
            .starts_with("worker 3 died")
    );
}

#[test]
fn tasks_whose_retried_blocks_failed_alike_are_named() {
    let note = |task: TaskIndex, spatial_id: u64, last_attempt: bool, reason: &str| FailureNote {
        task,
        spatial_id,
        write_roi: Roi::from_slices(&[spatial_id as i64 * 10], &[10]).unwrap(),
        last_attempt,
        worker_id: Some(1),
        reason: reason.into(),
    };
    let outcome = |failures| RunOutcome {
        states: vec![],
        failures,
        failures_unnoted: 0,
        abandoned: vec![],
        unmanaged_clients: 0,
        workers_started: vec![],
        reports: vec![],
        stopped: None,
    };
    // task 0: the same error twice (tracebacks differ above the last line);
    // task 1: two different errors; task 2: retried and then done
    let run = outcome(vec![
        note(0, 7, false, "Traceback (a)\nValueError: bad roi"),
        note(1, 3, false, "KeyError: 'x'"),
        note(2, 5, false, "OSError: flaky"),
        note(0, 7, true, "Traceback (b)\nValueError: bad roi\n"),
        note(1, 3, true, "KeyError: 'y'"),
    ]);
    assert_eq!(run.failing_alike(), vec![0]);
    // one attempt only says nothing about a rerun
    let once = outcome(vec![note(0, 1, true, "ValueError: bad roi")]);
    assert!(once.failing_alike().is_empty());
}

#[test]
fn waiting_for_a_core_and_peak_memory_quantiles_are_summarised() {
    let mut agg = BlockAggregates::default();
    // 20 blocks of 0.38 s that waited 0.17 s for a core, 19 of them at
    // 100 MiB and one at 1 GiB; a block from a worker without schedstat
    // (NaN) counts in neither the wait nor its wall
    let block = |rss: u64, queued: f64| BlockStats {
        wall_seconds: 0.38,
        cpu_seconds: 0.2,
        peak_rss_bytes: rss,
        io_read_bytes: 0,
        io_write_bytes: 0,
        gpu_util_pct: f32::NAN,
        gpu_mem_bytes: 0,
        run_queue_seconds: queued,
    };
    for id in 0..19 {
        agg.record_success(None, Some(&block(100 << 20, 0.17)), false, id);
    }
    agg.record_success(None, Some(&block(1 << 30, 0.17)), false, 19);
    agg.record_success(None, Some(&block(100 << 20, f64::NAN)), false, 20);
    let s = agg.summary(&TaskState::default());
    assert_eq!(s.run_queue.n, 20);
    let share = s.run_queue_per_wall.unwrap();
    assert!((share - 0.17 / 0.38).abs() < 1e-9, "{share}");
    let p50 = s.peak_rss_p50.unwrap();
    assert!((100.0 * MIB..=102.3 * MIB).contains(&p50), "{p50}");
    // the 95th of 21 is the 20th: still a 100 MiB block; the max is 1 GiB
    let p95 = s.peak_rss_p95.unwrap();
    assert!((100.0 * MIB..=102.3 * MIB).contains(&p95), "{p95}");
    assert_eq!(s.peak_rss.max, (1u64 << 30) as f64);
    let none = BlockAggregates::default().summary(&TaskState::default());
    assert_eq!((none.run_queue_per_wall, none.peak_rss_p50), (None, None));
}

const MIB: f64 = 1048576.0;
