//! [`RunHooks`]: the only calls from the server back into the program that
//! embeds it (in daisy, Python): a ready block's pre-check, a periodic tick,
//! and the moment the server listens. Few and explicit, because each one
//! may take the GIL.

use super::state::RunSnapshot;
use crate::block::Block;
use crate::error::DaisyError;
use std::net::SocketAddr;

/// Calls from the server back into the embedding program. A hook stops the
/// run by returning an error (by convention [`DaisyError::Stopped`], the
/// hook keeping its own error for its caller).
pub trait RunHooks {
    /// Whether a ready block is already done and can be skipped (the
    /// user's check function). [`DaisyError::Stopped`] stops the run (the
    /// check was interrupted: Ctrl-C); any other error is logged and the
    /// block runs.
    fn already_done(&mut self, block: &Block) -> Result<bool, DaisyError>;
    /// Called every [`TICK`](super::TICK); an error stops the run (workers are killed).
    fn tick(&mut self, snapshot: &RunSnapshot) -> Result<(), DaisyError>;
    /// Called once the server listens, before any worker starts.
    fn on_listening(&mut self, _addr: SocketAddr) -> Result<(), DaisyError> {
        Ok(())
    }
}
