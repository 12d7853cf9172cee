//! What a pub/sub connection yields: a message (its channel and payload),
//! or word that messages were dropped.

use std::sync::Arc;

use redis::PushKind;

/// What a pub/sub stream yields.
pub(crate) enum Incoming {
    Message(Message),
    /// Messages were dropped (more arrived than the client could take):
    /// any channel may have missed one.
    Overflowed,
}

/// One message: its channel and payload (not UTF-8: replaced lossily).
pub(crate) struct Message {
    pub(crate) channel: String,
    pub(crate) payload: Arc<str>,
}

impl Message {
    /// The message a push carries, if it is one (`message`, `smessage`).
    pub(super) fn of_push(push: redis::PushInfo) -> Option<Self> {
        if !matches!(push.kind, PushKind::Message | PushKind::SMessage) {
            return None;
        }
        let mut data = push.data.into_iter();
        let (channel, payload) = (text(data.next()?)?, text(data.next()?)?);
        Some(Self {
            channel,
            payload: payload.into(),
        })
    }
}

/// A channel name or payload (not UTF-8: replaced lossily).
pub(super) fn text(value: redis::Value) -> Option<String> {
    match value {
        redis::Value::BulkString(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        redis::Value::SimpleString(text) => Some(text),
        _ => None,
    }
}
