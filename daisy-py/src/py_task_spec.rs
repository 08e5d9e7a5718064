//! `daisy._daisy.TaskSpec`: the validated geometry of a task, built by the
//! Python `daisy.Task` at construction so bad input fails early, and the
//! block-grid facts the Python side reports (`num_blocks`,
//! `block_grid_shape`).

use crate::convert::{coord_to_py, roi_from_py, roi_to_py};
use crate::errors::IntoPyResult;
use daisy_core::block_grid::BlockGrid;
use daisy_core::{Fit, TaskSpec};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// Validated scheduling geometry of one task.
#[pyclass(name = "TaskSpec", module = "daisy._daisy", frozen)]
pub struct PyTaskSpec {
    pub(crate) spec: TaskSpec,
}

#[pymethods]
impl PyTaskSpec {
    #[new]
    #[pyo3(signature = (task_id, total_roi, read_roi, write_roi, fit="valid", read_write_conflict=true, max_retries=2, upstream=Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        task_id: &str,
        total_roi: &Bound<'_, PyAny>,
        read_roi: &Bound<'_, PyAny>,
        write_roi: &Bound<'_, PyAny>,
        fit: &str,
        read_write_conflict: bool,
        max_retries: u32,
        upstream: Vec<String>,
    ) -> PyResult<Self> {
        let total = roi_from_py(total_roi, "total_roi")?;
        let read = roi_from_py(read_roi, "read_roi")?;
        let write = roi_from_py(write_roi, "write_roi")?;
        let fit: Fit = fit.parse().py()?;
        let spec = TaskSpec::new(
            task_id,
            total,
            read,
            write,
            fit,
            read_write_conflict,
            max_retries,
            upstream,
        )
        .py()?;
        BlockGrid::check_ids(&spec).py()?;
        Ok(Self { spec })
    }

    /// The same spec with `upstream` as its upstream task ids (pipelines add
    /// edges to tasks they compose).
    fn with_upstream(&self, upstream: Vec<String>) -> Self {
        let mut spec = self.spec.clone();
        spec.upstream = upstream;
        Self { spec }
    }

    /// Upstream task ids.
    #[getter]
    fn upstream(&self) -> Vec<String> {
        self.spec.upstream.clone()
    }

    /// The task id.
    #[getter]
    fn task_id(&self) -> &str {
        &self.spec.task_id
    }

    /// Number of blocks the task has.
    #[getter]
    fn num_blocks(&self) -> u64 {
        BlockGrid::new(0, &self.spec).num_blocks()
    }

    /// Blocks per axis, anchored at the total write ROI.
    #[getter]
    fn block_grid_shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        coord_to_py(py, &BlockGrid::new(0, &self.spec).grid_shape())
    }

    /// Number of levels (blocks of one level never conflict).
    #[getter]
    fn num_levels(&self) -> usize {
        BlockGrid::new(0, &self.spec).num_levels()
    }

    /// Whether a block reading `read_roi` and writing `write_roi` (as laid
    /// out, before a cut) belongs to the task under its fit (the core's
    /// rule, which the block grid follows).
    fn includes(
        &self,
        read_roi: &Bound<'_, PyAny>,
        write_roi: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        Ok(self.spec.includes(
            &roi_from_py(read_roi, "read_roi")?,
            &roi_from_py(write_roi, "write_roi")?,
        ))
    }

    /// `(read_roi, write_roi)` of a block cut to the task as `shrink` cuts
    /// it, or None when it writes nothing inside the total write ROI.
    fn cut_to_task<'py>(
        &self,
        py: Python<'py>,
        read_roi: &Bound<'py, PyAny>,
        write_roi: &Bound<'py, PyAny>,
    ) -> PyResult<Option<(Bound<'py, PyAny>, Bound<'py, PyAny>)>> {
        let cut = self.spec.cut_to_task(
            &roi_from_py(read_roi, "read_roi")?,
            &roi_from_py(write_roi, "write_roi")?,
        );
        cut.map(|(r, w)| Ok((roi_to_py(py, &r)?, roi_to_py(py, &w)?)))
            .transpose()
    }

    /// What of the total write ROI no block writes (a `valid` fit that
    /// drops the last partial blocks), with the fix; None when covered.
    fn coverage_note(&self) -> Option<String> {
        self.spec.coverage_note()
    }

    /// Why the task has no blocks, in words, with the fix.
    fn why_no_blocks(&self) -> String {
        self.spec.why_no_blocks()
    }

    fn __repr__(&self) -> String {
        format!(
            "TaskSpec({:?}, total_roi={}, read_roi={}, write_roi={}, fit={}, read_write_conflict={})",
            self.spec.task_id,
            self.spec.total_roi,
            self.spec.read_roi,
            self.spec.write_roi,
            self.spec.fit,
            self.spec.read_write_conflict
        )
    }
}

/// `validated_roi(value, param)`: the funlib `Roi` for a task's ROI
/// parameter, checked here once with the core's messages (which name
/// `param`): `value` itself when it is a valid funlib `Roi`, a new one for
/// an `(offset, shape)` pair.
#[pyfunction]
pub fn validated_roi<'py>(value: &Bound<'py, PyAny>, param: &str) -> PyResult<Bound<'py, PyAny>> {
    let roi = roi_from_py(value, param)?;
    if value.hasattr("offset")? && value.hasattr("shape")? {
        Ok(value.clone())
    } else {
        roi_to_py(value.py(), &roi)
    }
}

/// The task ids of `specs` in the order the core runs and reports them:
/// upstream tasks before downstream ones, ties in the order given (what
/// progress, the dashboard and the metrics list, as the summary does).
/// Specs that do not make a pipeline (a cycle, an unknown upstream) raise
/// the same error running them would.
#[pyfunction]
pub fn pipeline_order(specs: Vec<PyRef<'_, PyTaskSpec>>) -> PyResult<Vec<String>> {
    let pipeline =
        daisy_core::Pipeline::new(specs.iter().map(|s| s.spec.clone()).collect()).py()?;
    Ok(pipeline.specs().iter().map(|s| s.task_id.clone()).collect())
}

/// `uncovered_reads(specs)`: the downstream tasks of `specs` whose blocks
/// read where no upstream block writes, as `(task_id, text)` pairs in
/// pipeline order (the core's `pipeline_coverage`; the run plan warns of
/// the same, and the summary repeats it).
#[pyfunction]
pub fn uncovered_reads(specs: Vec<PyRef<'_, PyTaskSpec>>) -> PyResult<Vec<(String, String)>> {
    let pipeline =
        daisy_core::Pipeline::new(specs.iter().map(|s| s.spec.clone()).collect()).py()?;
    Ok(daisy_core::pipeline_coverage::uncovered_reads(&pipeline)
        .into_iter()
        .map(|f| (pipeline.spec(f.task).task_id.clone(), f.text))
        .collect())
}
