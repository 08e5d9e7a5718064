//! The one place where core errors become Python exceptions.
//!
//! Every [`DaisyError`] variant maps to exactly one Python exception type;
//! the message written by the core (which names the parameter and the fix)
//! is passed through unchanged.

use daisy_core::DaisyError;
use pyo3::PyErr;
use pyo3::exceptions::{PyKeyError, PyOSError, PyValueError};

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
        DaisyError::LayoutMismatch { .. } => LayoutMismatch::new_err(e.to_string()),
        DaisyError::Io(_) => PyOSError::new_err(e.to_string()),
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
