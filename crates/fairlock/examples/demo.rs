//! Several tasks on two clients queue for one fair lock and are served in
//! the order they queued.
//!
//! ```text
//! cargo run -p fairlock --example demo            # private redis-server on a free port
//! REDIS_URL=redis://host:6379 cargo run -p fairlock --example demo
//! ```

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fairlock::LockClient;

/// A private redis-server on a free loopback port, killed on drop.
struct PrivateRedis {
    child: Child,
    _dir: tempfile::TempDir,
    port: u16,
}

impl PrivateRedis {
    fn start() -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!("cannot start redis-server ({e}); install it (apt-get install redis-server) or set REDIS_URL")
            })?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err("redis-server did not start within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Self {
            child,
            _dir: dir,
            port,
        })
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = match std::env::var("REDIS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = PrivateRedis::start()?;
            println!(
                "started a private redis-server on 127.0.0.1:{}",
                server.port
            );
            (format!("redis://127.0.0.1:{}", server.port), Some(server))
        }
    };
    let clients = [
        LockClient::connect(&url).await?,
        LockClient::connect(&url).await?,
    ];
    let name = "fairlock-demo";
    let lock = clients[0].fair_lock(name)?;
    let holder = lock.lock().await?;
    println!("main holds {name:?}; six workers queue behind it, one at a time");

    let served = Arc::new(Mutex::new(Vec::new()));
    let mut workers = Vec::new();
    for worker in 0..6 {
        let worker_lock = clients[worker % 2].fair_lock(name)?;
        let served = Arc::clone(&served);
        workers.push(tokio::spawn(async move {
            let guard = worker_lock.lock().await?;
            println!("  worker {worker} (client {}) holds the lock", worker % 2);
            served
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(worker);
            tokio::time::sleep(Duration::from_millis(100)).await;
            guard.unlock().await
        }));
        // Wait until this worker is queued before starting the next one.
        loop {
            let queued = lock.inspect().await?.queue.len();
            if queued == worker + 1 {
                println!("  worker {worker} queued at position {queued}");
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    println!("main releases");
    holder.unlock().await?;
    for worker in workers {
        worker.await??;
    }
    let served = served.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let in_order = served.windows(2).all(|w| w[0] < w[1]);
    println!(
        "served in order {served:?}: {}",
        if in_order {
            "FIFO held"
        } else {
            "ORDER VIOLATED"
        }
    );
    if !in_order {
        std::process::exit(1);
    }
    Ok(())
}
