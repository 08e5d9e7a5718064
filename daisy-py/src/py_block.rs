//! `daisy.Block`: the block object handed to user code.
//!
//! It wraps the core's plain block (two ROIs, ids, status) and builds the
//! `funlib.geometry.Roi` objects user code indexes arrays with only when
//! `read_roi` / `write_roi` is first read, then keeps them. Blocks that pass
//! through the scheduler without user code looking at their ROIs (skips,
//! benchmarks, the server relaying them) never pay for that conversion.
//!
//! `status` is the Python enum `daisy.BlockStatus` (defined in
//! `daisy/block.py`, as in daisy 1.x); the core's status is converted at
//! this boundary.

use crate::convert::{roi_from_py, roi_to_py};
use crate::errors::IntoPyResult;
use crate::py_block_stats::PyBlockStats;
use daisy_core::block_id::cantor_number_signed;
use daisy_core::block_profile::BlockStats;
use daisy_core::{Block, BlockKey, BlockStatus, Coord, Roi};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyAny, PyTuple};

static STATUS_MEMBERS: PyOnceLock<[Py<PyAny>; 4]> = PyOnceLock::new();

fn status_members(py: Python<'_>) -> PyResult<&[Py<PyAny>; 4]> {
    STATUS_MEMBERS.get_or_try_init(py, || {
        let cls = py.import("daisy.block")?.getattr("BlockStatus")?;
        Ok::<_, PyErr>([
            cls.getattr("CREATED")?.unbind(),
            cls.getattr("PROCESSING")?.unbind(),
            cls.getattr("SUCCESS")?.unbind(),
            cls.getattr("FAILED")?.unbind(),
        ])
    })
}

fn status_index(s: BlockStatus) -> usize {
    usize::from(s.code())
}

/// The core status for a `daisy.BlockStatus` member (or its int value).
pub fn status_from_py(obj: &Bound<'_, PyAny>) -> PyResult<BlockStatus> {
    let value = if let Ok(v) = obj.getattr("value") {
        v
    } else {
        obj.clone()
    };
    match value.extract::<i64>().ok().and_then(BlockStatus::from_code) {
        Some(status) => Ok(status),
        None => Err(crate::errors::wrong_type(format!(
            "status: expected a daisy.BlockStatus (CREATED, PROCESSING, SUCCESS or FAILED), got {}",
            obj.repr().map(|r| r.to_string()).unwrap_or_default()
        ))),
    }
}

/// A block to process: `read_roi`, `write_roi`, `block_id`, `task_id`,
/// `status`.
///
/// `Block(total_roi, read_roi, write_roi, block_id=None, task_id=None)`
/// computes the spatial id from the block's position in `total_roi` when
/// `block_id` is not given, exactly as daisy 1.x numbers blocks.
/// `block.block_id` is the pair `(task_id, spatial_id)`.
#[pyclass(name = "Block", module = "daisy.block", subclass, dict)]
pub struct PyBlock {
    pub(crate) task_id: Option<String>,
    pub(crate) spatial_id: i64,
    pub(crate) read: Roi,
    pub(crate) write: Roi,
    pub(crate) requested_write: Roi,
    /// Wall-clock stamps a server may set (daisy 1.x attributes).
    #[pyo3(get, set)]
    started_processing: Option<f64>,
    #[pyo3(get, set)]
    stopped_processing: Option<f64>,
    pub(crate) status: BlockStatus,
    /// Set when the block came from a scheduler (its identity there).
    pub(crate) key: Option<BlockKey>,
    /// Grid position, when the block came from a scheduler.
    pub(crate) position: Option<Coord>,
    /// What the block cost, once measured (the first measurement wins).
    pub(crate) stats: Option<BlockStats>,
    read_py: Option<Py<PyAny>>,
    write_py: Option<Py<PyAny>>,
    /// `thaw()` was called: new attributes may be added (daisy 1.x's
    /// `Freezable`; a block starts frozen).
    thawed: bool,
}

impl PyBlock {
    /// The core block this was made from (a block handed out by daisy).
    pub fn to_core(&self) -> PyResult<Block> {
        let (Some(key), Some(position)) = (self.key, self.position) else {
            return Err(crate::errors::bad_value(
                "block: this block was not handed out by daisy; release the block you acquired",
            ));
        };
        Ok(Block {
            key,
            spatial_id: self.spatial_id.max(0) as u64,
            position,
            read_roi: self.read,
            write_roi: self.write,
            requested_write_roi: self.requested_write,
            status: self.status,
            stats: self.stats,
        })
    }

    /// Wrap a block handed out by the scheduler.
    pub fn from_core(block: &Block, task_id: &str) -> Self {
        Self {
            task_id: Some(task_id.to_string()),
            spatial_id: block.spatial_id as i64,
            read: block.read_roi,
            write: block.write_roi,
            requested_write: block.requested_write_roi,
            started_processing: None,
            stopped_processing: None,
            status: block.status,
            key: Some(block.key),
            position: Some(block.position),
            stats: block.stats,
            read_py: None,
            write_py: None,
            thawed: false,
        }
    }
}

