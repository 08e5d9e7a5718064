//! `daisy.forecast`: how long the rest of a run takes, how much memory a
//! worker needs and how many workers fit, from blocks measured for real
//! (a sample run, or the tracking store's history of earlier runs).
//!
//! Its parts: [`sample`] (which blocks a forecast runs: spread over the
//! volume), [`cost_model`] (a block's figures from its measured
//! neighbours in space) and [`simulate`] (the blocks still to run on the
//! workers the run would give them, in dependency order). This module
//! reads the measurements out of each task's store, puts the parts
//! together and gives the interval.
//!
//! ## The interval
//! The wall's low and high ends come from the total work of each task's
//! blocks still to run, scaled as a whole and simulated again:
//! * the sampling error of that total: the model's leave-one-out error
//!   over the measured blocks, as the standard error of a stratified
//!   sample of `n` of `N` blocks (`sd / sqrt(n) * sqrt(1 - n/N)` per
//!   block), [`Z`] = 2 of them either side (about 95 %);
//! * on the high side only, the blocks a sample cannot rule out: a sample
//!   of `n` that saw no block of some costly kind rules out, at 95 %, only
//!   that more than [`RULE_OF_THREE`]`/n` of the blocks are of that kind
//!   (the "rule of three"), so the high end lets that share of the blocks
//!   still to run take [`TAIL_FACTOR`] times the median measured block
//!   (or the costliest block's ratio to the median, when the sample saw a
//!   costlier one). Ten times is the spread measured between a block of
//!   background and a block of dense tissue in this field's pipelines; a
//!   rarer or costlier kind of block can still end a run past the high
//!   end, and the docs say so.
//!
//! The low end is never below every block still to run taking as long as
//! the cheapest measured block, from the sampling error alone. Both ends
//! are at least [`MIN_SPREAD`] from the forecast: the same blocks on the
//! same machine take that much more or less from one run to the next
//! (measured on the accuracy benchmark's uniform 60 ms blocks: the run's
//! wall 7.22–7.54 s over three runs, the forecast 7.02–7.95 s from three
//! samples of blocks whose round trips varied by 2 % within each), which
//! no spread within one sample shows.

pub mod cost_model;
pub mod eta;
pub mod sample;
pub mod simulate;

use self::cost_model::{Measured, SpatialModel};
use self::simulate::{SimBlock, makespan};
use crate::block::{BlockKey, TaskIndex};
use crate::dependency_graph::DependencyGraph;
use crate::error::DaisyError;
use crate::memory_budget::{MemoryBudget, mib};
use crate::pipeline::Pipeline;
use crate::run_report::read_last_report;
use crate::run_stats::percentiles;
use crate::task_spec::TaskSpec;
use crate::tracking_store::{RUNS_FILE, TrackingStore};
use crate::worker_count::PER_CORE;
use serde::Serialize;
use std::path::PathBuf;

/// Standard errors either side of the forecast for its interval.
pub const Z: f64 = 2.0;
/// The share of blocks a sample of `n` that saw none of a kind leaves
/// possible at 95 % is this over `n`.
pub const RULE_OF_THREE: f64 = 3.0;
/// How much costlier than the median an unseen kind of block is allowed to
/// be on the interval's high side.
pub const TAIL_FACTOR: f64 = 10.0;

/// The least relative distance of the interval's ends from the forecast.
pub const MIN_SPREAD: f64 = 0.10;

/// What a forecast knows of one task before it is made.
#[derive(Clone, Debug)]
pub struct TaskInput {
    /// The task's tracking store (measured blocks, done marks, its last
    /// run's start-up and end); None: the task has none, nothing measured.
    pub store: Option<PathBuf>,
    /// Workers the run would give it.
    pub workers: u32,
    /// Forecast every block, done or not (the next run after a reset).
    pub whole: bool,
    /// A SHA-256 of the block function's code that will run: blocks
    /// measured by runs that recorded another are left out. None: every
    /// measured block counts.
    pub function_sha256: Option<String>,
}

