//! `daisy.BlockStats`: what one block cost, as Python sees it (a frozen copy
//! of the core's `BlockStats`). Its own module because both `Block.stats`
//! and `profile_block` hand it out.

use daisy_core::block_profile::BlockStats;
use pyo3::prelude::*;

/// What one block cost: `wall_seconds`, `cpu_seconds`, `peak_rss_bytes`,
/// `io_read_bytes`, `io_write_bytes`, and the reserved `gpu_util_pct`
/// (NaN) and `gpu_mem_bytes` (0), and `run_queue_seconds` (the time the
/// worker waited for a core; NaN where not measured).
#[pyclass(name = "BlockStats", module = "daisy._daisy", frozen)]
#[derive(Clone, Copy)]
pub struct PyBlockStats(BlockStats);

impl From<BlockStats> for PyBlockStats {
    fn from(s: BlockStats) -> Self {
        Self(s)
    }
}

#[pymethods]
impl PyBlockStats {
    /// Figures given by hand (daisy 2.0.0 let code build one, say for a
    /// test double); the profiler makes the real ones. Counts must not be
    /// negative.
    #[new]
    #[pyo3(signature = (
        wall_seconds = 0.0,
        cpu_seconds = 0.0,
        peak_rss_bytes = 0,
        io_read_bytes = 0,
        io_write_bytes = 0,
        gpu_util_pct = f32::NAN,
        gpu_mem_bytes = 0,
        *,
        run_queue_seconds = f64::NAN
    ))]
    #[allow(clippy::too_many_arguments)] // the figures' keywords, one each
    fn new(
        wall_seconds: f64,
        cpu_seconds: f64,
        peak_rss_bytes: u64,
        io_read_bytes: u64,
        io_write_bytes: u64,
        gpu_util_pct: f32,
        gpu_mem_bytes: u64,
        run_queue_seconds: f64,
    ) -> Self {
        Self(BlockStats {
            wall_seconds,
            cpu_seconds,
            peak_rss_bytes,
            io_read_bytes,
            io_write_bytes,
            gpu_util_pct,
            gpu_mem_bytes,
            run_queue_seconds,
        })
    }

    /// Elapsed seconds in the block.
    #[getter]
    fn wall_seconds(&self) -> f64 {
        self.0.wall_seconds
    }

    /// CPU seconds of the whole process during the block.
    #[getter]
    fn cpu_seconds(&self) -> f64 {
        self.0.cpu_seconds
    }

    /// Peak RSS of the process while the block ran, bytes.
    #[getter]
    fn peak_rss_bytes(&self) -> u64 {
        self.0.peak_rss_bytes
    }

    /// Bytes read through syscalls.
    #[getter]
    fn io_read_bytes(&self) -> u64 {
        self.0.io_read_bytes
    }

    /// Bytes written through syscalls.
    #[getter]
    fn io_write_bytes(&self) -> u64 {
        self.0.io_write_bytes
    }

    /// Reserved (NaN).
    #[getter]
    fn gpu_util_pct(&self) -> f32 {
        self.0.gpu_util_pct
    }

    /// Reserved (0).
    #[getter]
    fn gpu_mem_bytes(&self) -> u64 {
        self.0.gpu_mem_bytes
    }

    /// Seconds the worker's main thread waited for a core during the block
    /// (runnable, on the run queue); NaN where not measured.
    #[getter]
    fn run_queue_seconds(&self) -> f64 {
        self.0.run_queue_seconds
    }

    fn __repr__(&self) -> String {
        format!(
            "BlockStats(wall_seconds={:.6}, cpu_seconds={:.6}, peak_rss_bytes={}, \
             io_read_bytes={}, io_write_bytes={})",
            self.0.wall_seconds,
            self.0.cpu_seconds,
            self.0.peak_rss_bytes,
            self.0.io_read_bytes,
            self.0.io_write_bytes
        )
    }
}
