//! Fault injection: named points in the core's multi-step file operations
//! (a migration of the tracking store, say) where a test can make the
//! driver die as a power cut or `kill -9` would, to check that what the
//! next run finds is consistent.
//!
//! A process whose environment has `DAISY_FAULT_POINT=<name>` kills itself
//! with SIGKILL when it reaches the point of that name: no destructor, no
//! flush, exactly what a crash leaves. The variable is read once per
//! process, so an unarmed point costs one atomic load; points sit only on
//! rare paths (never per block). Unit tests arm a point for their own
//! thread with [`arm`] instead, and the point then returns an error, which
//! stops the operation right there without killing the test runner.
//! A few points slow a step down instead ([`armed`]): the bindings' point
//! `run-result-slow` releases the GIL for a moment where a finished run's
//! result is built, as normalising a Python exception does, so that a test
//! can make the interpreter finalise in that moment.

use crate::error::DaisyError;
use std::sync::OnceLock;

/// The environment variable that names the point to die at.
pub const FAULT_POINT_VAR: &str = "DAISY_FAULT_POINT";

fn armed_by_environment() -> Option<&'static str> {
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            std::env::var(FAULT_POINT_VAR)
                .ok()
                .filter(|s| !s.is_empty())
        })
        .as_deref()
}

#[cfg(test)]
thread_local! {
    static ARMED_HERE: std::cell::RefCell<Option<&'static str>> =
        const { std::cell::RefCell::new(None) };
}

/// Arm the point `name` for the calling thread (tests only): reaching it
/// returns an error instead of killing the process.
#[cfg(test)]
pub fn arm(name: &'static str) {
    ARMED_HERE.with(|a| *a.borrow_mut() = Some(name));
}

/// Whether the process's environment names the point `name`: for points
/// that slow a step down (to widen a race a test reproduces) instead of
/// killing the process.
pub fn armed(name: &str) -> bool {
    armed_by_environment() == Some(name)
}

/// The fault point `name`: dies (SIGKILL) when the process was told to,
/// an error when a unit test armed it, nothing otherwise.
pub fn point(name: &str) -> Result<(), DaisyError> {
    #[cfg(test)]
    if ARMED_HERE.with(|a| *a.borrow() == Some(name)) {
        return Err(DaisyError::Io(format!("fault injected at {name}")));
    }
    if armed_by_environment() == Some(name) {
        tracing::warn!("{FAULT_POINT_VAR}={name}: killing this process here");
        // SAFETY: raising a signal at ourselves touches no memory
        unsafe {
            libc::raise(libc::SIGKILL);
        }
    }
    Ok(())
}
