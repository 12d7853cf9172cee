//! A private `redis-server` for the demo: a free loopback port, a temp dir,
//! no persistence; killed when dropped.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) struct PrivateRedis {
    child: Child,
    _dir: tempfile::TempDir,
    port: u16,
}

impl PrivateRedis {
    pub(crate) fn start() -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix("fairlock-demo-")
            .tempdir()
            .map_err(|e| format!("cannot make a temp dir: {e}"))?;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("cannot find a free port: {e}"))?
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot start redis-server from PATH ({e}); install it \
                     (Debian/Ubuntu: apt-get install redis-server) or pass --redis URL"
                )
            })?;
        let mut server = Self {
            child,
            _dir: dir,
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("redis-server exited at start ({status})"));
            }
            if Instant::now() > deadline {
                return Err("redis-server did not start within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        server.port = port;
        Ok(server)
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