/// One task's forecast.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TaskForecast {
    /// The task.
    pub task_id: String,
    /// Its blocks.
    pub blocks: u64,
    /// Blocks marked done (the run skips them).
    pub blocks_done: u64,
    /// Blocks still to run.
    pub blocks_left: u64,
    /// Blocks measured (history and sample) the model was made from.
    pub measured: u64,
    /// Workers it was forecast with.
    pub workers: u32,
    /// Median seconds a block keeps a worker busy (over every block,
    /// measured or predicted).
    pub block_seconds_p50: Option<f64>,
    /// The 95th percentile of that.
    pub block_seconds_p95: Option<f64>,
    /// Median peak resident memory of a block's worker, bytes.
    pub peak_rss_bytes_p50: Option<f64>,
    /// The 95th percentile of that.
    pub peak_rss_bytes_p95: Option<f64>,
    /// The largest.
    pub peak_rss_bytes_max: Option<f64>,
    /// CPU seconds of the blocks still to run.
    pub cpu_seconds: Option<f64>,
    /// Seconds from the run's start until its last block ends.
    pub wall_seconds: Option<f64>,
    /// Workers that fit this node's cores and memory budget.
    pub recommended_workers: Option<u32>,
    /// Why that many, in words.
    pub recommended_reason: Option<String>,
}

/// A forecast of the rest of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Forecast {
    /// Seconds the rest of the run takes; None where a task has no
    /// measured block.
    pub wall_seconds: Option<f64>,
    /// The low end of its interval.
    pub wall_seconds_low: Option<f64>,
    /// The high end.
    pub wall_seconds_high: Option<f64>,
    /// CPU seconds of the blocks still to run.
    pub cpu_seconds: Option<f64>,
    /// Node hours: the wall on one node, in hours.
    pub node_hours: Option<f64>,
    /// The task whose blocks end last: what bounds the wall.
    pub bounding_task: Option<String>,
    /// Seconds from a run's start to its first block, measured on the last
    /// run (workers starting).
    pub start_seconds: f64,
    /// Seconds from a run's last block to its end (workers leaving).
    pub end_seconds: f64,
    /// Cores of this node.
    pub cores: u32,
    /// The memory budget the workers fit in, bytes.
    pub memory_budget_bytes: u64,
    /// Where the budget came from.
    pub memory_budget_source: String,
    /// Per task, in pipeline order.
    pub tasks: Vec<TaskForecast>,
    /// What the forecast could not use or assumed, in words.
    pub notes: Vec<String>,
}

/// One task's measurements and what is left of it.
struct TaskData {
    model: SpatialModel,
    /// Per block (placement-grid index): None when done.
    left: Vec<bool>,
    /// Start-up and end of its last run, seconds.
    last_run: Option<(f64, f64)>,
    /// Measured blocks left out: measured by another block function.
    other_code: u64,
}

