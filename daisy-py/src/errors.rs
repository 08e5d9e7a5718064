//! The one place where core errors become Python exceptions.
//!
//! Every [`DaisyError`] variant maps to exactly one Python exception type;
//! the message written by the core (which names the parameter and the fix)
//! is passed through unchanged.

use daisy_core::DaisyError;
use pyo3::exceptions::{
    PyConnectionError, PyConnectionRefusedError, PyException, PyKeyError, PyOSError,
    PyPermissionError, PyRuntimeError, PyTypeError, PyValueError,
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
        DaisyError::LayoutMismatch { .. }
        | DaisyError::StoreOfAnotherTask { .. }
        | DaisyError::OutputReplaced { .. } => LayoutMismatch::new_err(e.to_string()),
        DaisyError::Unsafe(_) => PyPermissionError::new_err(e.to_string()),
        DaisyError::Io(_) | DaisyError::StoreDamaged(_) => PyOSError::new_err(e.to_string()),
        DaisyError::Connection(_) => PyConnectionError::new_err(e.to_string()),
        DaisyError::ServerGone(_) => PyConnectionRefusedError::new_err(e.to_string()),
        DaisyError::Protocol(_)
        | DaisyError::Refused(_)
        | DaisyError::RunBroken(_)
        | DaisyError::Stopped
        | DaisyError::UserCode(_)
        | DaisyError::StoreInUse(_) => PyRuntimeError::new_err(e.to_string()),
    }
}

/// A Python value of a type the bindings cannot convert (the conversion's
/// own word, naming the parameter): a `TypeError`.
pub fn wrong_type(message: impl Into<String>) -> PyErr {
    PyTypeError::new_err(message.into())
}

/// A Python value of the right type that the bindings cannot convert (a
/// corrupt pickle, a negative coordinate, a block without its task): a
/// `ValueError`. A value the core refuses goes through [`to_pyerr`].
pub fn bad_value(message: impl Into<String>) -> PyErr {
    PyValueError::new_err(message.into())
}

/// The interpreter is exiting: a `RuntimeError` (see `interpreter`).
pub fn interpreter_exiting(message: &str) -> PyErr {
    PyRuntimeError::new_err(message.to_string())
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

/// Where a hook of a run keeps the Python exception its user code raised
/// (Ctrl-C in a tick, an exception in a check or block function), so the
/// run's caller raises that very exception, with its type and traceback,
/// instead of the core's error. Shared between the hooks (moved into the
/// core, on another thread's stack) and the binding that raises.
///
/// The hooks only say what kind of failure it was ([`StopCause::raised`]:
/// an `Exception` is [`DaisyError::UserCode`], anything else an
/// interruption, [`DaisyError::Stopped`]); whether the run goes on is the
/// core's rule.
#[derive(Clone, Default)]
pub struct StopCause(std::sync::Arc<std::sync::Mutex<Kept>>);

#[derive(Default)]
struct Kept {
    /// The first interruption: it stops the run.
    stopped: Option<PyErr>,
    /// The latest ordinary error (the one a run stopped on, when the core
    /// stops for it: it stops at once).
    user_code: Option<PyErr>,
}

impl StopCause {
    /// Keep `e` (the first one wins) and tell the core to stop.
    pub fn stop(&self, e: PyErr) -> DaisyError {
        if let Ok(mut kept) = self.0.lock() {
            kept.stopped.get_or_insert(e);
        }
        DaisyError::Stopped
    }

    /// Keep `e`, which the user's code raised, and tell the core what kind
    /// of failure it is: an `Exception` ([`DaisyError::UserCode`], with its
    /// text) or an interruption (`KeyboardInterrupt`, `SystemExit`:
    /// [`DaisyError::Stopped`]).
    pub fn raised(&self, py: Python<'_>, e: PyErr) -> DaisyError {
        if !e.is_instance_of::<PyException>(py) {
            return self.stop(e);
        }
        let text = e.to_string();
        if let Ok(mut kept) = self.0.lock() {
            kept.user_code = Some(e);
        }
        DaisyError::UserCode(text)
    }

    /// The Python exception for a run's `stopped` error: the user code's
    /// own exception when the run stopped for it, else the core error
    /// mapped.
    pub fn into_pyerr(self, stopped: DaisyError) -> PyErr {
        let mut kept = match self.0.lock() {
            Ok(mut k) => std::mem::take(&mut *k),
            Err(_) => Kept::default(),
        };
        match (stopped, kept.stopped.take(), kept.user_code.take()) {
            (DaisyError::Stopped, Some(e), _) | (DaisyError::UserCode(_), _, Some(e)) => e,
            (other, _, _) => to_pyerr(other),
        }
    }
}
