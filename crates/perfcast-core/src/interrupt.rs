//! The process's one interrupt token: set once (by the CLI's Ctrl-C handler), read by every
//! long step between units of work, so a stop request reaches whichever step is running.

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Asks every long step of this process to stop at its next check; it stays asked.
pub fn request() {
    REQUESTED.store(true, Ordering::SeqCst);
}

/// Whether a stop was asked for.
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}

/// The token itself, for steps that take a stop flag as a parameter (so their tests can pass
/// their own).
pub fn token() -> &'static AtomicBool {
    &REQUESTED
}
