//! `daisy._daisy.Client`: the worker side of the protocol for Python. Every
//! call releases the GIL while it waits on the network, so other Python
//! threads of a worker keep running while it waits for a block.

use crate::errors::{IntoPyResult, to_pyerr};
use crate::py_block::PyBlock;
use daisy_core::DaisyError;
use daisy_core::block_profile::BlockProfiler;
use daisy_core::client::Client;
use pyo3::prelude::*;

/// Start a block's measurement (while its request is in flight).
fn start(profiler: &mut Option<BlockProfiler>) {
    if let Some(p) = profiler.as_mut() {
        p.start();
    }
}

/// After the reply: the block's wall time starts now; without a block the
/// started measurement is dropped.
fn finish_start(profiler: &mut Option<BlockProfiler>, got_block: bool) {
    if let Some(p) = profiler.as_mut() {
        if got_block {
            p.restart_wall();
        } else {
            let _ = p.stop();
        }
    }
}

/// The error of a call on a client that was disconnected.
fn disconnected() -> PyErr {
    to_pyerr(DaisyError::Connection(
        "this daisy client was disconnected".into(),
    ))
}

/// A connection to the daisy server of a run, for one task.
#[pyclass(name = "Client", module = "daisy._daisy")]
pub struct PyClient {
    inner: Option<Client>,
    task_id: String,
    /// Measures every block from acquire to release (None: a client that
    /// does not measure, as a hand-written protocol client would not).
    profiler: Option<BlockProfiler>,
}

impl PyClient {
    /// The core block, with this client's measurement settled on it.
    fn measured(&mut self, mut block: PyRefMut<'_, PyBlock>) -> PyResult<daisy_core::Block> {
        if let Some(profiler) = self.profiler.as_mut() {
            profiler.stop_into(&mut block.stats);
        }
        block.to_core()
    }

    fn client(&mut self) -> PyResult<&mut Client> {
        self.inner.as_mut().ok_or_else(disconnected)
    }
}

#[pymethods]
impl PyClient {
    /// Connect to `host:port` with the run's `token`, for `task_id`, as
    /// worker `worker_id` (None: an unmanaged client).
    #[new]
    #[pyo3(signature = (host, port, token, task_id, worker_id=None, measure=true))]
    fn new(
        py: Python<'_>,
        host: String,
        port: u16,
        token: String,
        task_id: String,
        worker_id: Option<u32>,
        measure: bool,
    ) -> PyResult<Self> {
        let inner = py
            .detach(|| Client::connect(&host, port, &token, &task_id, worker_id))
            .py()?;
        // measure when the task asks for it (resource tracking), unless
        // this client was told not to (a stand-in for a hand-written one)
        let profiler = (measure && inner.wants_measurements()).then(BlockProfiler::new);
        Ok(Self {
            inner: Some(inner),
            task_id,
            profiler,
        })
    }

    /// The next block (None when the task has no more for this worker).
    fn acquire_block(&mut self, py: Python<'_>) -> PyResult<Option<PyBlock>> {
        let task_id = self.task_id.clone();
        let (inner, profiler) = (&mut self.inner, &mut self.profiler);
        let client = inner.as_mut().ok_or_else(disconnected)?;
        // the start snapshot is taken while the server answers
        let block = py
            .detach(|| client.acquire_block_with(|| start(profiler)))
            .py()?;
        finish_start(&mut self.profiler, block.is_some());
        Ok(block.map(|b| PyBlock::from_core(&b, &task_id)))
    }

    /// Report a block (done, or failed with `error`) and take the next one,
    /// in one write; None when the task has no more blocks.
    #[pyo3(signature = (block, error=None))]
    fn release_and_acquire(
        &mut self,
        py: Python<'_>,
        block: PyRefMut<'_, PyBlock>,
        error: Option<String>,
    ) -> PyResult<Option<PyBlock>> {
        let core = self.measured(block)?;
        let task_id = self.task_id.clone();
        let (inner, profiler) = (&mut self.inner, &mut self.profiler);
        let client = inner.as_mut().ok_or_else(disconnected)?;
        let next = py
            .detach(|| client.release_and_acquire(core, error, || start(profiler)))
            .py()?;
        finish_start(&mut self.profiler, next.is_some());
        Ok(next.map(|b| PyBlock::from_core(&b, &task_id)))
    }

    /// Report a block done (failed if its status is FAILED).
    fn release_block(&mut self, py: Python<'_>, block: PyRefMut<'_, PyBlock>) -> PyResult<()> {
        let core = self.measured(block)?;
        let client = self.client()?;
        py.detach(|| client.release_block(core)).py()
    }

    /// Report a block failed, with the error text (a traceback).
    fn block_failed(
        &mut self,
        py: Python<'_>,
        block: PyRefMut<'_, PyBlock>,
        error: String,
    ) -> PyResult<()> {
        let core = self.measured(block)?;
        let client = self.client()?;
        py.detach(|| client.block_failed(core, error)).py()
    }

    /// Close the connection.
    fn disconnect(&mut self, py: Python<'_>) {
        if let Some(c) = self.inner.take() {
            py.detach(|| c.disconnect());
        }
    }
}
