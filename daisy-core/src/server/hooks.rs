//! [`RunHooks`]: the only calls from the server back into the program that
//! embeds it (in daisy, Python): a ready block's pre-check, a periodic tick,
//! and the moment the server listens. Few and explicit, because each one
//! may take the GIL.

use super::state::RunSnapshot;
use crate::block::Block;
use crate::error::DaisyError;
use std::net::SocketAddr;

/// Calls from the server back into the embedding program. A hook whose
/// user code failed says how: [`DaisyError::UserCode`] (an ordinary
/// error) or [`DaisyError::Stopped`] (an interruption), keeping the error
/// itself for its caller; what follows is the core's rule.
pub trait RunHooks {
    /// Whether a ready block is already done and can be skipped (the
    /// user's check function). What an error does is
    /// [`super::policy::after_check_error`]'s to say.
    fn already_done(&mut self, block: &Block) -> Result<bool, DaisyError>;
    /// Called every [`TICK`](super::TICK); any error stops the run (workers
    /// are killed): the program around the server cannot go on.
    fn tick(&mut self, snapshot: &RunSnapshot) -> Result<(), DaisyError>;
    /// Called once the server listens, before any worker starts.
    fn on_listening(&mut self, _addr: SocketAddr) -> Result<(), DaisyError> {
        Ok(())
    }
}

/// No program around the server: nothing is done already, ticks pass
/// (the unit tests' state machines run without one).
#[cfg(test)]
impl RunHooks for () {
    fn already_done(&mut self, _block: &Block) -> Result<bool, DaisyError> {
        Ok(false)
    }
    fn tick(&mut self, _snapshot: &RunSnapshot) -> Result<(), DaisyError> {
        Ok(())
    }
}