fn read_task(
    graph: &DependencyGraph,
    t: TaskIndex,
    input: &TaskInput,
) -> Result<TaskData, DaisyError> {
    let grid = graph.grid(t);
    let n = grid.num_blocks();
    let mut data = TaskData {
        model: SpatialModel::new(Vec::new()),
        left: vec![true; n as usize],
        last_run: None,
        other_code: 0,
    };
    let Some(path) = input.store.as_deref().filter(|p| TrackingStore::exists(p)) else {
        return Ok(data);
    };
    let spec = graph.pipeline().spec(t);
    let tracked = TrackingStore::has_stats_arrays(path);
    let store = TrackingStore::open_unlocked(path, spec, tracked)?;
    // figures from before the last reset are of code since changed
    let since = crate::run_report::read_last_reset(&path.join(RUNS_FILE))
        .ok()
        .flatten()
        .unwrap_or(f64::NEG_INFINITY);
    // and so are those of runs that recorded another function's code
    let other_code: Vec<(f64, f64)> = match &input.function_sha256 {
        Some(current) => crate::run_report::read_history(&path.join(RUNS_FILE))
            .map(|h| {
                h.reports
                    .iter()
                    .filter(|r| {
                        r.report
                            .function_sha256
                            .as_ref()
                            .is_some_and(|f| f != current)
                    })
                    .map(|r| (r.report.started_at, r.report.finished_at))
                    .collect()
            })
            .unwrap_or_default(),
        None => Vec::new(),
    };
    let mut measured = Vec::new();
    for i in 0..n {
        let block = grid.block(i);
        let record = store.record(&block);
        if record.done && !input.whole {
            data.left[i as usize] = false;
        }
        if record.sent_at.is_some_and(|s| s < since) {
            continue;
        }
        if record.stats.is_some()
            && record
                .sent_at
                .is_some_and(|s| other_code.iter().any(|&(a, b)| s >= a && s <= b))
        {
            data.other_code += 1;
            continue;
        }
        if let (Some(stats), Some(seconds)) = (&record.stats, record.busy_seconds()) {
            measured.push(Measured {
                cell: block.position,
                seconds,
                cpu_seconds: stats.cpu_seconds,
                peak_rss_bytes: stats.peak_rss_bytes as f64,
            });
        }
    }
    data.model = SpatialModel::new(measured);
    if let Ok(Some(report)) = read_last_report(&path.join(RUNS_FILE))
        && let (Some(first), Some(last)) = (report.first_block_at, report.last_block_at)
    {
        data.last_run = Some((
            (first - report.started_at).max(0.0),
            (report.finished_at - last).max(0.0),
        ));
    }
    Ok(data)
}

/// Workers of a task that fit `cores` cores and `budget`: as many as the
/// budget holds at the 95th-percentile block's peak memory, and as many
/// as the cores keep busy at the blocks' CPU share of their time (at most
/// [`PER_CORE`] a core, as `max_workers="auto"`), and no more than there
/// are blocks left.
fn recommend(
    cores: u32,
    budget: &MemoryBudget,
    peak_p95: f64,
    cpu_share: f64,
    blocks_left: u64,
) -> (u32, String) {
    let by_memory = if peak_p95 > 0.0 {
        ((budget.bytes as f64 / peak_p95).floor() as u64).max(1)
    } else {
        u64::MAX
    };
    let share = cpu_share.max(1.0 / f64::from(PER_CORE));
    let by_cores = ((f64::from(cores.max(1)) / share).floor() as u64).max(1);
    let count = by_memory.min(by_cores).min(blocks_left.max(1));
    let count32 = u32::try_from(count).unwrap_or(u32::MAX);
    let why = if count == blocks_left.max(1) && count < by_memory.min(by_cores) {
        format!("one a block: {blocks_left} left")
    } else if by_memory <= by_cores {
        format!(
            "the {} budget ({}) holds {by_memory} at the 95th-percentile block's {}",
            mib(budget.bytes),
            budget.source,
            mib(peak_p95 as u64)
        )
    } else {
        format!(
            "{cores} core{} at {:.0} % CPU a block keep {by_cores} busy",
            if cores == 1 { "" } else { "s" },
            cpu_share * 100.0
        )
    };
    (count32, why)
}

/// The scale of a task's total work at the interval's low and high ends
/// (see the module's doc), from its model and the predicted seconds of the
/// blocks still to run.
fn interval_scale(model: &SpatialModel, total_blocks: u64, left_seconds: &[f64]) -> (f64, f64) {
    let n = model.len() as f64;
    let work: f64 = left_seconds.iter().sum();
    if work <= 0.0 || left_seconds.is_empty() {
        return (1.0, 1.0);
    }
    let left = left_seconds.len() as f64;
    let seconds: Vec<f64> = model.measured().iter().map(|m| m.seconds).collect();
    let residuals = model.loo_residuals();
    let se = if residuals.len() >= 2 {
        let mean = residuals.iter().sum::<f64>() / residuals.len() as f64;
        let var = residuals.iter().map(|r| (r - mean).powi(2)).sum::<f64>()
            / (residuals.len() - 1) as f64;
        let fpc = (1.0 - n / total_blocks.max(1) as f64).max(0.0).sqrt();
        left * var.sqrt() / n.sqrt() * fpc
    } else {
        work
    };
    let q = percentiles(seconds.iter().copied(), &[0.0, 50.0, 100.0]).unwrap_or(vec![0.0; 3]);
    let (min, median, max) = (q[0], q[1], q[2]);
    let factor = if median > 0.0 {
        TAIL_FACTOR.max(max / median)
    } else {
        TAIL_FACTOR
    };
    let tail_blocks = (RULE_OF_THREE / n.max(1.0) * left).ceil().min(left);
    let tail = tail_blocks * (factor - 1.0) * median;
    let low = (work - Z * se).max(left * min).max(0.0);
    let high = work + Z * se + tail;
    (
        (low / work).min(1.0 - MIN_SPREAD),
        (high / work).max(1.0 + MIN_SPREAD),
    )
}

