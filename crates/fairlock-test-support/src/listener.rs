//! A raw subscriber of a channel, for tests that read what the scripts
//! publish.

use std::time::Duration;

use crate::RedisServer;

/// A raw subscriber of `channel` (a plain connection in subscribe mode).
pub struct Listener {
    conn: redis::Connection,
    channel: String,
}

/// Published after the messages a test expects: they all came before it.
const END: &str = "fairlock-test-end";

impl Listener {
    /// Subscribe to `channel` on `server`.
    pub fn new(server: &RedisServer, channel: &str) -> Self {
        let mut conn = server.conn();
        redis::cmd("SUBSCRIBE")
            .arg(channel)
            .exec(&mut conn)
            .expect("subscribe");
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Self {
            conn,
            channel: channel.to_owned(),
        }
    }

    /// The payloads published since the last call.
    pub fn drain(&mut self, server: &RedisServer) -> Vec<String> {
        let _: i64 = server.cmd(&["PUBLISH", &self.channel, END]);
        let mut got = Vec::new();
        loop {
            let Ok(redis::Value::Array(items)) = self.conn.recv_response() else {
                panic!("the marker never came back on {}", self.channel);
            };
            if let [_, _, redis::Value::BulkString(payload)] = items.as_slice() {
                let payload = String::from_utf8_lossy(payload).into_owned();
                if payload == END {
                    return got;
                }
                got.push(payload);
            }
        }
    }
}
