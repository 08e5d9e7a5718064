//! `daisy.profile_block`: the context manager that measures a narrower
//! region than the whole block.
//!
//! The measurement is the core's `BlockProfiler`, the one code path for
//! every worker kind; this module only exposes it. The first measurement
//! attached to a block wins: `profile_block` inside a block function beats
//! the automatic one around it (`daisy.Client`, serial runs).

use crate::py_block::PyBlock;
use daisy_core::block_profile::BlockProfiler;
use pyo3::prelude::*;
use pyo3::types::PyAny;

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
        let mut block = self.block.borrow_mut(py);
        self.profiler.stop_into(&mut block.stats);
        false
    }
}