/// Forecast the rest of a run of `specs` (any order; upstream tasks
/// included) with what `inputs` (by task id) say: each task's measured
/// blocks and done marks, on `cores` cores within `budget`.
pub fn forecast(
    specs: Vec<TaskSpec>,
    inputs: &std::collections::HashMap<String, TaskInput>,
    cores: u32,
    budget: &MemoryBudget,
) -> Result<Forecast, DaisyError> {
    let graph = DependencyGraph::new(Pipeline::new(specs)?);
    let tasks = graph.pipeline().len();
    let mut notes = Vec::new();
    let mut data = Vec::with_capacity(tasks);
    let mut workers = Vec::with_capacity(tasks);
    for t in 0..tasks {
        let id = &graph.pipeline().spec(t as TaskIndex).task_id;
        let input = inputs.get(id).cloned().unwrap_or(TaskInput {
            store: None,
            workers: 1,
            whole: false,
            function_sha256: None,
        });
        workers.push(input.workers.max(1));
        let d = read_task(&graph, t as TaskIndex, &input)?;
        if d.left.is_empty() {
            notes.push(format!(
                "task {id:?} has no blocks: {}",
                graph.pipeline().spec(t as TaskIndex).why_no_blocks()
            ));
        }
        if d.other_code > 0 {
            notes.push(format!(
                "task {id:?}: {} measured block{} left out, measured with another version of \
                 its block function",
                d.other_code,
                if d.other_code == 1 { "" } else { "s" }
            ));
        }
        if d.model.is_empty() && d.left.iter().any(|&l| l) {
            notes.push(format!(
                "task {id:?}: no measured block (no sample and no history with resource \
                 tracking), so no time or memory for it"
            ));
        }
        data.push(d);
    }
    // the blocks still to run, their predicted figures, and what they wait for
    let mut sim_index: Vec<Vec<Option<usize>>> = Vec::with_capacity(tasks);
    let mut blocks: Vec<SimBlock> = Vec::new();
    let mut figures: Vec<(f64, f64, f64)> = Vec::new();
    let mut per_task_all: Vec<Vec<(f64, f64)>> = vec![Vec::new(); tasks];
    for (t, d) in data.iter().enumerate() {
        let grid = graph.grid(t as TaskIndex);
        let mut index = vec![None; d.left.len()];
        for i in 0..grid.num_blocks() {
            let block = grid.block(i);
            let p = d.model.predict(&block.position);
            if let Some(p) = p {
                per_task_all[t].push((p.seconds, p.peak_rss_bytes));
            }
            if d.left[i as usize] {
                index[i as usize] = Some(blocks.len());
                let p = p.unwrap_or(cost_model::Predicted {
                    seconds: 0.0,
                    cpu_seconds: 0.0,
                    peak_rss_bytes: 0.0,
                });
                blocks.push(SimBlock {
                    task: t,
                    seconds: p.seconds,
                    upstream: Vec::new(),
                });
                figures.push((p.seconds, p.cpu_seconds, p.peak_rss_bytes));
            }
        }
        sim_index.push(index);
    }
    let mut keys: Vec<BlockKey> = Vec::new();
    for t in 0..tasks {
        let grid = graph.grid(t as TaskIndex);
        for i in 0..grid.num_blocks() {
            let Some(me) = sim_index[t][i as usize] else {
                continue;
            };
            graph.upstream(&grid.block(i), &mut keys);
            blocks[me].upstream = keys
                .drain(..)
                .filter_map(|k| {
                    sim_index
                        .get(k.task as usize)?
                        .get(k.index as usize)
                        .copied()
                        .flatten()
                })
                .collect();
        }
    }
    let known = data
        .iter()
        .all(|d| !d.model.is_empty() || !d.left.iter().any(|&l| l));
    let start = data
        .iter()
        .filter_map(|d| d.last_run.map(|r| r.0))
        .min_by(f64::total_cmp);
    let end = data
        .iter()
        .filter_map(|d| d.last_run.map(|r| r.1))
        .max_by(f64::total_cmp);
    if start.is_none() && blocks.iter().any(|_| true) {
        notes.push(
            "no earlier run in the stores: the workers' start-up and teardown are left out"
                .to_string(),
        );
    }
    let (start, end) = (start.unwrap_or(0.0), end.unwrap_or(0.0));
    let point = makespan(&blocks, &workers);
    // the interval: each task's work scaled as a whole, simulated again
    let mut low_blocks = blocks.clone();
    let mut high_blocks = blocks.clone();
    for (t, d) in data.iter().enumerate() {
        let left: Vec<f64> = blocks
            .iter()
            .filter(|b| b.task == t)
            .map(|b| b.seconds)
            .collect();
        let (lo, hi) = interval_scale(&d.model, graph.grid(t as TaskIndex).num_blocks(), &left);
        for (b, (l, h)) in blocks
            .iter()
            .zip(low_blocks.iter_mut().zip(high_blocks.iter_mut()))
        {
            if b.task == t {
                l.seconds = b.seconds * lo;
                h.seconds = b.seconds * hi;
            }
        }
    }
    let low = makespan(&low_blocks, &workers);
    let high = makespan(&high_blocks, &workers);
    let fixed = |m: f64| {
        if blocks.is_empty() {
            0.0
        } else {
            start + m + end
        }
    };
    let mut task_forecasts = Vec::with_capacity(tasks);
    for (t, d) in data.iter().enumerate() {
        let grid = graph.grid(t as TaskIndex);
        let left = d.left.iter().filter(|&&l| l).count() as u64;
        let all = &per_task_all[t];
        let secs = percentiles(all.iter().map(|a| a.0), &[50.0, 95.0]);
        let rss = percentiles(all.iter().map(|a| a.1), &[50.0, 95.0, 100.0]);
        let cpu: f64 = blocks
            .iter()
            .zip(&figures)
            .filter(|(b, _)| b.task == t)
            .map(|(_, f)| f.1)
            .sum();
        let measured = d.model.measured();
        let (cpu_m, wall_m) = measured
            .iter()
            .fold((0.0, 0.0), |(c, w), m| (c + m.cpu_seconds, w + m.seconds));
        let recommended = rss.as_ref().map(|r| {
            recommend(
                cores,
                budget,
                r[1],
                if wall_m > 0.0 { cpu_m / wall_m } else { 1.0 },
                left,
            )
        });
        let has_model = !d.model.is_empty();
        task_forecasts.push(TaskForecast {
            task_id: grid_task_id(&graph, t),
            blocks: grid.num_blocks(),
            blocks_done: grid.num_blocks() - left,
            blocks_left: left,
            measured: d.model.len() as u64,
            workers: workers[t],
            block_seconds_p50: secs.as_ref().map(|s| s[0]),
            block_seconds_p95: secs.as_ref().map(|s| s[1]),
            peak_rss_bytes_p50: rss.as_ref().map(|r| r[0]),
            peak_rss_bytes_p95: rss.as_ref().map(|r| r[1]),
            peak_rss_bytes_max: rss.as_ref().map(|r| r[2]),
            cpu_seconds: has_model.then_some(cpu + 0.0),
            wall_seconds: (has_model || left == 0).then(|| {
                if left == 0 {
                    0.0
                } else {
                    start + point.task_end[t] + end
                }
            }),
            recommended_workers: recommended.as_ref().map(|r| r.0),
            recommended_reason: recommended.map(|r| r.1),
        });
    }
    let bounding = (!blocks.is_empty())
        .then(|| {
            (0..tasks)
                .max_by(|&a, &b| point.task_end[a].total_cmp(&point.task_end[b]))
                .map(|t| grid_task_id(&graph, t))
        })
        .flatten();
    let wall = known.then(|| fixed(point.makespan));
    Ok(Forecast {
        wall_seconds: wall,
        wall_seconds_low: known.then(|| fixed(low.makespan)),
        wall_seconds_high: known.then(|| fixed(high.makespan)),
        // (+ 0.0: an empty float sum is -0.0, printed "-0.00")
        cpu_seconds: known.then(|| figures.iter().map(|f| f.1).sum::<f64>() + 0.0),
        node_hours: wall.map(|w| w / 3600.0),
        bounding_task: bounding,
        start_seconds: start,
        end_seconds: end,
        cores,
        memory_budget_bytes: budget.bytes,
        memory_budget_source: budget.source.to_string(),
        tasks: task_forecasts,
        notes,
    })
}

