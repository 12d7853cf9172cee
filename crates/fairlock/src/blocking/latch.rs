//! The blocking count-down latch (see [`crate::CountDownLatch`]).

use std::sync::Arc;
use std::time::Duration;

use super::{LockClient, OwnedRuntime, block_on};
use crate::error::Result;

/// A blocking count-down latch (see [`crate::CountDownLatch`] for its
/// rules and keys).
///
/// ```no_run
/// # fn main() -> fairlock::Result<()> {
/// let client = fairlock::blocking::LockClient::connect("redis://127.0.0.1:6379")?;
/// let ready = client.count_down_latch("workers-ready")?;
/// ready.try_set_count(2)?;
/// ready.count_down()?;
/// ready.count_down()?;
/// ready.wait()?; // the count is 0: returns at once
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct CountDownLatch {
    latch: crate::CountDownLatch,
    runtime: Arc<OwnedRuntime>,
}

impl LockClient {
    /// The count-down latch `name`; see [`crate::CountDownLatch`].
    ///
    /// ```no_run
    /// # fn demo(client: fairlock::blocking::LockClient) -> fairlock::Result<()> {
    /// let ready = client.count_down_latch("ready")?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`crate::LockClient::count_down_latch`].
    pub fn count_down_latch(&self, name: &str) -> Result<CountDownLatch> {
        Ok(CountDownLatch {
            latch: self.client.count_down_latch(name)?,
            runtime: Arc::clone(&self.runtime),
        })
    }
}

impl CountDownLatch {
    /// The latch's name.
    ///
    /// ```no_run
    /// # fn demo(latch: fairlock::blocking::CountDownLatch) {
    /// println!("{}", latch.name());
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.latch.name()
    }

    /// Set the count if the latch is open.
    ///
    /// ```no_run
    /// # fn demo(latch: fairlock::blocking::CountDownLatch) -> fairlock::Result<()> {
    /// let set = latch.try_set_count(3)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`crate::CountDownLatch::try_set_count`].
    pub fn try_set_count(&self, count: u64) -> Result<bool> {
        block_on(&self.runtime, self.latch.try_set_count(count))?
    }

    /// Set the count if the latch is open, its keys living `expiry`.
    ///
    /// ```no_run
    /// # fn demo(latch: fairlock::blocking::CountDownLatch) -> fairlock::Result<()> {
    /// latch.try_set_count_with_expiry(3, std::time::Duration::from_secs(3600))?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`crate::CountDownLatch::try_set_count_with_expiry`].
    pub fn try_set_count_with_expiry(&self, count: u64, expiry: Duration) -> Result<bool> {
        block_on(
            &self.runtime,
            self.latch.try_set_count_with_expiry(count, expiry),
        )?
    }

    /// Count down once; the count after it.
    ///
    /// ```no_run
    /// # fn demo(latch: fairlock::blocking::CountDownLatch) -> fairlock::Result<()> {
    /// let left = latch.count_down()?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`crate::CountDownLatch::count_down`].
    pub fn count_down(&self) -> Result<u64> {
        block_on(&self.runtime, self.latch.count_down())?
    }

    /// Count down once as `party`, at most once per party.
    ///
    /// ```no_run
    /// # fn demo(latch: fairlock::blocking::CountDownLatch) -> fairlock::Result<()> {
    /// latch.count_down_as("worker-1")?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`crate::CountDownLatch::count_down_as`].
    pub fn count_down_as(&self, party: &str) -> Result<u64> {
        block_on(&self.runtime, self.latch.count_down_as(party))?
    }

    /// The count now.
    ///
    /// ```no_run
    /// # fn demo(latch: fairlock::blocking::CountDownLatch) -> fairlock::Result<()> {
    /// println!("{} to go", latch.count()?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`crate::CountDownLatch::count`].
    pub fn count(&self) -> Result<u64> {
        block_on(&self.runtime, self.latch.count())?
    }

    /// The latch's state.
    ///
    /// ```no_run
    /// # fn demo(latch: fairlock::blocking::CountDownLatch) -> fairlock::Result<()> {
    /// println!("{:?}", latch.inspect()?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`crate::CountDownLatch::inspect`].
    pub fn inspect(&self) -> Result<crate::LatchInfo> {
        block_on(&self.runtime, self.latch.inspect())?
    }

    /// Delete the latch, which opens it.
    ///
    /// ```no_run
    /// # fn demo(latch: fairlock::blocking::CountDownLatch) -> fairlock::Result<()> {
    /// latch.delete()?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`crate::CountDownLatch::delete`].
    pub fn delete(&self) -> Result<bool> {
        block_on(&self.runtime, self.latch.delete())?
    }

    /// Block until the count is 0.
    ///
    /// ```no_run
    /// # fn demo(latch: fairlock::blocking::CountDownLatch) -> fairlock::Result<()> {
    /// latch.wait()?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`crate::CountDownLatch::wait`].
    pub fn wait(&self) -> Result<()> {
        block_on(&self.runtime, self.latch.wait())?
    }

    /// Block at most `timeout` until the count is 0: `true` when it is.
    ///
    /// ```no_run
    /// # fn demo(latch: fairlock::blocking::CountDownLatch) -> fairlock::Result<()> {
    /// let opened = latch.wait_for(std::time::Duration::from_secs(30))?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`crate::CountDownLatch::wait_for`].
    pub fn wait_for(&self, timeout: Duration) -> Result<bool> {
        block_on(&self.runtime, self.latch.wait_for(timeout))?
    }
}
