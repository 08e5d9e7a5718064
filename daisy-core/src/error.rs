//! The one error type of the core, [`DaisyError`].
//!
//! Every fallible operation in `daisy-core` returns it. The bindings map
//! each variant to one Python exception type in a single place
//! (`daisy-py/src/errors.rs`), so the wording written here is what the user
//! reads: every message names the parameter at fault and says how to fix it.

use thiserror::Error;

/// Everything that can go wrong in the core.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DaisyError {
    /// A bad value for a named parameter (Python: `ValueError`).
    #[error("{param}: {message}")]
    InvalidArgument {
        /// The parameter as the user spelled it (`total_roi`, `fit`, ...).
        param: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A task id the scheduler does not know (Python: `KeyError`-like
    /// `ValueError`).
    #[error("unknown task id {0:?}; known task ids: {1}")]
    UnknownTask(String, String),
    /// The pipeline has a dependency cycle (Python: `ValueError`).
    #[error("upstream_tasks: the pipeline has a cycle through tasks {0}; remove one of the edges")]
    Cycle(String),
    /// Two different tasks share one id (Python: `ValueError`).
    #[error(
        "task_id: two different tasks are both called {0:?}; give every task of a pipeline its own task_id"
    )]
    DuplicateTask(String),
    /// A block handed back that the scheduler never handed out, or
    /// twice (Python: `ValueError`).
    #[error("release_block: {0}")]
    UnknownBlock(String),
    /// A tracking store that belongs to another block layout (Python:
    /// `daisy.LayoutMismatch`).
    #[error(
        "tracking store {store} does not fit this task: {reason}. Its layout hash is {found}; \
         this task's is {expected}. Delete it to start fresh: rm -rf {store} (or Task.reset()), \
         or point tracking_path elsewhere"
    )]
    LayoutMismatch {
        /// The store's directory.
        store: String,
        /// This task's layout hash.
        expected: String,
        /// The hash found in the store.
        found: String,
        /// What differs.
        reason: String,
    },
    /// Reading or writing a file failed (Python: `OSError`).
    #[error("{0}")]
    Io(String),
}

impl DaisyError {
    /// Shorthand for [`DaisyError::InvalidArgument`].
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InvalidArgument {
            param: param.into(),
            message: message.into(),
        }
    }

    /// The same error with its parameter renamed (used when a generic check,
    /// such as ROI construction, runs on behalf of a named parameter).
    pub fn for_param(self, name: &str) -> Self {
        match self {
            Self::InvalidArgument { message, .. } => Self::InvalidArgument {
                param: name.to_string(),
                message,
            },
            other => other,
        }
    }
}