fn task_id_from_py(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => Ok(Some(o.str()?.to_string())),
    }
}

#[pymethods]
impl PyBlock {
    #[new]
    #[pyo3(signature = (total_roi, read_roi, write_roi, block_id=None, task_id=None))]
    fn new(
        total_roi: &Bound<'_, PyAny>,
        read_roi: &Bound<'_, PyAny>,
        write_roi: &Bound<'_, PyAny>,
        block_id: Option<&Bound<'_, PyAny>>,
        task_id: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let total = roi_from_py(total_roi, "total_roi")?;
        let read = roi_from_py(read_roi, "read_roi")?;
        let write = roi_from_py(write_roi, "write_roi")?;
        Block::check_rois(&total, &read, &write).py()?;
        let spatial_id = match block_id {
            Some(b) if !b.is_none() => b.extract::<i64>().map_err(|_| {
                crate::errors::wrong_type("block_id: expected an integer spatial id")
            })?,
            _ => {
                // daisy 1.x divides with truncation towards zero
                let rel = write.offset().sub(&total.offset());
                let index: Vec<i64> = (0..rel.dims()).map(|d| rel[d] / write.shape()[d]).collect();
                cantor_number_signed(&index).ok_or_else(|| {
                    crate::errors::bad_value(format!(
                        "write_roi: the block's grid position {index:?} is too far from \
                         total_roi's offset for a 64-bit block id"
                    ))
                })?
            }
        };
        Ok(Self {
            task_id: task_id_from_py(task_id)?,
            spatial_id,
            read,
            write,
            requested_write: write,
            started_processing: None,
            stopped_processing: None,
            status: BlockStatus::Created,
            key: None,
            position: None,
            stats: None,
            read_py: None,
            write_py: None,
            thawed: false,
        })
    }

    /// The region this block reads, a `daisy.Roi`.
    #[getter]
    fn read_roi(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if let Some(r) = &self.read_py {
            return Ok(r.clone_ref(py));
        }
        let r = roi_to_py(py, &self.read)?.unbind();
        self.read_py = Some(r.clone_ref(py));
        Ok(r)
    }

    #[setter]
    fn set_read_roi(&mut self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let read = roi_from_py(value, "read_roi")?;
        read.check_covers("read_roi", "the block").py()?;
        self.read = read;
        self.read_py = Some(value.clone().unbind());
        Ok(())
    }

    /// The region this block writes, a `daisy.Roi`.
    #[getter]
    fn write_roi(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if let Some(r) = &self.write_py {
            return Ok(r.clone_ref(py));
        }
        let r = roi_to_py(py, &self.write)?.unbind();
        self.write_py = Some(r.clone_ref(py));
        Ok(r)
    }

    #[setter]
    fn set_write_roi(&mut self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let write = roi_from_py(value, "write_roi")?;
        write.check_covers("write_roi", "the block").py()?;
        self.write = write;
        self.write_py = Some(value.clone().unbind());
        Ok(())
    }

    /// The write region before `fit="shrink"` cut it (equal to
    /// `write_roi` for every other block).
    #[getter]
    fn requested_write_roi(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if self.requested_write == self.write {
            return self.write_roi(py);
        }
        Ok(roi_to_py(py, &self.requested_write)?.unbind())
    }

