//! Redis as a run uses it: the private deployment, the observer, the fault
//! proxy.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fairlock::LockClient;
use redis::aio::MultiplexedConnection;

use crate::private_cluster::PrivateCluster;
use crate::private_sentinel::PrivateSentinel;
use crate::torture_proxy::FaultProxy;
use crate::{Cli, Failure, exit};

use super::{FAIR, PLAIN, Plan, RW, SEM, raw_connection};

/// The private deployment a run uses besides its URL, and the locks it
/// takes.
pub(super) struct Deployment {
    pub(super) sentinel: Option<Arc<Mutex<PrivateSentinel>>>,
    pub(super) cluster: Option<Arc<Mutex<PrivateCluster>>>,
    /// The fair locks the workers take: one, or on a cluster one per master.
    pub(super) fair_locks: Vec<String>,
    /// Cluster: every lock's hash slot.
    pub(super) slots: Vec<(String, u16)>,
}

impl Default for Deployment {
    fn default() -> Self {
        Self {
            sentinel: None,
            cluster: None,
            fair_locks: vec![FAIR.to_owned()],
            slots: Vec::new(),
        }
    }
}

/// The locks of a cluster run: the fair ones, [`FAIR`] then
/// `torture-fair-N` names until every master serves one; and the slot of
/// each lock, [`PLAIN`] included. A lock's keys share the hash tag of its
/// name under both protocols (Redisson's lock key is the bare name, of
/// the same slot).
pub(super) fn spread_locks(
    cluster: &PrivateCluster,
    read_write: bool,
) -> Result<Deployment, String> {
    let masters = cluster.masters()?;
    let mut served = std::collections::HashSet::new();
    let mut fair = Vec::new();
    let mut slots = Vec::new();
    for i in 0..200 {
        if served.len() == masters.len() {
            break;
        }
        let name = if i == 0 {
            FAIR.to_owned()
        } else {
            format!("{FAIR}-{i}")
        };
        let slot = cluster.slot_of(&format!("{{{name}}}"))?;
        if served.insert(cluster.master_of(slot)?) {
            slots.push((name.clone(), slot));
            fair.push(name);
        }
    }
    slots.push((PLAIN.to_owned(), cluster.slot_of(&format!("{{{PLAIN}}}"))?));
    if read_write {
        slots.push((RW.to_owned(), cluster.slot_of(&format!("{{{RW}}}"))?));
    }
    slots.push((SEM.to_owned(), cluster.slot_of(&format!("{{{SEM}}}"))?));
    Ok(Deployment {
        fair_locks: fair,
        slots,
        ..Deployment::default()
    })
}

pub(super) fn lock_cluster(
    cluster: &Mutex<PrivateCluster>,
) -> std::sync::MutexGuard<'_, PrivateCluster> {
    cluster.lock().unwrap_or_else(|e| e.into_inner())
}

/// `call` on the cluster, off the runtime's threads (its calls block, for
/// up to 2 s each on a node that does not answer).
pub(super) async fn on_cluster<T: Send + 'static>(
    cluster: &Arc<Mutex<PrivateCluster>>,
    call: impl FnOnce(&mut PrivateCluster) -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let cluster = Arc::clone(cluster);
    tokio::task::spawn_blocking(move || call(&mut lock_cluster(&cluster)))
        .await
        .map_err(|e| format!("cluster call: {e}"))?
}

pub(super) fn lock_deployment(
    deployment: &Mutex<PrivateSentinel>,
) -> std::sync::MutexGuard<'_, PrivateSentinel> {
    deployment.lock().unwrap_or_else(|e| e.into_inner())
}

/// Redis as the run uses it.
pub(super) struct Stage {
    pub(super) url: String,
    /// Where the workers connect: the fault proxy (Redis itself when
    /// faults are off, or under Sentinel or Cluster).
    pub(super) worker_url: String,
    /// Where the server clock is read: Redis itself, or under Sentinel or
    /// Cluster the deployment's clock server.
    pub(super) clock_url: String,
    /// Cleans the locks up first, then samples the fair queue.
    pub(super) observer: LockClient,
    /// For server time and forged grants (under Sentinel or Cluster: the
    /// clock).
    pub(super) conn: MultiplexedConnection,
    /// Standalone only: the workers' connections go through it.
    pub(super) proxy: Option<FaultProxy>,
    /// Sentinel only: the deployment, for failover faults.
    pub(super) sentinel: Option<Arc<Mutex<PrivateSentinel>>>,
    /// Cluster only: the cluster, for failover faults and migrations.
    pub(super) cluster: Option<Arc<Mutex<PrivateCluster>>>,
    /// The fair locks the workers take.
    pub(super) fair_locks: Vec<String>,
    /// Cluster only: every lock's hash slot.
    pub(super) slots: Vec<(String, u16)>,
    /// A server setting to restore at the end (a server the run did not
    /// start, with --server-faults).
    pub(super) changed: Option<ChangedSetting>,
}

