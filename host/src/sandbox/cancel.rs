//! Cancellation of operator calls: one token per [`Sandbox`](super::Sandbox), set when the
//! user stops a run (Ctrl-C). A call in flight ends as [`OperatorFailure::Cancelled`]
//! (super::OperatorFailure::Cancelled): a guest running wasm code is trapped at its next
//! epoch tick, and a guest blocked in a host call (a train trial, a model request) is
//! dropped, as the timeout would drop it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::Notify;

/// A shared, one-way cancellation flag. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    set: AtomicBool,
    notify: Notify,
}

impl Cancel {
    /// Set the flag and wake every waiter. Idempotent.
    pub fn cancel(&self) {
        self.0.set.store(true, Ordering::SeqCst);
        self.0.notify.notify_waiters();
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.set.load(Ordering::SeqCst)
    }

    /// Completes once the flag is set (at once if it already is).
    pub async fn cancelled(&self) {
        loop {
            // Register before checking, so a `cancel` between the check and the await
            // still wakes this waiter.
            let notified = self.0.notify.notified();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

/// The trap a cancelled guest is stopped with (told apart from a deadline's interrupt).
#[derive(Debug)]
pub(crate) struct CancelledTrap;

impl std::fmt::Display for CancelledTrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the call was cancelled by the host")
    }
}

impl std::error::Error for CancelledTrap {}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_waiter_wakes_when_cancelled_and_a_late_waiter_returns_at_once() {
        let c = Cancel::default();
        assert!(!c.is_cancelled());
        let waiter = tokio::spawn({
            let c = c.clone();
            async move { c.cancelled().await }
        });
        tokio::task::yield_now().await;
        c.cancel();
        waiter.await.unwrap();
        assert!(c.is_cancelled());
        c.cancelled().await;
    }
}
