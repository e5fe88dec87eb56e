//! How long a blocking call may wait, in either mode, and parking a task's waker (the
//! tokio feature).

#[cfg(feature = "tokio")]
use std::sync::{Mutex, PoisonError};
#[cfg(feature = "tokio")]
use std::task::{Context, Waker};
use std::time::Duration;

/// How long a call may wait.
#[derive(Clone, Copy)]
pub(crate) enum Wait {
    No,
    For(Duration),
    Forever,
}

#[cfg(feature = "tokio")]
/// Park `cx`'s waker in `slot`.
pub(crate) fn park(slot: &Mutex<Option<Waker>>, cx: &Context<'_>) {
    let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
    match &*slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}
