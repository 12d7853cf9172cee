//! The blocking leader election: [`Election`], [`Leadership`] and
//! [`LeaderChanges`], each blocking on the client's runtime (see
//! [`crate::Election`]).

use std::sync::Arc;
use std::time::Duration;

use super::{LockClient, Lost, OwnedRuntime, block_on, in_async_context};
use crate::error::Result;
use crate::{Leader, Owner};

impl LockClient {
    /// The leader election `name` on the fair lock of the same name; see
    /// [`crate::LockClient::election`].
    ///
    /// # Errors
    /// As [`crate::LockClient::election`].
    pub fn election(&self, name: &str) -> Result<Election> {
        Ok(Election {
            election: self.client.election(name)?,
            runtime: Arc::clone(&self.runtime),
        })
    }
}

/// A blocking leader election; see [`crate::Election`]. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Election {
    election: crate::Election,
    runtime: Arc<OwnedRuntime>,
}

impl Election {
    /// The election's name.
    pub fn name(&self) -> &str {
        self.election.name()
    }

    fn leadership(&self, leadership: crate::Leadership) -> Leadership {
        Leadership {
            leadership: Some(leadership),
            runtime: Arc::clone(&self.runtime),
        }
    }

    /// Block until this candidate leads; see [`crate::Election::campaign`].
    ///
    /// # Errors
    /// As [`crate::Election::campaign`]; [`Error::InvalidConfig`](crate::Error::InvalidConfig)
    /// inside an async runtime.
    pub fn campaign(&self, value: &str) -> Result<Leadership> {
        let leadership = block_on(&self.runtime, self.election.campaign(value))??;
        Ok(self.leadership(leadership))
    }

    /// Block at most `wait` for the leadership; `None` when not granted in
    /// time (the candidate has left the line). See
    /// [`crate::Election::try_campaign_for`].
    ///
    /// # Errors
    /// As [`campaign`](Self::campaign).
    pub fn try_campaign_for(&self, value: &str, wait: Duration) -> Result<Option<Leadership>> {
        let leadership = block_on(&self.runtime, self.election.try_campaign_for(value, wait))??;
        Ok(leadership.map(|l| self.leadership(l)))
    }

    /// Who leads now; see [`crate::Election::leader`].
    ///
    /// # Errors
    /// As [`crate::Election::leader`].
    pub fn leader(&self) -> Result<Option<Leader>> {
        block_on(&self.runtime, self.election.leader())?
    }

    /// Watch the leader change; see [`crate::Election::observe`].
    ///
    /// # Errors
    /// As [`crate::Election::observe`].
    pub fn observe(&self) -> Result<LeaderChanges> {
        let changes = block_on(&self.runtime, self.election.observe())??;
        Ok(LeaderChanges {
            changes,
            runtime: Arc::clone(&self.runtime),
        })
    }
}

/// A blocking leadership; see [`crate::Leadership`]. Dropping it resigns
/// before returning (blocking the thread until Redis answered, within the
/// retry budget), as a blocking guard releases.
#[must_use = "dropping a leadership resigns right away"]
#[derive(Debug)]
pub struct Leadership {
    leadership: Option<crate::Leadership>,
    runtime: Arc<OwnedRuntime>,
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(leadership) = self.leadership.take() {
            // Inside an async context the async leadership's drop resigns in
            // the background instead. A resignation that fails leaves the
            // lock to its lease (and is recorded where it failed).
            if !in_async_context() {
                let _ = block_on(&self.runtime, leadership.resign());
            }
        }
    }
}

impl Leadership {
    fn held(&self) -> &crate::Leadership {
        match &self.leadership {
            Some(leadership) => leadership,
            None => unreachable!("a blocking leadership is emptied only as it goes"),
        }
    }

    /// The term; see [`crate::Leadership::term`].
    pub fn term(&self) -> u64 {
        self.held().term()
    }

    /// The hold's owner.
    pub fn owner(&self) -> &Owner {
        self.held().owner()
    }

    /// `false` once the leadership is known lost or may be. Never blocks.
    pub fn is_leader(&self) -> bool {
        self.held().is_leader()
    }

    /// The lost-leadership signal, for any thread to wait on; see
    /// [`crate::Leadership::lost`].
    pub fn lost(&self) -> Lost {
        Lost {
            lost: std::sync::Mutex::new(Box::pin(self.held().lost())),
            runtime: Arc::clone(&self.runtime),
        }
    }

    /// Publish a new value; see [`crate::Leadership::proclaim`].
    ///
    /// # Errors
    /// As [`crate::Leadership::proclaim`].
    pub fn proclaim(&self, value: &str) -> Result<()> {
        block_on(&self.runtime, self.held().proclaim(value))?
    }

    /// Give the leadership up; see [`crate::Leadership::resign`].
    ///
    /// # Errors
    /// As [`crate::Leadership::resign`].
    pub fn resign(mut self) -> Result<()> {
        match self.leadership.take() {
            Some(leadership) => block_on(&self.runtime, leadership.resign())?,
            None => Ok(()),
        }
    }
}

/// The leader's changes, blocking; see [`crate::LeaderChanges`]. An
/// endless iterator: each `next` blocks until the next change, `Some(Ok(None))`
/// when nobody leads any more, `Some(Err(_))` when reading failed (the next
/// call reads again).
#[derive(Debug)]
pub struct LeaderChanges {
    changes: crate::LeaderChanges,
    runtime: Arc<OwnedRuntime>,
}

impl LeaderChanges {
    /// Block at most `timeout` for the next change: `Ok(None)` when none
    /// came in time, `Ok(Some(change))` otherwise.
    ///
    /// # Errors
    /// As [`crate::LeaderChanges::next`].
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<Option<Leader>>> {
        let changes = &mut self.changes;
        match block_on(&self.runtime, async {
            tokio::time::timeout(timeout, changes.next()).await
        })? {
            Ok(change) => change.map(Some),
            Err(_) => Ok(None),
        }
    }
}

impl Iterator for LeaderChanges {
    type Item = Result<Option<Leader>>;

    /// Block until the next change; see [`crate::LeaderChanges::next`].
    /// Never `None`.
    fn next(&mut self) -> Option<Self::Item> {
        Some(block_on(&self.runtime, self.changes.next()).and_then(|change| change))
    }
}