/// Connect, let BUSY scripts answer BUSY after 100 ms, start the fault
/// proxy, and release whatever an earlier run left held.
pub(super) async fn prepare(
    cli: &Cli,
    plan: &Plan,
    url: String,
    deployment: Deployment,
) -> Result<Stage, Failure> {
    let Deployment {
        sentinel,
        cluster,
        fair_locks,
        slots,
    } = deployment;
    let observer = cli
        .connect_with_lease(&url, &plan.settings, plan.lease)
        .await?;
    let clock_url = match (&sentinel, &cluster) {
        (Some(deployment), _) => lock_deployment(deployment).clock_url(),
        (_, Some(cluster)) => lock_cluster(cluster).clock_url(),
        _ => url.clone(),
    };
    let mut conn = raw_connection(&clock_url).await?;
    // A busy script answers BUSY to everyone else after 100 ms: a change
    // of the server, undone at the end when the server is not ours.
    let changed = match plan.server_faults {
        true => ChangedSetting::set(&mut conn, &clock_url, "busy-reply-threshold", "100")
            .await
            .filter(|_| !plan.private),
        false => None,
    };
    // Workers reach a standalone Redis through the fault proxy.
    let proxy = match sentinel.is_some() || cluster.is_some() {
        true => None,
        false => Some(
            FaultProxy::start(observer.config().address())
                .await
                .map_err(|e| {
                    Failure::new(exit::SOFTWARE, format!("cannot start the fault proxy: {e}"))
                })?,
        ),
    };
    let worker_url = match &proxy {
        Some(proxy) if plan.faults => proxy.url(&url),
        _ => url.clone(),
    };
    for key in fair_locks.iter().map(String::as_str).chain([PLAIN]) {
        let _ = observer.fair_lock(key)?.force_unlock().await;
    }
    if plan.read_write() {
        let rw = observer.read_write_lock(RW)?;
        let _ = rw.read().force_unlock().await;
        let _ = rw.write().force_unlock().await;
    }
    Ok(Stage {
        url,
        worker_url,
        clock_url,
        observer,
        conn,
        proxy,
        sentinel,
        cluster,
        fair_locks,
        slots,
        changed,
    })
}

/// A server setting the run changed, with the value to restore.
#[derive(Clone, Debug)]
pub(super) struct ChangedSetting {
    url: String,
    name: &'static str,
    old: String,
}

impl ChangedSetting {
    /// `CONFIG SET name value`, after reading the old value: the change,
    /// or `None` when the server has no such setting or refused.
    async fn set(
        conn: &mut MultiplexedConnection,
        url: &str,
        name: &'static str,
        value: &str,
    ) -> Option<Self> {
        let old: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(name)
            .query_async(conn)
            .await
            .ok()?;
        let old = old.get(1)?.clone();
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query_async::<()>(conn)
            .await
            .ok()?;
        Some(Self {
            url: url.to_owned(),
            name,
            old,
        })
    }

    fn command(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("SET").arg(self.name).arg(&self.old);
        cmd
    }

    /// Set the old value again, retried for 3 s (the run's last BUSY
    /// script may still run); a failure is said on stderr.
    pub(super) async fn restore(&self) {
        let give_up = Instant::now() + Duration::from_secs(3);
        loop {
            let error = match raw_connection(&self.url).await {
                Ok(mut conn) => match self.command().query_async::<()>(&mut conn).await {
                    Ok(()) => return,
                    Err(e) => e.to_string(),
                },
                Err(e) => e.message,
            };
            if Instant::now() >= give_up {
                self.report(&error);
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// [`restore`](Self::restore), blocking, one attempt of at most 2 s
    /// (before exiting at once).
    pub(super) fn restore_blocking(&self) {
        let timeout = Duration::from_secs(2);
        let result = crate::redis_client(self.url.as_str()).and_then(|client| {
            let mut conn = client.get_connection_with_timeout(timeout)?;
            conn.set_read_timeout(Some(timeout))?;
            conn.set_write_timeout(Some(timeout))?;
            self.command().query::<()>(&mut conn)
        });
        if let Err(e) = result {
            self.report(&e.to_string());
        }
    }

    fn report(&self, error: &str) {
        eprintln!(
            "torture: could not restore {} to {:?} on the server: {error}; set it back by hand \
             (CONFIG SET {} {:?})",
            self.name, self.old, self.name, self.old
        );
    }
}
