//! `daisy._daisy`: the PyO3 bindings of `daisy-core`.
//!
//! This crate only converts: Python geometry to core geometry and back,
//! core errors to Python exceptions (in `errors`, one place), Python
//! callables into the core's hooks. Every decision (which block runs, what
//! counts as done) is made in `daisy-core`.

use pyo3::prelude::*;

mod convert;
mod errors;
mod interpreter;
mod py_block;
mod py_block_stats;
mod py_client;
mod py_dependency_graph;
mod py_forecast;
mod py_live;
mod py_logging;
mod py_profile;
mod py_run_result;
mod py_scheduler;
mod py_server;
mod py_stats;
mod py_task_options;
mod py_task_spec;
mod py_task_state;
mod py_tick;
mod py_tracking;

/// Spatial id of a grid position (daisy 1.x's Cantor numbering).
#[pyfunction]
fn cantor_number(position: Vec<i64>) -> PyResult<u64> {
    if position.iter().any(|&c| c < 0) {
        return Err(crate::errors::bad_value(
            "position: grid coordinates must be non-negative",
        ));
    }
    Ok(daisy_core::block_id::cantor_number(&position))
}

/// Reset a task's tracking store (only a directory that is one); with
/// `keep_history` its `runs.jsonl` stays, with a reset record.
#[pyfunction]
#[pyo3(signature = (path, keep_history = true))]
fn reset_tracking(path: std::path::PathBuf, keep_history: bool) -> PyResult<()> {
    use errors::IntoPyResult;
    daisy_core::tracking_store::TrackingStore::reset(&path, keep_history).py()
}

/// Make the tracking store at `path` the store of `spec`'s task, keeping
/// every mark (metadata a purge deleted is written again; see
/// `TrackingStore::adopt`).
#[pyfunction]
fn adopt_tracking(
    path: std::path::PathBuf,
    spec: PyRef<'_, py_task_spec::PyTaskSpec>,
) -> PyResult<()> {
    use errors::IntoPyResult;
    daisy_core::tracking_store::TrackingStore::adopt(&path, &spec.spec).py()
}

/// Write a worker payload to `path` as a new private file (0600, in a
/// private directory); its SHA-256, for the workers' context.
#[pyfunction]
fn write_payload(path: std::path::PathBuf, payload: &[u8]) -> PyResult<String> {
    use errors::IntoPyResult;
    daisy_core::private_files::write_private(&path, payload).py()
}

/// Read the payload at `path`, refused unless it is a private file of this
/// user's whose SHA-256 is `sha256`.
#[pyfunction]
fn read_payload(py: Python<'_>, path: std::path::PathBuf, sha256: &str) -> PyResult<Py<PyAny>> {
    use errors::IntoPyResult;
    let bytes = daisy_core::private_files::read_payload(&path, sha256).py()?;
    Ok(pyo3::types::PyBytes::new(py, &bytes).into_any().unbind())
}

/// `liveness_timeout` (seconds) checked by the core's rule: at least the
/// minimum and finite (`ValueError` naming it otherwise).
#[pyfunction]
fn validated_liveness_timeout(liveness_timeout: f64) -> PyResult<f64> {
    use errors::IntoPyResult;
    Ok(daisy_core::liveness::timeout_from_secs(liveness_timeout)
        .py()?
        .as_secs_f64())
}

/// `task_id` checked by the core's rule (`TaskSpec`'s): `ValueError`
/// naming it and a usable id otherwise.
#[pyfunction]
fn validated_task_id(task_id: String) -> PyResult<String> {
    use errors::IntoPyResult;
    daisy_core::task_id::check_task_id(&task_id).py()?;
    Ok(task_id)
}

/// `workers_per_job` checked by the core's rule (`server::jobs`): a whole
/// number from 1 to the most one job may host (`ValueError` naming it).
#[pyfunction]
fn validated_workers_per_job(workers_per_job: i64) -> PyResult<u32> {
    use errors::IntoPyResult;
    daisy_core::server::jobs::check_workers_per_job(workers_per_job).py()
}

/// The bytes a job's node launcher opens its connection with (a framed
/// `LauncherHello`, see `daisy_core::protocol`).
#[pyfunction]
#[pyo3(signature = (token, job, batch_job_id=None))]
fn launcher_hello(
    py: Python<'_>,
    token: &str,
    job: u32,
    batch_job_id: Option<&str>,
) -> PyResult<Py<PyAny>> {
    use errors::IntoPyResult;
    let frame = daisy_core::protocol::launcher_hello_frame(token, job, batch_job_id)
        .map_err(|e| daisy_core::DaisyError::invalid("token", e.to_string()))
        .py()?;
    Ok(pyo3::types::PyBytes::new(py, &frame).into_any().unbind())
}

