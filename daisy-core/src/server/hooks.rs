//! [`RunHooks`] and [`BlockCheck`]: the only calls from the server back
//! into the program that embeds it (in daisy, Python): a periodic tick and
//! the moment the server listens, on the server's thread, and a ready
//! block's pre-check ([`BlockCheck`], defined with the stage that asks it),
//! on a thread of its own (see [`super::checks`]). Few
//! and explicit, because each one may take the GIL.

use super::checks::BlockCheck;
use super::state::RunSnapshot;
use crate::error::DaisyError;
use std::net::SocketAddr;
use std::sync::Arc;

/// Calls from the server back into the embedding program. A hook whose
/// user code failed says how: [`DaisyError::UserCode`] (an ordinary
/// error) or [`DaisyError::Stopped`] (an interruption), keeping the error
/// itself for its caller; what follows is the core's rule.
pub trait RunHooks {
    /// The tasks' check functions, if any task has one: asked off the
    /// server's thread.
    fn block_check(&self) -> Option<Arc<dyn BlockCheck>> {
        None
    }
    /// Called every [`TICK`](super::TICK); any error stops the run (workers
    /// are killed): the program around the server cannot go on.
    fn tick(&mut self, snapshot: &RunSnapshot) -> Result<(), DaisyError>;
    /// Called once the server listens, before any worker starts.
    fn on_listening(&mut self, _addr: SocketAddr) -> Result<(), DaisyError> {
        Ok(())
    }
}

/// No program around the server: nothing is checked, ticks pass (the unit
/// tests' state machines run without one).
#[cfg(test)]
impl RunHooks for () {
    fn tick(&mut self, _snapshot: &RunSnapshot) -> Result<(), DaisyError> {
        Ok(())
    }
}
