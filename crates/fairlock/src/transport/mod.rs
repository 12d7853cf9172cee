//! The transport layer: the only module that names the Redis client
//! library's types. It parses endpoints, opens the command connection and
//! pub/sub connections, runs scripts and commands, and maps the client's
//! errors to [`Error`](crate::Error).
//!
//! Sentinel and Cluster endpoints plug in here: an [`Endpoint`] variant, a
//! command connection that routes by key, and pub/sub connections that
//! follow the master (or the shard of a channel).

mod cluster;
mod connection;
mod direct;
mod endpoint;
mod errors;
mod eviction;
mod messages;
mod pubsub;
mod pushes;
mod replica_sync;
mod resp2;
mod script;
mod sentinel;
mod server_pubsub;
mod sharded;
mod timeouts;
mod url;

pub(crate) use connection::Connection;
pub(crate) use endpoint::{Endpoint, URL_FORMS};
pub(crate) use messages::{Incoming, Message};
pub(crate) use pubsub::{PubSubConnector, PubSubSink};
pub(crate) use replica_sync::{HoldProof, HoldsFn, ProofCheck};
pub(crate) use script::{Ints, Script};
pub(crate) use timeouts::Timeouts;
