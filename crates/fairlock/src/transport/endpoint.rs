//! Where the Redis server is and how to reach it: the parsed URL and the
//! TLS material, and the Redis clients built from them.

use std::sync::Arc;

use super::url::{Seeds, SentinelSpec, parse_seeds, parse_sentinel_url};
use crate::error::{Error, Result};

/// The accepted URL forms, for messages.
pub(crate) const URL_FORMS: &str = "redis://[USER[:PASSWORD]@]HOST[:PORT][/DB], \
     rediss://... (the same, over TLS), redis+unix:///PATH/TO/SOCKET[?db=DB], \
     redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB], \
     rediss+sentinel://... (the same, over TLS), \
     redis+cluster://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...] or \
     rediss+cluster://... (the same, over TLS)";

/// Where the data is: one server, or a master found through sentinels.
/// `info` holds the data nodes' settings (database, credentials, TLS); for
/// Sentinel its address is the first sentinel's, replaced by the master's
/// once it is resolved.
#[derive(Clone)]
pub(crate) struct Endpoint {
    info: redis::ConnectionInfo,
    topology: Topology,
    #[cfg(feature = "tls")]
    tls: Option<TlsFiles>,
}

/// The shape of the deployment an endpoint names.
#[derive(Clone)]
pub(crate) enum Topology {
    /// One server.
    Standalone,
    /// A master with replicas behind sentinels (`redis+sentinel://`).
    Sentinel(Arc<SentinelSpec>),
    /// A Redis Cluster, through its seeds (`redis+cluster://`); `info` is
    /// the first seed.
    Cluster(Seeds),
}

/// Private CA and client certificate for `rediss://`.
#[cfg(feature = "tls")]
#[derive(Clone, Default)]
struct TlsFiles {
    root_cert: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

impl Endpoint {
    /// Parse a Redis URL; the error names the problem and the accepted forms,
    /// and never shows the password.
    pub(crate) fn parse(url: &str) -> Result<Self> {
        use redis::IntoConnectionInfo;
        let invalid = |problem: String| {
            Error::InvalidConfig(format!(
                "Redis URL {:?} is not valid ({problem}); use {URL_FORMS}",
                redact_password(url),
            ))
        };
        if let Some(seeds) = parse_seeds(url) {
            let seeds = seeds.map_err(invalid)?;
            return Ok(Self {
                info: seeds.nodes[0].clone(),
                topology: Topology::Cluster(seeds),
                #[cfg(feature = "tls")]
                tls: None,
            });
        }
        if let Some(parsed) = parse_sentinel_url(url).map_err(invalid)? {
            let (host, port) = parsed.spec.sentinels[0].clone();
            let mut settings = redis::RedisConnectionInfo::default().set_db(parsed.db);
            if let Some(user) = &parsed.username {
                settings = settings.set_username(user);
            }
            if let Some(password) = &parsed.password {
                settings = settings.set_password(password);
            }
            let info = data_node_addr(parsed.spec.tls, host, port)
                .into_connection_info()
                .map_err(|e| invalid(e.to_string()))?
                .set_redis_settings(settings);
            return Ok(Self {
                info,
                topology: Topology::Sentinel(Arc::new(parsed.spec)),
                #[cfg(feature = "tls")]
                tls: None,
            });
        }
        let info = url.into_connection_info().map_err(|e| {
            Error::InvalidConfig(format!(
                "Redis URL {:?} is not valid ({}); use {URL_FORMS}",
                redact_password(url),
                url_problem(url, &e),
            ))
        })?;
        Ok(Self {
            info,
            topology: Topology::Standalone,
            #[cfg(feature = "tls")]
            tls: None,
        })
    }

    /// The shape of the deployment.
    pub(crate) fn topology(&self) -> &Topology {
        &self.topology
    }