/// The next run of the task whose store is at `path`, from its history
/// alone (`daisy forecast PATH`): the blocks not done, or every block when
/// all are done (the run after a reset: said in a note), on `workers`
/// workers (None: as many as its last run started, else 1).
pub fn forecast_store(
    path: &std::path::Path,
    workers: Option<u32>,
    cores: u32,
    budget: &MemoryBudget,
) -> Result<Forecast, DaisyError> {
    let spec = crate::tracking_store::store_spec(path)?;
    let status = crate::tracking_store::store_status(path)?;
    let whole = status.total.is_some_and(|t| status.done >= t);
    let last = read_last_report(&path.join(RUNS_FILE)).ok().flatten();
    let workers = workers
        .or_else(|| {
            last.as_ref()
                .map(|r| u32::try_from(r.workers.count).unwrap_or(u32::MAX))
                .filter(|&n| n > 0)
        })
        .unwrap_or(1);
    let id = spec.task_id.clone();
    let inputs = std::collections::HashMap::from([(
        id.clone(),
        TaskInput {
            store: Some(path.to_path_buf()),
            workers,
            whole,
            // the next run runs what the last one ran
            function_sha256: last.as_ref().and_then(|r| r.function_sha256.clone()),
        },
    )]);
    let mut fc = forecast(vec![spec], &inputs, cores, budget)?;
    if whole {
        fc.notes.push(format!(
            "every block of {id:?} is done: this is the run after a reset (task.reset()), \
             all its blocks"
        ));
    }
    Ok(fc)
}

