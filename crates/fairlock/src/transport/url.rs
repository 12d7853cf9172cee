//! The URLs of a cluster and of a deployment behind sentinels, parsed:
//! [`Seeds`] from `redis+cluster://` (and `rediss+cluster://`),
//! [`SentinelSpec`] with the data nodes' settings from `redis+sentinel://`
//! (and `rediss+sentinel://`). Other URLs are the Redis client's to parse
//! (see `endpoint.rs`).

use std::sync::Arc;

use redis::IntoConnectionInfo;

/// The seed nodes of a `redis+cluster://` URL, parsed.
#[derive(Clone)]
pub(crate) struct Seeds {
    pub(super) nodes: Arc<[redis::ConnectionInfo]>,
}

/// `redis+cluster://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]` (or
/// `rediss+cluster://`): one connection info per seed, each with the
/// credentials. `None` when `url` is not a cluster URL. A cluster has one
/// database, so a path other than `/` or `/0` is refused.
pub(super) fn parse_seeds(url: &str) -> Option<std::result::Result<Seeds, String>> {
    let (scheme, rest) = url.split_once("://")?;
    let base = match scheme {
        "redis+cluster" => "redis",
        "rediss+cluster" => "rediss",
        _ => return None,
    };
    Some(parse_rest(base, rest))
}

fn parse_rest(base: &str, rest: &str) -> std::result::Result<Seeds, String> {
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    if !matches!(tail, "" | "/" | "/0") {
        return Err(format!(
            "a cluster URL has no database or options after the hosts (found {tail:?}): \
             a cluster serves database 0 only"
        ));
    }
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (format!("{userinfo}@"), hosts),
        None => (String::new(), authority),
    };
    let mut nodes = Vec::new();
    for host in hosts.split(',') {
        if host.is_empty() {
            return Err("an empty host in the list of seeds".to_owned());
        }
        if !has_port(host) {
            return Err(format!(
                "seed {host:?} has no valid port: give every seed as HOST:PORT, \
                 PORT from 1 to 65535"
            ));
        }
        let info = format!("{base}://{userinfo}{host}")
            .into_connection_info()
            .map_err(|_| {
                format!(
                    "seed {host:?} does not parse: check the host, the port (1 to 65535) and \
                     that a password's special characters are %-encoded"
                )
            })?;
        nodes.push(info);
    }
    Ok(Seeds {
        nodes: nodes.into(),
    })
}

/// Whether seed `host` ends in `:PORT`, PORT decimal digits from 1 to
/// 65535, after the host (outside the brackets of an IPv6 address).
fn has_port(host: &str) -> bool {
    let after_host = match host.strip_prefix('[') {
        Some(bracketed) => match bracketed.split_once(']') {
            Some((_, rest)) => rest,
            None => return false,
        },
        None => host,
    };
    let Some((_, port)) = after_host.rsplit_once(':') else {
        return false;
    };
    !port.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u32>().is_ok_and(|p| (1..=65535).contains(&p))
}

/// The port a sentinel listens on when the URL names none.
const DEFAULT_SENTINEL_PORT: u16 = 26379;

/// What a `redis+sentinel://` URL names: the sentinels, the service (the
/// master's name in the sentinels' configuration), whether TLS is used, and
/// the sentinels' own credentials (set apart from the URL's, which are the
/// data nodes').
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SentinelSpec {
    pub(super) sentinels: Vec<(String, u16)>,
    pub(super) service: String,
    pub(super) tls: bool,
    pub(super) auth: Option<(Option<String>, String)>,
}

impl SentinelSpec {
    /// `SERVICE via HOST:PORT,HOST:PORT`, for messages.
    pub(super) fn describe(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|(host, port)| format_host_port(host, *port))
            .collect();
        format!("sentinel service {} via {}", self.service, hosts.join(","))
    }
}

/// `HOST:PORT`, an IPv6 host in brackets.
pub(super) fn format_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The data-node settings and the sentinels of a sentinel URL.
pub(super) struct ParsedSentinelUrl {
    pub(super) spec: SentinelSpec,
    pub(super) db: i64,
    pub(super) username: Option<String>,
    pub(super) password: Option<String>,
}

