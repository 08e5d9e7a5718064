//! `daisy._daisy.Client`: the worker side of the protocol for Python. Every
//! call releases the GIL while it waits on the network, so other Python
//! threads of a worker keep running while it waits for a block.

use crate::errors::{IntoPyResult, to_pyerr};
use crate::interpreter;
use crate::py_block::PyBlock;
use daisy_core::DaisyError;
use daisy_core::client::Client;
use pyo3::prelude::*;

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
}

impl PyClient {
    /// The core block, with the client's measurement settled on it (and on
    /// the Python block, where user code can read it).
    fn measured(&mut self, mut block: PyRefMut<'_, PyBlock>) -> PyResult<daisy_core::Block> {
        let mut core = block.to_core()?;
        self.client()?.settle(&mut core);
        block.stats = core.stats;
        Ok(core)
    }

    fn client(&mut self) -> PyResult<&mut Client> {
        self.inner.as_mut().ok_or_else(disconnected)
    }
}

#[pymethods]
impl PyClient {
    /// Connect to `host:port` with the run's `token`, for `task_id`, as
    /// worker `worker_id` (None: an unmanaged client), giving up on a
    /// server that stops answering after `liveness_timeout` seconds (the
    /// run's, from the context; None: the default).
    #[new]
    #[pyo3(signature = (host, port, token, task_id, worker_id=None, measure=true, liveness_timeout=None))]
    #[allow(clippy::too_many_arguments)] // the Python constructor's keywords
    fn new(
        py: Python<'_>,
        host: String,
        port: u16,
        token: String,
        task_id: String,
        worker_id: Option<u32>,
        measure: bool,
        liveness_timeout: Option<f64>,
    ) -> PyResult<Self> {
        let liveness = match liveness_timeout {
            Some(s) => daisy_core::liveness::timeout_from_secs(s).py()?,
            None => daisy_core::liveness::DEFAULT_TIMEOUT,
        };
        let mut inner = py
            .detach(|| Client::connect_with(&host, port, &token, &task_id, worker_id, liveness))
            .py()?;
        // measure when the task asks for it (resource tracking), unless
        // this client was told not to (a stand-in for a hand-written one)
        inner.measure_blocks(measure).py()?;
        Ok(Self {
            inner: Some(inner),
            task_id,
        })
    }

    /// The next block (None when the task has no more for this worker).
    fn acquire_block(&mut self, py: Python<'_>) -> PyResult<Option<PyBlock>> {
        let task_id = self.task_id.clone();
        let client = self.client()?;
        let block = interpreter::detach(py, || client.acquire_block())?.py()?;
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
        let client = self.client()?;
        let next = interpreter::detach(py, || client.release_and_acquire(core, error))?.py()?;
        Ok(next.map(|b| PyBlock::from_core(&b, &task_id)))
    }

    /// Report a block done (failed if its status is FAILED).
    fn release_block(&mut self, py: Python<'_>, block: PyRefMut<'_, PyBlock>) -> PyResult<()> {
        let core = self.measured(block)?;
        let client = self.client()?;
        interpreter::detach(py, || client.release_block(core))?.py()
    }

    /// Tell the server about this worker's first block: `import_seconds`
    /// of its `block_seconds` went to imports of `packages` (top-level
    /// names, costliest first). Where that was most of it, the run report
    /// says so once for the task (the rule and words are the core's,
    /// `run_report::warmup`); otherwise nothing is sent.
    fn first_block(
        &mut self,
        py: Python<'_>,
        import_seconds: f64,
        block_seconds: f64,
        packages: Vec<String>,
    ) -> PyResult<()> {
        let Some(text) =
            daisy_core::run_report::warmup::import_note(import_seconds, block_seconds, &packages)
        else {
            return Ok(());
        };
        let client = self.client()?;
        interpreter::detach(py, || client.note(text))?.py()
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
        interpreter::detach(py, || client.block_failed(core, error))?.py()
    }

    /// Close the connection.
    fn disconnect(&mut self, py: Python<'_>) {
        if let Some(c) = self.inner.take() {
            // at interpreter exit the connection closes as `c` drops
            let _ = interpreter::detach(py, || c.disconnect());
        }
    }
}
