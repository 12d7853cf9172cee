//! The keys a server wrote, as its keyspace events tell them: for keys
//! that live too briefly to be seen with `KEYS` (a release's cached answer,
//! deleted once it was read).

use std::time::Duration;

use crate::RedisServer;

/// A connection subscribed to every key event of a server (it turns
/// `notify-keyspace-events` on).
pub struct KeyEvents {
    conn: redis::Connection,
    marker: String,
}

impl KeyEvents {
    /// Subscribe; events from then on are seen.
    pub fn start(server: &RedisServer) -> Self {
        let _: () = server.cmd(&["CONFIG", "SET", "notify-keyspace-events", "EA"]);
        let mut conn = server.conn();
        redis::cmd("PSUBSCRIBE")
            .arg("__keyevent@*__:*")
            .exec(&mut conn)
            .expect("psubscribe");
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        Self {
            conn,
            marker: format!("fairlock-test-events-{}", std::process::id()),
        }
    }

    /// Every (event, key) since the last call, in order (`set`, `del`,
    /// `expire`, `hset`...).
    pub fn drain(&mut self, server: &RedisServer) -> Vec<(String, String)> {
        // A write of a marker key: every event before it came before it.
        let _: () = server.cmd(&["SET", &self.marker, "1"]);
        let mut events = Vec::new();
        loop {
            let Ok(redis::Value::Array(items)) = self.conn.recv_response() else {
                panic!("the marker's key event never came");
            };
            let [
                _,
                _,
                redis::Value::BulkString(channel),
                redis::Value::BulkString(key),
            ] = items.as_slice()
            else {
                continue;
            };
            let event = String::from_utf8_lossy(channel);
            let event = event.rsplit(':').next().unwrap_or_default().to_owned();
            let key = String::from_utf8_lossy(key).into_owned();
            if key == self.marker {
                if event == "set" {
                    let _: i64 = server.cmd(&["DEL", &self.marker]);
                    return events;
                }
                continue;
            }
            events.push((event, key));
        }
    }
}