/// Parse `redis+sentinel://` and `rediss+sentinel://` URLs; `Ok(None)` for
/// any other scheme. `Err` carries the problem in the user's terms (the
/// caller adds the URL and the accepted forms).
pub(super) fn parse_sentinel_url(
    url: &str,
) -> std::result::Result<Option<ParsedSentinelUrl>, String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(None);
    };
    let tls = match scheme.to_ascii_lowercase().as_str() {
        "redis+sentinel" => false,
        "rediss+sentinel" => true,
        _ => return Ok(None),
    };
    if rest.contains(['?', '#']) {
        return Err("a sentinel URL takes no query (?...) or fragment (#...)".to_owned());
    }
    let Some((authority, path)) = rest.split_once('/') else {
        return Err("the service name is missing: add /SERVICE after the sentinels".to_owned());
    };
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    let (username, password) = match userinfo {
        None => (None, None),
        Some(userinfo) => {
            let (user, password) = match userinfo.split_once(':') {
                Some((user, password)) => (user, Some(password)),
                None => (userinfo, None),
            };
            let user = percent_decode(user).ok_or("the user name has a bad %-escape")?;
            let password = password
                .map(|p| percent_decode(p).ok_or("the password has a bad %-escape"))
                .transpose()?;
            ((!user.is_empty()).then_some(user), password)
        }
    };
    let sentinels = parse_hosts(hosts)?;
    let mut segments = path.split('/');
    let service = segments.next().unwrap_or_default();
    if service.is_empty() {
        return Err("the service name is missing: add /SERVICE after the sentinels".to_owned());
    }
    let service = percent_decode(service).ok_or("the service name has a bad %-escape")?;
    let db = match segments.next() {
        None | Some("") => 0,
        Some(db) => db
            .parse::<i64>()
            .ok()
            .filter(|db| *db >= 0)
            .ok_or_else(|| format!("invalid database number {db:?}: use 0, 1, 2, ..."))?,
    };
    if segments.any(|s| !s.is_empty()) {
        return Err("too many path segments: the path is /SERVICE or /SERVICE/DB".to_owned());
    }
    Ok(Some(ParsedSentinelUrl {
        spec: SentinelSpec {
            sentinels,
            service,
            tls,
            auth: None,
        },
        db,
        username,
        password,
    }))
}

/// `HOST:PORT[,HOST:PORT...]`; a missing port means 26379; IPv6 hosts in
/// brackets.
fn parse_hosts(hosts: &str) -> std::result::Result<Vec<(String, u16)>, String> {
    if hosts.is_empty() {
        return Err("no sentinel is named: give HOST:PORT[,HOST:PORT...]".to_owned());
    }
    hosts
        .split(',')
        .map(|entry| {
            let bad =
                |why: &str| format!("bad sentinel address {entry:?} in the host list ({why})");
            if entry.is_empty() {
                return Err(bad(
                    "empty entry: separate HOST:PORT pairs with single commas",
                ));
            }
            let (host, port) = if let Some(bracketed) = entry.strip_prefix('[') {
                let (host, after) = bracketed
                    .split_once(']')
                    .ok_or_else(|| bad("unclosed [ of an IPv6 address"))?;
                match after {
                    "" => (host, None),
                    _ => match after.strip_prefix(':') {
                        Some(port) => (host, Some(port)),
                        None => return Err(bad("expected :PORT after ]")),
                    },
                }
            } else {
                match entry.rsplit_once(':') {
                    Some((host, _)) if host.contains(':') => {
                        return Err(bad("write an IPv6 address in brackets: [::1]:26379"));
                    }
                    Some((host, port)) => (host, Some(port)),
                    None => (entry, None),
                }
            };
            if host.is_empty() {
                return Err(bad("empty host"));
            }
            if host.contains(['@', '/', ' ']) {
                return Err(bad("not a host name"));
            }
            let port = match port {
                None => DEFAULT_SENTINEL_PORT,
                Some(port) => port
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| bad("the port must be a number from 1 to 65535"))?,
            };
            Ok((host.to_owned(), port))
        })
        .collect()
}