/// Have the kernel watch the peer of the TCP socket `fd` as every daisy
/// connection is watched (`daisy_core::liveness::watch`): a job's launcher
/// whose driver host died leaves after `liveness_timeout` seconds.
#[pyfunction]
fn watch_liveness(fd: i32, liveness_timeout: f64) -> PyResult<()> {
    use errors::IntoPyResult;
    let timeout = daisy_core::liveness::timeout_from_secs(liveness_timeout).py()?;
    // SAFETY: the caller's socket object owns `fd` and keeps it open for
    // the duration of this call; it is only borrowed here
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    daisy_core::liveness::watch(&fd, timeout).map_err(PyErr::from)
}

/// In a worker process leading its own group: the whole group is killed
/// when the worker's parent dies (see `daisy_core::process_group`).
#[pyfunction]
fn group_dies_with_parent() -> PyResult<()> {
    daisy_core::process_group::group_dies_with_parent().map_err(PyErr::from)
}

#[pymodule]
fn _daisy(m: &Bound<'_, PyModule>) -> PyResult<()> {
    py_logging::install();
    m.add_class::<py_block::PyBlock>()?;
    m.add_class::<py_task_spec::PyTaskSpec>()?;
    m.add_class::<py_task_state::PyTaskState>()?;
    m.add_class::<py_scheduler::PyScheduler>()?;
    m.add_class::<py_dependency_graph::PyDependencyGraph>()?;
    m.add_class::<py_dependency_graph::PyLevelWalk>()?;
    m.add_class::<py_client::PyClient>()?;
    m.add_class::<py_block_stats::PyBlockStats>()?;
    m.add_class::<py_profile::ProfileBlock>()?;
    m.add_class::<py_tracking::PyTrackingStore>()?;
    m.add_class::<py_tracking::PyStoreStatus>()?;
    m.add_class::<py_task_options::PyTaskOptions>()?;
    m.add_class::<py_server::PyTaskConfig>()?;
    m.add_class::<py_server::PyRunConfig>()?;
    m.add_class::<py_live::PyLiveDetail>()?;
    m.add_class::<py_run_result::PyRunResult>()?;
    m.add_class::<py_run_result::PyFailure>()?;
    m.add_class::<py_run_result::PyFailedBlock>()?;
    m.add_class::<py_tick::PyTick>()?;
    m.add_function(wrap_pyfunction!(py_server::run_distributed, m)?)?;
    m.add_function(wrap_pyfunction!(py_server::check_run, m)?)?;
    m.add_function(wrap_pyfunction!(interpreter::at_interpreter_exit, m)?)?;
    m.add_function(wrap_pyfunction!(cantor_number, m)?)?;
    m.add_function(wrap_pyfunction!(py_task_spec::validated_roi, m)?)?;
    m.add_function(wrap_pyfunction!(py_task_spec::pipeline_order, m)?)?;
    m.add_function(wrap_pyfunction!(py_task_spec::uncovered_reads, m)?)?;
    m.add_function(wrap_pyfunction!(reset_tracking, m)?)?;
    m.add_function(wrap_pyfunction!(adopt_tracking, m)?)?;
    m.add_function(wrap_pyfunction!(write_payload, m)?)?;
    m.add_function(wrap_pyfunction!(read_payload, m)?)?;
    m.add_function(wrap_pyfunction!(validated_liveness_timeout, m)?)?;
    m.add_function(wrap_pyfunction!(validated_task_id, m)?)?;
    m.add_function(wrap_pyfunction!(group_dies_with_parent, m)?)?;
    m.add_function(wrap_pyfunction!(validated_workers_per_job, m)?)?;
    m.add_function(wrap_pyfunction!(launcher_hello, m)?)?;
    m.add_function(wrap_pyfunction!(watch_liveness, m)?)?;
    m.add_function(wrap_pyfunction!(py_tracking::read_tracking_array, m)?)?;
    m.add_function(wrap_pyfunction!(py_tracking::history_file, m)?)?;
    m.add_function(wrap_pyfunction!(py_tracking::store_status, m)?)?;
    m.add_function(wrap_pyfunction!(py_tracking::find_tracking, m)?)?;
    m.add_function(wrap_pyfunction!(py_tracking::read_history, m)?)?;
    m.add_function(wrap_pyfunction!(py_tracking::read_last_report, m)?)?;
    m.add_function(wrap_pyfunction!(py_tracking::check_distinct_stores, m)?)?;
    m.add_function(wrap_pyfunction!(py_stats::store_wall_percentiles, m)?)?;
    m.add_function(wrap_pyfunction!(py_stats::compare_to_baseline, m)?)?;
    m.add_function(wrap_pyfunction!(py_stats::common_blocks, m)?)?;
    m.add_function(wrap_pyfunction!(py_forecast::forecast, m)?)?;
    m.add_function(wrap_pyfunction!(py_forecast::forecast_sample, m)?)?;
    m.add_function(wrap_pyfunction!(py_forecast::forecast_store, m)?)?;
    m.add(
        "LayoutMismatch",
        m.py().get_type::<errors::LayoutMismatch>(),
    )?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