    /// `host:port` (or the socket path); for Sentinel, the service and the
    /// sentinels.
    pub(crate) fn address(&self) -> String {
        match &self.topology {
            Topology::Standalone => self.info.addr().to_string(),
            Topology::Sentinel(spec) => spec.describe(),
            Topology::Cluster(seeds) => seeds
                .nodes
                .iter()
                .map(|info| info.addr().to_string())
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    /// The TLS files as the Redis client takes them, when set.
    #[cfg(feature = "tls")]
    pub(super) fn tls_certificates(&self) -> Option<redis::TlsCertificates> {
        let tls = self.tls.as_ref()?;
        Some(redis::TlsCertificates {
            client_tls: tls
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: tls.root_cert.clone(),
        })
    }

    /// Credentials for the sentinels themselves (Sentinel endpoints only;
    /// ignored for others). An empty user name means the default user.
    pub(crate) fn set_sentinel_auth(&mut self, username: String, password: String) {
        if let Topology::Sentinel(spec) = &mut self.topology {
            let user = (!username.is_empty()).then_some(username);
            Arc::make_mut(spec).auth = Some((user, password));
        }
    }

    /// `true` when sentinel credentials are set.
    pub(crate) fn has_sentinel_auth(&self) -> bool {
        matches!(&self.topology, Topology::Sentinel(spec) if spec.auth.is_some())
    }

    /// A standalone endpoint for the data node at `host:port`, with this
    /// endpoint's database, credentials and TLS files.
    pub(super) fn for_data_node(&self, host: &str, port: u16) -> Endpoint {
        let tls = matches!(&self.topology, Topology::Sentinel(spec) if spec.tls)
            || matches!(self.info.addr(), redis::ConnectionAddr::TcpTls { .. });
        Endpoint {
            info: self
                .info
                .clone()
                .set_addr(data_node_addr(tls, host.to_owned(), port)),
            topology: Topology::Standalone,
            #[cfg(feature = "tls")]
            tls: self.tls.clone(),
        }
    }

    /// A client for the sentinel at `host:port`: the sentinels' own
    /// credentials (none unless set), database 0, this endpoint's TLS files.
    pub(super) fn sentinel_client(
        &self,
        spec: &SentinelSpec,
        host: &str,
        port: u16,
    ) -> Result<redis::Client> {
        let mut settings = redis::RedisConnectionInfo::default();
        if let Some((user, password)) = &spec.auth {
            if let Some(user) = user {
                settings = settings.set_username(user);
            }
            settings = settings.set_password(password);
        }
        let info = self
            .info
            .clone()
            .set_addr(data_node_addr(spec.tls, host.to_owned(), port))
            .set_redis_settings(settings);
        self.client_for(info)
    }

    /// The database number.
    pub(crate) fn db(&self) -> i64 {
        self.info.redis_settings().db()
    }

    /// The user name, when one is set.
    pub(crate) fn username(&self) -> Option<&str> {
        self.info.redis_settings().username()
    }

    /// `true` when a password is set (it is never shown).
    pub(crate) fn has_password(&self) -> bool {
        self.info.redis_settings().password().is_some()
    }

    #[cfg(feature = "tls")]
    pub(crate) fn set_tls_root_certificate(&mut self, pem: Vec<u8>) {
        self.tls.get_or_insert_with(TlsFiles::default).root_cert = Some(pem);
    }

    #[cfg(feature = "tls")]
    pub(crate) fn set_tls_client_certificate(&mut self, cert_pem: Vec<u8>, key_pem: Vec<u8>) {
        self.tls.get_or_insert_with(TlsFiles::default).client = Some((cert_pem, key_pem));
    }

    /// Which TLS files are set, for `Debug`.
    pub(crate) fn tls_files_summary(&self) -> &'static str {
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            return match (tls.root_cert.is_some(), tls.client.is_some()) {
                (true, true) => "root certificate, client certificate",
                (true, false) => "root certificate",
                (false, true) => "client certificate",
                (false, false) => "none",
            };
        }
        "none"
    }

    /// A Redis client for this endpoint.
    pub(super) fn redis_client(&self) -> Result<redis::Client> {
        self.client_for(self.info.clone())
    }

