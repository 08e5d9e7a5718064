//! The one place where core errors become Python exceptions.
//!
//! Every [`DaisyError`] variant maps to exactly one Python exception type;
//! the message written by the core (which names the parameter and the fix)
//! is passed through unchanged.

use daisy_core::DaisyError;
use pyo3::exceptions::{
    PyConnectionError, PyConnectionRefusedError, PyKeyError, PyOSError, PyPermissionError,
    PyRuntimeError, PyValueError,
};
use pyo3::prelude::*;

pyo3::create_exception!(
    daisy,
    LayoutMismatch,
    PyValueError,
    "A tracking store was written for a different block layout (its message names the store, \
     both layout hashes and how to delete it)."
);

/// Convert a core error into the Python exception the user sees.
pub fn to_pyerr(e: DaisyError) -> PyErr {
    match e {
        DaisyError::UnknownTask(..) => PyKeyError::new_err(e.to_string()),
        DaisyError::InvalidArgument { .. }
        | DaisyError::Cycle(_)
        | DaisyError::DuplicateTask(_)
        | DaisyError::UnknownBlock(_) => PyValueError::new_err(e.to_string()),
        DaisyError::LayoutMismatch { .. } | DaisyError::StoreOfAnotherTask { .. } => {
            LayoutMismatch::new_err(e.to_string())
        }
        DaisyError::Unsafe(_) => PyPermissionError::new_err(e.to_string()),
        DaisyError::Io(_) | DaisyError::StoreDamaged(_) => PyOSError::new_err(e.to_string()),
        DaisyError::Connection(_) => PyConnectionError::new_err(e.to_string()),
        DaisyError::ServerGone(_) => PyConnectionRefusedError::new_err(e.to_string()),
        DaisyError::Protocol(_)
        | DaisyError::Refused(_)
        | DaisyError::RunBroken(_)
        | DaisyError::Stopped
        | DaisyError::StoreInUse(_) => PyRuntimeError::new_err(e.to_string()),
    }
}

/// `?`-friendly conversion: `result.map_err(to_pyerr)`.
pub trait IntoPyResult<T> {
    /// The result with its error converted.
    fn py(self) -> pyo3::PyResult<T>;
}

impl<T> IntoPyResult<T> for Result<T, DaisyError> {
    fn py(self) -> pyo3::PyResult<T> {
        self.map_err(to_pyerr)
    }
}

/// Where a hook of a run keeps the Python exception that stopped it (Ctrl-C
/// in a tick, an exception in a block function), so the run's caller
/// raises that very exception, with its type and traceback, instead of the
/// core's [`DaisyError::Stopped`]. Shared between the hooks (moved into the
/// core, on another thread's stack) and the binding that raises.
#[derive(Clone, Default)]
pub struct StopCause(std::sync::Arc<std::sync::Mutex<Option<PyErr>>>);

impl StopCause {
    /// Keep `e` (the first one wins) and tell the core to stop.
    pub fn stop(&self, e: PyErr) -> DaisyError {
        if let Ok(mut kept) = self.0.lock() {
            kept.get_or_insert(e);
        }
        DaisyError::Stopped
    }

    /// The Python exception for a run's `stopped` error: the hook's own
    /// exception when the hook stopped it, else the core error mapped.
    pub fn into_pyerr(self, stopped: DaisyError) -> PyErr {
        let kept = self.0.lock().ok().and_then(|mut k| k.take());
        match (stopped, kept) {
            (DaisyError::Stopped, Some(e)) => e,
            (other, _) => to_pyerr(other),
        }
    }
}
