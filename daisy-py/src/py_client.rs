//! `daisy._daisy.Client`: the worker side of the protocol for Python. Every
//! call releases the GIL while it waits on the network, so other Python
//! threads of a worker keep running while it waits for a block.

use crate::py_block::PyBlock;
use daisy_core::client::{Client, ClientError};
use pyo3::exceptions::{PyConnectionError, PyRuntimeError};
use pyo3::prelude::*;

fn to_pyerr(e: ClientError) -> PyErr {
    match e {
        ClientError::Io(e) => PyConnectionError::new_err(e.to_string()),
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

/// A connection to the daisy server of a run, for one task.
#[pyclass(name = "Client", module = "daisy._daisy")]
pub struct PyClient {
    inner: Option<Client>,
    task_id: String,
}

impl PyClient {
    fn client(&mut self) -> PyResult<&mut Client> {
        self.inner
            .as_mut()
            .ok_or_else(|| PyConnectionError::new_err("this daisy client was disconnected"))
    }
}

#[pymethods]
impl PyClient {
    /// Connect to `host:port` with the run's `token`, for `task_id`, as
    /// worker `worker_id` (None: an unmanaged client).
    #[new]
    #[pyo3(signature = (host, port, token, task_id, worker_id=None))]
    fn new(
        py: Python<'_>,
        host: String,
        port: u16,
        token: String,
        task_id: String,
        worker_id: Option<u32>,
    ) -> PyResult<Self> {
        let inner = py
            .detach(|| Client::connect(&host, port, &token, &task_id, worker_id))
            .map_err(to_pyerr)?;
        Ok(Self {
            inner: Some(inner),
            task_id,
        })
    }

    /// The next block (None when the task has no more for this worker).
    fn acquire_block(&mut self, py: Python<'_>) -> PyResult<Option<PyBlock>> {
        let task_id = self.task_id.clone();
        let client = self.client()?;
        let block = py.detach(|| client.acquire_block()).map_err(to_pyerr)?;
        Ok(block.map(|b| PyBlock::from_core(&b, &task_id)))
    }

    /// Report a block done (failed if its status is FAILED).
    fn release_block(&mut self, py: Python<'_>, block: PyRef<'_, PyBlock>) -> PyResult<()> {
        let core = block.to_core()?;
        let client = self.client()?;
        py.detach(|| client.release_block(core)).map_err(to_pyerr)
    }

    /// Report a block failed, with the error text (a traceback).
    fn block_failed(
        &mut self,
        py: Python<'_>,
        block: PyRef<'_, PyBlock>,
        error: String,
    ) -> PyResult<()> {
        let core = block.to_core()?;
        let client = self.client()?;
        py.detach(|| client.block_failed(core, error))
            .map_err(to_pyerr)
    }

    /// Close the connection.
    fn disconnect(&mut self, py: Python<'_>) {
        if let Some(c) = self.inner.take() {
            py.detach(|| c.disconnect());
        }
    }
}
