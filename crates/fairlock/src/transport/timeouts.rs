//! The client's limits on connecting and on each reply, shared by every
//! connection the transport opens.

use std::time::Duration;

/// How long connecting and each reply may take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub(crate) connect: Duration,
    pub(crate) response: Duration,
}