    /// The same, on database 0 (the probe selects the database itself, so
    /// that a missing database is told apart from a refused handshake).
    pub(super) fn probe_client(&self) -> Result<redis::Client> {
        let settings = self.info.redis_settings().clone().set_db(0);
        self.client_for(self.info.clone().set_redis_settings(settings))
    }

    /// A Redis client for `info` with this endpoint's TLS files (one
    /// cluster seed).
    pub(super) fn client_for(&self, info: redis::ConnectionInfo) -> Result<redis::Client> {
        let info = without_client_setinfo(info);
        // rustls needs a process-wide crypto provider; install ring's unless
        // the application installed one already.
        #[cfg(feature = "tls")]
        if matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. })
            && rustls::crypto::CryptoProvider::get_default().is_none()
        {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            let certs = redis::TlsCertificates {
                client_tls: tls
                    .client
                    .as_ref()
                    .map(|(cert, key)| redis::ClientTlsConfig {
                        client_cert: cert.clone(),
                        client_key: key.clone(),
                    }),
                root_cert: tls.root_cert.clone(),
            };
            return redis::Client::build_with_tls(info, certs).map_err(|e| {
                Error::InvalidConfig(format!("bad TLS settings for {}: {e}", self.address()))
            });
        }
        redis::Client::open(info).map_err(|e| {
            Error::InvalidConfig(format!("cannot use Redis at {}: {e}", self.address()))
        })
    }
}

/// `info` without redis-rs's `CLIENT SETINFO LIB-NAME/LIB-VER` at connect.
/// redis-rs ignores the answer, so the command never fails a connection,
/// but an ACL user without `+client|setinfo` (a rule the minimal rules of
/// `docs/deployment.md` leave out: Redis 7.0 has no such command and
/// refuses `ACL SETUSER` that names it) has every refusal written to
/// `ACL LOG` on Redis 7.2+ and Valkey, two per connection, where they hide
/// the refusals that matter. The library name in `CLIENT LIST` is the
/// price. (Cluster node connections still send it: redis-rs's cluster
/// client has no such setting.)
pub(super) fn without_client_setinfo(info: redis::ConnectionInfo) -> redis::ConnectionInfo {
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    info.set_redis_settings(settings)
}

/// A TCP address, over TLS when `tls`.
fn data_node_addr(tls: bool, host: String, port: u16) -> redis::ConnectionAddr {
    if tls {
        redis::ConnectionAddr::TcpTls {
            host,
            port,
            insecure: false,
            tls_params: None,
        }
    } else {
        redis::ConnectionAddr::Tcp(host, port)
    }
}

/// The URL with its password replaced by `***`.
fn redact_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// What is wrong with a URL the Redis client refused, in the user's terms.
fn url_problem(url: &str, err: &redis::RedisError) -> String {
    const SCHEMES: [&str; 7] = [
        "redis",
        "rediss",
        "redis+unix",
        "unix",
        "valkey",
        "valkeys",
        "valkey+unix",
    ];
    // `host:port` alone has no scheme; `scheme:/...` has one.
    let scheme = url
        .split_once(':')
        .filter(|(_, rest)| rest.starts_with('/'));
    match scheme {
        None => "no scheme such as redis://".to_owned(),
        Some((scheme, _)) if !SCHEMES.contains(&scheme) => format!("unknown scheme {scheme:?}"),
        Some(_) => {
            // redis-rs shows "description - Kind[: detail]"; keep the words.
            let shown = err.to_string();
            let what = shown.split(" - ").next().unwrap_or(&shown);
            if what == "Redis URL did not parse" {
                "it does not parse as a URL: check the host, the port (1 to 65535) and \
                 that a password's special characters are %-encoded"
                    .to_owned()
            } else {
                let mut chars = what.chars();
                chars
                    .next()
                    .map(|first| first.to_lowercase().chain(chars).collect())
                    .unwrap_or_else(|| "refused by the Redis client".to_owned())
            }
        }
    }
}
