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
         this task's is {expected}. To start fresh and keep its run history (runs.jsonl, for \
         daisy compare), call task.reset() once; or point tracking_path elsewhere; rm -rf \
         {store} deletes the history too"
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
    /// A tracking store of another task (Python: `daisy.LayoutMismatch`).
    #[error(
        "tracking store {store} belongs to task {owner:?}, not to {task:?}: two tasks on one \
         store would take each other's done marks for their own. Give task {task:?} its own \
         tracking_path; or, if {task:?} is {owner:?} renamed, call task.adopt_tracking_store() \
         to make the store its own (every mark is kept)"
    )]
    StoreOfAnotherTask {
        /// The store's directory.
        store: String,
        /// The task the store records.
        owner: String,
        /// The task that opened it.
        task: String,
    },
    /// A declared output was deleted or made again since the tracking
    /// store marked blocks done (Python: `daisy.LayoutMismatch`): a rerun
    /// would skip blocks whose results are gone.
    #[error(
        "task {task:?}: output {output} was {how} since tracking store {store} marked {marked} \
         block(s) done, so their results are not in it and a rerun would skip them. To redo \
         the task, call task.reset() once (the run history is kept); or give the task another \
         tracking_path"
    )]
    OutputReplaced {
        /// The store's directory.
        store: String,
        /// The task.
        task: String,
        /// The output's directory.
        output: String,
        /// "deleted" or "deleted and made again".
        how: String,
        /// How many blocks the store marks done.
        marked: u64,
    },
    /// A tracking store lost a file it cannot do without and still holds
    /// marks (Python: `OSError`).
    #[error("{0}")]
    StoreDamaged(String),
    /// A file or directory others could tamper with (another user's, one
    /// others can write, a planted symbolic link, a payload that changed):
    /// refused (Python: `PermissionError`).
    #[error("{0}")]
    Unsafe(String),
    /// Reading or writing a file, or listening, failed (Python: `OSError`).
    #[error("{0}")]
    Io(String),
    /// A worker's connection to the server failed or closed (Python:
    /// `ConnectionError`).
    #[error("connection to the daisy server failed: {0}")]
    Connection(String),
    /// No server listens where the context says (connection refused): the
    /// run has ended, or never began (Python: `ConnectionRefusedError`, a
    /// `ConnectionError`).
    #[error("no daisy server listens at {0}: the run has ended (or not begun)")]
    ServerGone(String),
    /// A peer sent something unexpected or undecodable (Python:
    /// `RuntimeError`).
    #[error("daisy protocol error: {0}")]
    Protocol(String),
    /// The server refused a worker's request (Python: `RuntimeError`).
    #[error("the daisy server refused: {0}")]
    Refused(String),
    /// The run could not go on: a rule of the run was broken (a block came
    /// back unmeasured to a task that expects measurements). Python:
    /// `RuntimeError`.
    #[error("{0}")]
    RunBroken(String),
    /// The embedding program stopped the run from one of its hooks (Ctrl-C,
    /// an exception in a block function). The hook keeps its own error,
    /// which is what the user sees; this variant only tells the runner to
    /// stop. Python: `RuntimeError`, if it ever surfaced on its own.
    #[error("the run was stopped by its caller")]
    Stopped,
    /// The user's code called by a hook (a check or block function, a
    /// progress observer) raised an ordinary error (Python: an
    /// `Exception`, as opposed to an interruption, which is
    /// [`DaisyError::Stopped`]). The embedding program only says which of
    /// the two it was; what the run does about it is the core's rule
    /// (`server::policy::after_check_error`, `serial`). The hook keeps the
    /// error itself for its caller. Python: `RuntimeError`, if it ever
    /// surfaced on its own.
    #[error("{0}")]
    UserCode(String),
    /// Another run holds the tracking store (Python: `RuntimeError`).
    #[error("{0}")]
    StoreInUse(String),
}

impl DaisyError {
    /// Shorthand for [`DaisyError::InvalidArgument`].
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InvalidArgument {
            param: param.into(),
            message: message.into(),
        }
    }

    /// A failed connection to the server.
    pub fn connection(e: impl std::fmt::Display) -> Self {
        Self::Connection(e.to_string())
    }
}
