//! `daisy.BlockStats`: what one block cost, as Python sees it (a frozen copy
//! of the core's `BlockStats`). Its own module because both `Block.stats`
//! and `profile_block` hand it out.

use daisy_core::block_profile::BlockStats;
use pyo3::prelude::*;

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
