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
mod endpoint;
mod errors;
mod pubsub;
mod pushes;
mod resp2;
mod sentinel;
mod sharded;

pub(crate) use connection::{Connection, HoldProof, Ints, Script, Timeouts};
pub(crate) use endpoint::{Endpoint, URL_FORMS};
pub(crate) use pubsub::{Incoming, Message, PubSubConnector, PubSubSink};
