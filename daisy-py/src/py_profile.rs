//! `daisy.BlockStats` and `daisy.profile_block`: what a block cost, and the
//! context manager that measures a narrower region than the whole block.
//!
//! The measurement is the core's `BlockProfiler`, the one code path for
//! every worker kind; this module only exposes it. The first measurement
//! attached to a block wins: `profile_block` inside a block function beats
//! the automatic one around it (`daisy.Client`, serial runs).

use crate::py_block::PyBlock;
use daisy_core::block_profile::{BlockProfiler, BlockStats};
use pyo3::prelude::*;
use pyo3::types::PyAny;

/// What one block cost: `wall_seconds`, `cpu_seconds`, `peak_rss_bytes`,
/// `io_read_bytes`, `io_write_bytes`, and the reserved `gpu_util_pct`
/// (NaN) and `gpu_mem_bytes` (0).
#[pyclass(name = "BlockStats", module = "daisy._daisy", frozen, get_all)]
#[derive(Clone, Copy)]
pub struct PyBlockStats {
    /// Elapsed seconds in the block.
    pub wall_seconds: f64,
    /// CPU seconds of the whole process during the block.
    pub cpu_seconds: f64,
    /// Peak RSS of the process while the block ran, bytes.
    pub peak_rss_bytes: u64,
    /// Bytes read through syscalls.
    pub io_read_bytes: u64,
    /// Bytes written through syscalls.
    pub io_write_bytes: u64,
    /// Reserved (NaN).
    pub gpu_util_pct: f32,
    /// Reserved (0).
    pub gpu_mem_bytes: u64,
}

impl From<BlockStats> for PyBlockStats {
    fn from(s: BlockStats) -> Self {
        Self {
            wall_seconds: s.wall_seconds,
            cpu_seconds: s.cpu_seconds,
            peak_rss_bytes: s.peak_rss_bytes,
            io_read_bytes: s.io_read_bytes,
            io_write_bytes: s.io_write_bytes,
            gpu_util_pct: s.gpu_util_pct,
            gpu_mem_bytes: s.gpu_mem_bytes,
        }
    }
}

#[pymethods]
impl PyBlockStats {
    fn __repr__(&self) -> String {
        format!(
            "BlockStats(wall_seconds={:.6}, cpu_seconds={:.6}, peak_rss_bytes={}, \
             io_read_bytes={}, io_write_bytes={})",
            self.wall_seconds,
            self.cpu_seconds,
            self.peak_rss_bytes,
            self.io_read_bytes,
            self.io_write_bytes
        )
    }
}

/// `with daisy.profile_block(block):` measures the code inside and attaches
/// the figures to the block, unless it already carries a measurement.
#[pyclass(name = "profile_block", module = "daisy._daisy")]
pub struct ProfileBlock {
    block: Py<PyBlock>,
    profiler: BlockProfiler,
}

#[pymethods]
impl ProfileBlock {
    #[new]
    fn new(block: Py<PyBlock>) -> Self {
        Self {
            block,
            profiler: BlockProfiler::new(),
        }
    }

    fn __enter__(mut slf: PyRefMut<'_, Self>) -> Py<PyBlock> {
        slf.profiler.start();
        slf.block.clone_ref(slf.py())
    }

    fn __exit__(
        &mut self,
        py: Python<'_>,
        _exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> bool {
        let stats = self.profiler.stop();
        let mut block = self.block.borrow_mut(py);
        if block.stats.is_none() {
            block.stats = stats;
        }
        false
    }
}