/// Decode `%XX` escapes; `None` on a malformed one or a result that is not
/// UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_parse() {
        let seeds = parse_seeds("redis+cluster://u:p%40ss@127.0.0.1:7000,localhost:7001")
            .expect("a cluster url")
            .expect("valid");
        assert_eq!(seeds.nodes.len(), 2);
        assert_eq!(seeds.nodes[1].addr().to_string(), "localhost:7001");
        assert_eq!(seeds.nodes[0].redis_settings().username(), Some("u"));
        assert_eq!(seeds.nodes[1].redis_settings().password(), Some("p@ss"));
        assert!(parse_seeds("redis://127.0.0.1:7000").is_none());
        for bad in [
            "redis+cluster://127.0.0.1:7000/3",
            "redis+cluster://127.0.0.1:7000,,127.0.0.1:7001",
            "redis+cluster://127.0.0.1",
            "redis+cluster://127.0.0.1:99999",
            "redis+cluster://127.0.0.1:",
            "redis+cluster://127.0.0.1:0",
            "redis+cluster://127.0.0.1:65536",
            "redis+cluster://127.0.0.1:+7000",
            "redis+cluster://127.0.0.1:70a0",
            "redis+cluster://[::1]",
            "redis+cluster://[::1]:",
            "redis+cluster://[::1",
        ] {
            let err = parse_seeds(bad).expect("cluster").err();
            assert!(err.is_some(), "{bad}");
        }
        for good in [
            "redis+cluster://127.0.0.1:1",
            "redis+cluster://127.0.0.1:65535",
            "redis+cluster://[::1]:7000",
        ] {
            assert!(parse_seeds(good).expect("cluster").is_ok(), "{good}");
        }
    }

    fn parse(url: &str) -> ParsedSentinelUrl {
        parse_sentinel_url(url).unwrap().unwrap()
    }

    fn problem(url: &str) -> String {
        match parse_sentinel_url(url) {
            Err(problem) => problem,
            Ok(_) => panic!("{url} parsed"),
        }
    }

    #[test]
    fn forms() {
        let p = parse("redis+sentinel://h1:26379,h2:26380,[::1]:1/mymaster");
        assert_eq!(
            p.spec.sentinels,
            vec![
                ("h1".to_owned(), 26379),
                ("h2".to_owned(), 26380),
                ("::1".to_owned(), 1)
            ]
        );
        assert_eq!(p.spec.service, "mymaster");
        assert!(!p.spec.tls);
        assert_eq!((p.db, p.username, p.password), (0, None, None));

        let p = parse("rediss+sentinel://alice:p%40ss@h1:5000/svc/3");
        assert!(p.spec.tls);
        assert_eq!(p.db, 3);
        assert_eq!(p.username.as_deref(), Some("alice"));
        assert_eq!(p.password.as_deref(), Some("p@ss"));

        let p = parse("redis+sentinel://:secret@h1/svc/");
        assert_eq!(
            p.spec.sentinels,
            vec![("h1".to_owned(), DEFAULT_SENTINEL_PORT)]
        );
        assert_eq!((p.username, p.password.as_deref()), (None, Some("secret")));

        assert!(parse_sentinel_url("redis://h:1").unwrap().is_none());
        assert!(parse_sentinel_url("redis+cluster://h:1").unwrap().is_none());
    }

    #[test]
    fn bad_input() {
        assert!(problem("redis+sentinel://h1:26379").contains("service name is missing"));
        assert!(problem("redis+sentinel://h1:26379/").contains("service name is missing"));
        assert!(problem("redis+sentinel:///svc").contains("no sentinel is named"));
        assert!(problem("redis+sentinel://h1,,h2/svc").contains("empty entry"));
        assert!(problem("redis+sentinel://h1,/svc").contains("empty entry"));
        assert!(problem("redis+sentinel://h1:0/svc").contains("1 to 65535"));
        assert!(problem("redis+sentinel://h1:99999/svc").contains("1 to 65535"));
        assert!(problem("redis+sentinel://h1:x/svc").contains("1 to 65535"));
        assert!(problem("redis+sentinel://:26379/svc").contains("empty host"));
        assert!(problem("redis+sentinel://::1:5/svc").contains("brackets"));
        assert!(problem("redis+sentinel://[::1:5/svc").contains("unclosed"));
        assert!(problem("redis+sentinel://h1/svc/x").contains("invalid database number"));
        assert!(problem("redis+sentinel://h1/svc/-1").contains("invalid database number"));
        assert!(problem("redis+sentinel://h1/svc/1/2").contains("too many path segments"));
        assert!(problem("redis+sentinel://h1/svc?db=1").contains("no query"));
        assert!(problem("redis+sentinel://u:%zz@h1/svc").contains("%-escape"));
    }
}