fn grid_task_id(graph: &DependencyGraph, t: usize) -> String {
    graph.pipeline().spec(t as TaskIndex).task_id.clone()
}

/// The blocks a forecast runs for real, per task (placement-grid indices,
/// by task id): `n` a task spread over its volume, none already measured
/// or done, and for a downstream block the upstream blocks it reads that
/// are not done, so what it reads exists.
pub fn sample_blocks(
    specs: Vec<TaskSpec>,
    stores: &std::collections::HashMap<String, PathBuf>,
    n: u64,
) -> Result<std::collections::HashMap<String, Vec<u64>>, DaisyError> {
    let graph = DependencyGraph::new(Pipeline::new(specs)?);
    let tasks = graph.pipeline().len();
    let mut data = Vec::with_capacity(tasks);
    for t in 0..tasks {
        let id = grid_task_id(&graph, t);
        let input = TaskInput {
            store: stores.get(&id).cloned(),
            workers: 1,
            whole: false,
            function_sha256: None,
        };
        data.push(read_task(&graph, t as TaskIndex, &input)?);
    }
    let mut chosen: Vec<std::collections::BTreeSet<u64>> = vec![Default::default(); tasks];
    for (t, d) in data.iter().enumerate() {
        let grid = graph.grid(t as TaskIndex);
        let measured: std::collections::HashSet<u64> = d
            .model
            .measured()
            .iter()
            .map(|m| grid.indexer().flat(&m.cell))
            .collect();
        let wanted = n.saturating_sub(measured.len() as u64);
        let taken =
            |f: u64| measured.contains(&f) || !d.left.get(f as usize).copied().unwrap_or(false);
        chosen[t].extend(sample::spread_sample(&grid.grid_shape(), wanted, &taken));
    }
    // upstream closure: downstream tasks come after their upstream ones in
    // pipeline order, so walking it backwards reaches every level
    let mut keys = Vec::new();
    for t in (0..tasks).rev() {
        let grid = graph.grid(t as TaskIndex);
        let mine: Vec<u64> = chosen[t].iter().copied().collect();
        for i in mine {
            graph.upstream(&grid.block(i), &mut keys);
            for k in keys.drain(..) {
                let u = k.task as usize;
                if u != t && data[u].left.get(k.index as usize).copied().unwrap_or(false) {
                    chosen[u].insert(k.index);
                }
            }
        }
    }
    Ok((0..tasks)
        .map(|t| (grid_task_id(&graph, t), chosen[t].iter().copied().collect()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Coord;
    use crate::memory_budget::BudgetSource;

    fn model(seconds: &[f64]) -> SpatialModel {
        SpatialModel::new(
            seconds
                .iter()
                .enumerate()
                .map(|(i, &s)| Measured {
                    cell: Coord::new(&[i as i64 * 20]).unwrap(),
                    seconds: s,
                    cpu_seconds: s,
                    peak_rss_bytes: 1e8,
                })
                .collect(),
        )
    }

    #[test]
    fn a_flat_sample_gives_the_least_spread_below_and_the_rule_of_three_above() {
        let (lo, hi) = interval_scale(&model(&[0.06; 20]), 400, &[0.06; 380]);
        assert!((lo - (1.0 - MIN_SPREAD)).abs() < 1e-9, "{lo}");
        // 3/20 of 380 blocks (57) at 10 x the median: 1 + 57 * 9 / 380
        assert!((hi - (1.0 + 57.0 * 9.0 / 380.0)).abs() < 1e-9, "{hi}");
    }

    #[test]
    fn a_heavy_tailed_sample_widens_both_ends_and_a_bigger_sample_narrows_them() {
        let mut seconds = vec![0.05; 19];
        seconds.push(1.5);
        let left = vec![0.1225; 380];
        let (lo, hi) = interval_scale(&model(&seconds), 400, &left);
        // the low end stops at every block as cheap as the cheapest seen
        assert!((lo - 0.05 / 0.1225).abs() < 1e-9, "{lo}");
        assert!(hi > 3.0, "{hi}");
        let (_, hi_small) = interval_scale(&model(&[0.06; 5]), 400, &[0.06; 395]);
        let (_, hi_big) = interval_scale(&model(&[0.06; 100]), 400, &[0.06; 300]);
        assert!(hi_small > hi_big, "{hi_small} {hi_big}");
        // a whole volume measured leaves the run-to-run spread only
        let (lo_all, hi_all) = interval_scale(&model(&[0.06; 400]), 400, &[0.06; 400]);
        assert!((lo_all - (1.0 - MIN_SPREAD)).abs() < 1e-9, "{lo_all}");
        assert!((hi_all - (1.0 + MIN_SPREAD)).abs() < 1e-9, "{hi_all}");
    }

    #[test]
    fn recommended_workers_are_bounded_by_memory_cores_and_blocks() {
        let budget = MemoryBudget {
            bytes: 3 << 30,
            source: BudgetSource::Declared,
        };
        // 1 GiB blocks: three fit, whatever the cores
        let (n, why) = recommend(16, &budget, (1u64 << 30) as f64, 1.0, 100);
        assert_eq!(n, 3);
        assert!(why.contains("95th-percentile"), "{why}");
        // small blocks that compute all the time: one a core
        assert_eq!(recommend(4, &budget, 1e8, 1.0, 100).0, 4);
        // blocks that mostly wait: PER_CORE a core
        assert_eq!(recommend(4, &budget, 1e8, 0.05, 100).0, 4 * PER_CORE);
        // no more than there are blocks left
        assert_eq!(recommend(4, &budget, 1e8, 0.05, 2).0, 2);
    }
}