    /// `(task_id, spatial_id)`.
    #[getter]
    fn block_id<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(
            py,
            [
                self.task_id.clone().into_pyobject(py)?.into_any(),
                self.spatial_id.into_pyobject(py)?.into_any(),
            ],
        )
    }

    /// What the block cost (a `daisy.BlockStats`), once measured; None
    /// before, or without resource tracking.
    #[getter]
    fn stats(&self) -> Option<PyBlockStats> {
        self.stats.map(Into::into)
    }

    /// The id of the task this block belongs to (None for a bare block).
    #[getter]
    fn task_id(&self) -> Option<String> {
        self.task_id.clone()
    }

    #[setter]
    fn set_task_id(&mut self, value: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.task_id = task_id_from_py(value)?;
        Ok(())
    }

    /// The processing status, a `daisy.BlockStatus`.
    #[getter]
    fn status(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(status_members(py)?[status_index(self.status)].clone_ref(py))
    }

    #[setter]
    fn set_status(&mut self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.status = status_from_py(value)?;
        Ok(())
    }

    /// A copy of this block (same ids, ROIs and status).
    fn copy(&self, py: Python<'_>) -> Self {
        Self {
            task_id: self.task_id.clone(),
            spatial_id: self.spatial_id,
            read: self.read,
            write: self.write,
            requested_write: self.requested_write,
            started_processing: self.started_processing,
            stopped_processing: self.stopped_processing,
            status: self.status,
            key: self.key,
            position: self.position,
            stats: self.stats,
            read_py: self.read_py.as_ref().map(|r| r.clone_ref(py)),
            write_py: self.write_py.as_ref().map(|r| r.clone_ref(py)),
            thawed: false,
        }
    }

    fn __copy__(&self, py: Python<'_>) -> Self {
        self.copy(py)
    }

    fn __deepcopy__(&self, py: Python<'_>, _memo: &Bound<'_, PyAny>) -> Self {
        self.copy(py)
    }

    /// Refuse new attributes (the state a block starts in, as in daisy
    /// 1.x); its own attributes (`status`, ...) stay settable.
    fn freeze(&mut self) {
        self.thawed = false;
    }

    /// Allow new attributes to be added to the block (daisy 1.x).
    fn thaw(&mut self) {
        self.thawed = true;
    }

    fn __setattr__(
        slf: &Bound<'_, Self>,
        name: &Bound<'_, pyo3::types::PyString>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let py = slf.py();
        // a Python subclass's instances keep their own attributes free
        let exact = slf.get_type().is(py.get_type::<PyBlock>());
        if exact && !slf.borrow().thawed && !slf.as_any().hasattr(name)? {
            return Err(crate::errors::wrong_type(format!(
                "{} is frozen, you can't add attributes to it (call block.thaw() first)",
                slf.borrow().__repr__()
            )));
        }
        // SAFETY: both pointers are live references held for the call;
        // the generic setter resolves properties and the instance dict.
        let rc = unsafe {
            pyo3::ffi::PyObject_GenericSetAttr(slf.as_ptr(), name.as_ptr(), value.as_ptr())
        };
        if rc < 0 {
            return Err(PyErr::take(py).unwrap_or_else(|| {
                crate::errors::wrong_type(format!("could not set {name} on a block"))
            }));
        }
        Ok(())
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        match other.cast::<PyBlock>() {
            Ok(o) => {
                let o = o.borrow();
                o.task_id == self.task_id && o.spatial_id == self.spatial_id
            }
            Err(_) => false,
        }
    }

    /// Equal to `hash(block.block_id)`, as in daisy 1.x.
    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        self.block_id(py)?.hash()
    }

    fn __repr__(&self) -> String {
        format!(
            "{}/{} with read ROI {} and write ROI {}",
            self.task_id.as_deref().unwrap_or("None"),
            self.spatial_id,
            funlib_str(&self.read),
            funlib_str(&self.write)
        )
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let b = slf.borrow();
        let roi = |r: &Roi| -> PyResult<Bound<'py, PyTuple>> {
            PyTuple::new(
                py,
                [
                    PyTuple::new(py, r.offset().as_slice())?,
                    PyTuple::new(py, r.shape().as_slice())?,
                ],
            )
        };
        let key = b.key.map(|k| (k.task, k.index));
        let position = b.position.map(|p| p.as_slice().to_vec());
        let state = (
            position,
            b.task_id.clone(),
            b.spatial_id,
            roi(&b.read)?,
            roi(&b.write)?,
            roi(&b.requested_write)?,
            status_index(b.status),
            key,
        );
        let rebuild = slf.get_type().getattr("_from_state")?;
        PyTuple::new(
            py,
            [
                rebuild,
                PyTuple::new(py, [state.into_pyobject(py)?])?.into_any(),
            ],
        )
    }

    /// Rebuild a pickled block (used by `__reduce__`).
    #[staticmethod]
    #[allow(clippy::type_complexity)]
    fn _from_state(
        state: (
            Option<Vec<i64>>,
            Option<String>,
            i64,
            Bound<'_, PyAny>,
            Bound<'_, PyAny>,
            Bound<'_, PyAny>,
            usize,
            Option<(u32, u64)>,
        ),
    ) -> PyResult<Self> {
        let (position, task_id, spatial_id, read, write, requested, status, key) = state;
        let status = i64::try_from(status)
            .ok()
            .and_then(BlockStatus::from_code)
            .ok_or_else(|| crate::errors::bad_value("corrupt pickled daisy.Block: bad status"))?;
        Ok(Self {
            task_id,
            spatial_id,
            read: roi_from_py(&read, "read_roi")?,
            write: roi_from_py(&write, "write_roi")?,
            requested_write: roi_from_py(&requested, "requested_write_roi")?,
            started_processing: None,
            stopped_processing: None,
            status,
            key: key.map(|(task, index)| BlockKey { task, index }),
            position: position
                .map(|p| Coord::new(&p))
                .transpose()
                .map_err(|e| crate::errors::bad_value(e.to_string()))?,
            stats: None,
            read_py: None,
            write_py: None,
            thawed: false,
        })
    }
}

/// A ROI as `funlib.geometry.Roi.__str__` writes it: `[0:10, 5:7] (10, 2)`.
fn funlib_str(roi: &Roi) -> String {
    let (b, e, s) = (roi.begin(), roi.end(), roi.shape());
    let spans: Vec<String> = (0..roi.dims())
        .map(|d| format!("{}:{}", b[d], e[d]))
        .collect();
    let shape: Vec<String> = s.as_slice().iter().map(i64::to_string).collect();
    format!("[{}] ({})", spans.join(", "), shape.join(", "))
}
