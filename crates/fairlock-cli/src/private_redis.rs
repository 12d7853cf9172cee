//! A private `redis-server` for the demo and the torture: a free loopback
//! port, a temp dir, no persistence; killed when dropped. The torture's
//! Sentinel topology starts several (`private_sentinel.rs`).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) struct PrivateRedis {
    child: Option<Child>,
    dir: tempfile::TempDir,
    port: u16,
    /// What it was started with, after the port and the directory: a
    /// config file (for Sentinel) first, then options.
    config: Option<String>,
}

impl PrivateRedis {
    pub(crate) fn start() -> Result<Self, String> {
        Self::start_with(None, &[])
    }

    /// Start with a config file of `config`'s contents (written in the temp
    /// dir; a sentinel rewrites it) and `extra` options.
    pub(crate) fn start_with(config: Option<&str>, extra: &[&str]) -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix("fairlock-demo-")
            .tempdir()
            .map_err(|e| format!("cannot make a temp dir: {e}"))?;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("cannot find a free port: {e}"))?
            .port();
        let mut server = Self {
            child: None,
            dir,
            port,
            config: config.map(str::to_owned),
        };
        server.spawn(extra)?;
        Ok(server)
    }

    /// Start the process (again, on the same port) with `extra` options.
    pub(crate) fn spawn(&mut self, extra: &[&str]) -> Result<(), String> {
        self.kill();
        let mut command = Command::new("redis-server");
        if let Some(config) = &self.config {
            let path = self.dir.path().join("server.conf");
            std::fs::write(&path, config).map_err(|e| format!("cannot write a config: {e}"))?;
            command.arg(path);
        }
        let child = command
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(extra)
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
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                return Err(format!("redis-server exited at start ({status})"));
            }
            if Instant::now() > deadline {
                return Err("redis-server did not start within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// The process id, while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL the process and reap it.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.kill();
    }
}
