//! The interpreter's exit, as the bindings see it: the one place that
//! knows whether Python may still be entered from a thread the core runs.
//!
//! A run in a daemon thread is still going when the main thread returns:
//! CPython then runs its `atexit` callbacks and finalises, and a thread
//! that asks for the GIL after that is ended with `pthread_exit`, an
//! unwind that no Rust frame may see (the process aborted with "FATAL:
//! exception not rethrown", or PyO3 panicked attaching to an interpreter
//! that was gone). So `daisy` registers [`at_interpreter_exit`] with
//! `atexit`: it marks the interpreter as exiting, which makes every hook of
//! a run stop it instead of entering Python ([`attach`]), and waits, with
//! the GIL released, until every run and client call that holds Rust frames
//! on a Python thread ([`Busy`]) has returned to Python.
//!
//! Once a run stops counting as busy, the thread's way back to Python must
//! not release the GIL: the exit may then finalise the interpreter, and a
//! thread that takes the GIL back is ended through Rust frames. PyO3
//! releases it to normalise an exception, so a run's result (with the
//! exception that stopped it, normalised) is made while the run still
//! counts ([`detach_then`]), and nothing a getter does releases it.
//!
//! [`EXIT_WAIT`] bounds that wait: a stopping run kills its workers and
//! writes its report in well under a second here, so a minute is only
//! reached by a block function that does not return, and interpreter exit
//! must not hang on one forever.

use pyo3::prelude::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Set once the interpreter has begun to exit.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Runs and client calls that have Rust frames on a Python thread.
static BUSY: AtomicUsize = AtomicUsize::new(0);

/// The longest the exit waits for runs to stop (see the module doc).
pub const EXIT_WAIT: Duration = Duration::from_secs(60);
/// How often the exit looks whether they have.
const EXIT_POLL: Duration = Duration::from_millis(5);

/// The message of a run stopped because the interpreter exits.
pub const EXITING_MESSAGE: &str = "the Python interpreter is exiting (the run was in a daemon \
    thread when the main thread ended): the run stopped; its done blocks are recorded, and a \
    rerun resumes it. Join the thread before the program ends to let it finish";

/// Whether the interpreter has begun to exit.
pub fn exiting() -> bool {
    EXITING.load(Ordering::SeqCst)
}

/// The error a hook stops its run with when it cannot enter Python.
pub fn exiting_error() -> PyErr {
    crate::errors::interpreter_exiting(EXITING_MESSAGE)
}

/// Run `f` attached to the interpreter, or `None` when the interpreter is
/// exiting or cannot be attached to: what every hook a core thread calls
/// goes through.
pub fn attach<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> Option<R> {
    if exiting() {
        return None;
    }
    Python::try_attach(f)
}

/// A run or a client call with Rust frames on a Python thread, counted
/// while it lives so the exit can wait for it. Taken with the GIL held
/// (before the call releases it) and dropped after the GIL is back.
pub struct Busy(());

impl Busy {
    /// Count one more; refused once the interpreter is exiting (a run
    /// started by an `atexit` callback of its own would never be waited
    /// for).
    pub fn enter() -> PyResult<Busy> {
        BUSY.fetch_add(1, Ordering::SeqCst);
        let busy = Busy(());
        if exiting() {
            return Err(exiting_error());
        }
        Ok(busy)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        BUSY.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `py.detach(f)`, counted as [`Busy`] while it runs: for a call that
/// releases the GIL and must get it back before the interpreter is gone.
pub fn detach<T: pyo3::marker::Ungil>(
    py: Python<'_>,
    f: impl FnOnce() -> T + pyo3::marker::Ungil,
) -> PyResult<T> {
    detach_then(py, f, |_, out| out)
}

/// The longest the fault point `run-result-slow` holds the GIL released.
const SLOW_POINT: Duration = Duration::from_secs(2);

/// The fault point `name` (`daisy_core::fault::armed`): where armed, the
/// GIL is released here, as PyO3 releases it to normalise an exception,
/// until the interpreter has begun to finalise (at most [`SLOW_POINT`]):
/// the worst moment for the race a test reproduces with it. A thread that
/// comes back from here into a finalising interpreter is ended by CPython
/// through Rust frames, and the process aborts.
pub fn slow_point(py: Python<'_>, name: &str) {
    if daisy_core::fault::armed(name) {
        py.detach(|| {
            let deadline = Instant::now() + SLOW_POINT;
            // SAFETY: Py_IsInitialized reads a flag and may be called
            // without the GIL
            while unsafe { pyo3::ffi::Py_IsInitialized() } != 0 && Instant::now() < deadline {
                std::thread::sleep(EXIT_POLL);
            }
        });
    }
}

/// `py.detach(f)`, then `then(py, out)` with the GIL back, both counted as
/// [`Busy`]: for a call whose result must be made before the interpreter
/// may finalise. Making it may release the GIL again (PyO3 does, to
/// normalise an exception), and a thread that takes the GIL back after the
/// exit hook let go is ended by CPython through Rust frames (or finds the
/// interpreter gone and panics); once the count drops, the way back to
/// Python must not release the GIL.
pub fn detach_then<T: pyo3::marker::Ungil, R>(
    py: Python<'_>,
    f: impl FnOnce() -> T + pyo3::marker::Ungil,
    then: impl FnOnce(Python<'_>, T) -> R,
) -> PyResult<R> {
    let busy = Busy::enter()?;
    let out = py.detach(f);
    let made = then(py, out);
    drop(busy);
    Ok(made)
}

/// `atexit` callback: mark the interpreter as exiting and wait, with the
/// GIL released, until no run or client call is left in Rust (or
/// [`EXIT_WAIT`] has passed). Returns how many were still busy (0 when all
/// ended).
#[pyfunction]
pub fn at_interpreter_exit(py: Python<'_>) -> usize {
    EXITING.store(true, Ordering::SeqCst);
    let busy = py.detach(|| {
        let deadline = Instant::now() + EXIT_WAIT;
        loop {
            let busy = BUSY.load(Ordering::SeqCst);
            if busy == 0 || Instant::now() >= deadline {
                return busy;
            }
            std::thread::sleep(EXIT_POLL);
        }
    });
    if busy > 0 {
        eprintln!(
            "daisy: the interpreter is exiting while {busy} run(s) or client call(s) in other \
             threads have not stopped after {} s; the process may abort",
            EXIT_WAIT.as_secs()
        );
    }
    busy
}
