//! [`DisarmOnDrop`]: undo a side effect when a future is cancelled.
//!
//! Every "if the caller goes away, clean up" in the crate is one of these:
//! leaving the queue when a wait is dropped, undoing an attempt whose reply
//! nobody read, sending a release again when `unlock` is dropped, releasing
//! a hold whose guard is dropped. The clean-up runs exactly once: on drop,
//! unless [`disarm`](DisarmOnDrop::disarm) was called first.

/// A value with a clean-up that runs when it is dropped, unless disarmed.
pub(crate) struct DisarmOnDrop<T> {
    value: T,
    cleanup: Option<fn(&mut T)>,
}

impl<T> DisarmOnDrop<T> {
    /// Arm `cleanup` for `value`. The clean-up must not block: it spawns
    /// what takes time.
    pub(crate) fn new(value: T, cleanup: fn(&mut T)) -> Self {
        Self {
            value,
            cleanup: Some(cleanup),
        }
    }

    /// The side effect happened or was undone by other means: no clean-up.
    pub(crate) fn disarm(&mut self) {
        self.cleanup = None;
    }

    /// `true` until disarmed or cleaned up.
    #[cfg(test)]
    pub(crate) fn is_armed(&self) -> bool {
        self.cleanup.is_some()
    }

    pub(crate) fn get(&self) -> &T {
        &self.value
    }

    pub(crate) fn get_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T> Drop for DisarmOnDrop<T> {
    fn drop(&mut self) {
        if let Some(cleanup) = self.cleanup.take() {
            cleanup(&mut self.value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn cleans_up_once_unless_disarmed() {
        let count = Arc::new(AtomicUsize::new(0));
        let bump: fn(&mut Arc<AtomicUsize>) = |c| {
            c.fetch_add(1, Ordering::SeqCst);
        };
        drop(DisarmOnDrop::new(Arc::clone(&count), bump));
        assert_eq!(count.load(Ordering::SeqCst), 1);
        let mut disarmed = DisarmOnDrop::new(Arc::clone(&count), bump);
        assert!(disarmed.is_armed());
        disarmed.disarm();
        assert!(!disarmed.is_armed());
        drop(disarmed);
        assert_eq!(count.load(Ordering::SeqCst), 1);
    }
}
