//! Settings from text: URL query parameters (`ClientConfig::from_url`) and
//! environment variables (`ClientConfig::from_env`, built on
//! `from_env_with`, which takes the lookup as an argument so that these
//! tests never touch the process environment but in one test). Each bad
//! value is refused with the builder's typed errors, naming what was wrong.

use std::collections::HashMap;
use std::time::Duration;

use fairlock::{ClientConfig, Error, LockClient, Protocol};
use fairlock_test_support as support;
use support::{PROTOCOLS, RedisServer};

fn url(query: &str) -> fairlock::Result<ClientConfig> {
    ClientConfig::from_url(&format!("redis://:hunter2@127.0.0.1:6380/2?{query}"))
}

/// The error's message, checked never to show the password.
fn refused(result: fairlock::Result<ClientConfig>) -> Error {
    let err = result.expect_err("refused");
    assert!(!err.to_string().contains("hunter2"), "{err}");
    err
}

fn config_error(result: fairlock::Result<ClientConfig>, words: &[&str]) {
    match refused(result) {
        Error::InvalidConfig(message) => {
            for word in words {
                assert!(message.contains(word), "{word:?} missing in: {message}");
            }
        }
        other => panic!("expected InvalidConfig naming {words:?}, got {other:?}"),
    }
}

fn duration_error(result: fairlock::Result<ClientConfig>, named: &str) {
    match refused(result) {
        Error::InvalidDuration { what, .. } => assert_eq!(what, named),
        other => panic!("expected InvalidDuration for {named}, got {other:?}"),
    }
}

#[test]
fn url_parameters_set_every_setting() {
    let config = url(
        "protocol=redisson&lease=45s&renew_interval=5s&waiter_ttl=9s\
         &waiter_slot=2m&response_timeout=1500ms&connect_timeout=2s&retry_budget=20s\
         &min_replicas=1&min_replicas_timeout=250ms&metrics=false",
    )
    .unwrap();
    assert_eq!(config.get_protocol(), Protocol::Redisson);
    assert_eq!(config.get_lease(), Duration::from_secs(45));
    assert_eq!(config.get_renew_interval(), Duration::from_secs(5));
    assert_eq!(config.get_waiter_ttl(), Duration::from_secs(9));
    assert_eq!(config.get_waiter_slot(), Duration::from_secs(120));
    assert_eq!(config.get_response_timeout(), Duration::from_millis(1500));
    assert_eq!(config.get_connect_timeout(), Duration::from_secs(2));
    assert_eq!(config.get_retry_budget(), Duration::from_secs(20));
    assert_eq!(
        config.get_min_replicas(),
        Some((1, Duration::from_millis(250)))
    );
    assert!(!config.get_metrics());
    assert_eq!(config.address(), "127.0.0.1:6380");
    let shown = format!("{config:?}");
    assert!(
        shown.contains("db: 2") && !shown.contains("hunter2"),
        "{shown}"
    );

    // Without parameters, the defaults; `min_replicas` alone waits 1 s.
    let plain = ClientConfig::from_url("redis://127.0.0.1:6380/2").unwrap();
    assert_eq!(plain.get_protocol(), Protocol::Native);
    assert_eq!(plain.get_lease(), ClientConfig::DEFAULT_LEASE);
    let replicas = url("min_replicas=2").unwrap();
    assert_eq!(
        replicas.get_min_replicas(),
        Some((2, Duration::from_secs(1)))
    );
    assert_eq!(url("min_replicas=0").unwrap().get_min_replicas(), None);
    assert_eq!(
        url("protocol=native").unwrap().get_protocol(),
        Protocol::Native
    );
    assert!(url("metrics=true").unwrap().get_metrics());
}

#[test]
fn url_parameters_refuse_bad_values_with_typed_errors() {
    // Unknown, repeated or empty parameters.
    config_error(
        url("leese=30s"),
        &["unknown URL parameter \"leese\"", "lease"],
    );
    config_error(url("db=3"), &["unknown URL parameter \"db\""]);
    config_error(url("lease=30s&lease=40s"), &["\"lease\"", "more than once"]);
    config_error(url("lease"), &["\"lease\"", "no value"]);
    // Values that do not parse: the parameter, the value and what is accepted.
    config_error(
        url("lease=30"),
        &["lease", "\"30\"", "500ms", "1ms to 365days"],
    );
    config_error(url("waiter_ttl=soon"), &["waiter_ttl", "\"soon\""]);
    config_error(
        url("protocol=resp3"),
        &["protocol", "\"resp3\"", "native", "redisson"],
    );
    config_error(
        url("metrics=maybe"),
        &["metrics", "\"maybe\"", "true", "false"],
    );
    config_error(url("min_replicas=-1"), &["min_replicas", "\"-1\""]);
    config_error(
        url("min_replicas_timeout=1s"),
        &["min_replicas_timeout", "min_replicas"],
    );
    // Durations out of range: the builder's InvalidDuration.
    duration_error(url("lease=0s"), "lease");
    duration_error(url("lease=400days"), "lease");
    duration_error(url("response_timeout=500us"), "response_timeout");
    duration_error(url("waiter_ttl=10ms"), "waiter ttl");
    duration_error(
        url("min_replicas=1&min_replicas_timeout=0ms"),
        "min_replicas_timeout",
    );
    // Settings that do not fit together, as the builder says it.
    config_error(
        url("lease=3s&renew_interval=3s"),
        &["renew interval", "shorter than the lease"],
    );
    // The URL part is still checked as before.
    config_error(
        ClientConfig::from_url("redis://:hunter2@127.0.0.1:99999?lease=1s"),
        &["does not parse as a URL"],
    );
}

#[test]
fn every_url_form_takes_the_parameters() {
    let unix = ClientConfig::from_url("redis+unix:///tmp/redis.sock?db=3&lease=10s").unwrap();
    assert_eq!(unix.get_lease(), Duration::from_secs(10));
    assert!(format!("{unix:?}").contains("db: 3"), "{unix:?}");
    let cluster =
        ClientConfig::from_url("redis+cluster://10.0.0.1:7000,10.0.0.2:7001?protocol=redisson")
            .unwrap();
    assert_eq!(cluster.get_protocol(), Protocol::Redisson);
    let sentinel =
        ClientConfig::from_url("redis+sentinel://10.0.0.1:26379/orders/1?waiter_ttl=3s").unwrap();
    assert_eq!(sentinel.get_waiter_ttl(), Duration::from_secs(3));
    #[cfg(feature = "tls")]
    {
        let tls = ClientConfig::from_url("rediss://127.0.0.1:6390/0?lease=7s#insecure").unwrap();
        assert_eq!(tls.get_lease(), Duration::from_secs(7));
    }
    config_error(
        ClientConfig::from_url("redis+cluster://10.0.0.1:7000?user=x"),
        &["unknown URL parameter \"user\""],
    );
}

fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name| vars.get(name).cloned()
}

#[test]
fn environment_sets_every_setting() {
    let config = ClientConfig::from_env_with(lookup(&[
        ("REDIS_URL", "redis://10.0.0.9:6379"),
        (
            "FAIRLOCK_URL",
            "redis://127.0.0.1:6381/4?lease=20s&waiter_ttl=3s",
        ),
        ("FAIRLOCK_PROTOCOL", "redisson"),
        ("FAIRLOCK_LEASE", "1m"),
        ("FAIRLOCK_RENEW_INTERVAL", "10s"),
        ("FAIRLOCK_WAITER_SLOT", "90s"),
        ("FAIRLOCK_RESPONSE_TIMEOUT", "2s"),
        ("FAIRLOCK_CONNECT_TIMEOUT", "4s"),
        ("FAIRLOCK_RETRY_BUDGET", "30s"),
        ("FAIRLOCK_MIN_REPLICAS", "2"),
        ("FAIRLOCK_MIN_REPLICAS_TIMEOUT", "300ms"),
        ("FAIRLOCK_METRICS", "false"),
    ]))
    .unwrap();
    // FAIRLOCK_URL wins over REDIS_URL; a variable over the URL's parameter;
    // the URL's parameter where no variable is set.
    assert_eq!(config.address(), "127.0.0.1:6381");
    assert_eq!(config.get_protocol(), Protocol::Redisson);
    assert_eq!(config.get_lease(), Duration::from_secs(60));
    assert_eq!(config.get_waiter_ttl(), Duration::from_secs(3));
    assert_eq!(config.get_renew_interval(), Duration::from_secs(10));
    assert_eq!(config.get_waiter_slot(), Duration::from_secs(90));
    assert_eq!(config.get_response_timeout(), Duration::from_secs(2));
    assert_eq!(config.get_connect_timeout(), Duration::from_secs(4));
    assert_eq!(config.get_retry_budget(), Duration::from_secs(30));
    assert_eq!(
        config.get_min_replicas(),
        Some((2, Duration::from_millis(300)))
    );
    assert!(!config.get_metrics());

    // The sentinels' own credentials, for a Sentinel URL.
    let config = ClientConfig::from_env_with(lookup(&[
        ("REDIS_URL", "redis+sentinel://10.0.0.1:26379/orders"),
        ("FAIRLOCK_SENTINEL_USER", "watcher"),
        ("FAIRLOCK_SENTINEL_PASSWORD", "s3cret"),
    ]))
    .unwrap();
    let shown = format!("{config:?}");
    assert!(
        !shown.contains("s3cret") && shown.contains("sentinel_auth: Some"),
        "{shown}"
    );

    // REDIS_URL alone; empty variables count as unset.
    let config = ClientConfig::from_env_with(lookup(&[
        ("FAIRLOCK_URL", ""),
        ("REDIS_URL", "redis://10.0.0.9:6379"),
        ("FAIRLOCK_LEASE", ""),
    ]))
    .unwrap();
    assert_eq!(config.address(), "10.0.0.9:6379");
    assert_eq!(config.get_lease(), ClientConfig::DEFAULT_LEASE);
}

#[test]
fn environment_refuses_bad_values_naming_the_variable() {
    let with = |vars: &[(&str, &str)]| {
        let mut all = vec![("FAIRLOCK_URL", "redis://:hunter2@127.0.0.1:6380")];
        all.extend_from_slice(vars);
        ClientConfig::from_env_with(lookup(&all))
    };
    config_error(
        ClientConfig::from_env_with(lookup(&[])),
        &["FAIRLOCK_URL", "REDIS_URL"],
    );
    config_error(
        with(&[("FAIRLOCK_LEASE", "30")]),
        &["FAIRLOCK_LEASE", "\"30\"", "1ms to 365days"],
    );
    config_error(
        with(&[("FAIRLOCK_PROTOCOL", "java")]),
        &["FAIRLOCK_PROTOCOL", "\"java\""],
    );
    config_error(
        with(&[("FAIRLOCK_MIN_REPLICAS", "many")]),
        &["FAIRLOCK_MIN_REPLICAS", "\"many\""],
    );
    config_error(
        with(&[("FAIRLOCK_SENTINEL_USER", "watcher")]),
        &["FAIRLOCK_SENTINEL_USER", "FAIRLOCK_SENTINEL_PASSWORD"],
    );
    duration_error(with(&[("FAIRLOCK_LEASE", "0ms")]), "FAIRLOCK_LEASE");
    duration_error(
        with(&[("FAIRLOCK_RETRY_BUDGET", "366days")]),
        "FAIRLOCK_RETRY_BUDGET",
    );
    duration_error(with(&[("FAIRLOCK_WAITER_TTL", "20ms")]), "waiter ttl");
    // A bad parameter in the URL is refused as from `from_url`.
    config_error(
        ClientConfig::from_env_with(lookup(&[("REDIS_URL", "redis://h?leese=1s")])),
        &["unknown URL parameter \"leese\""],
    );
}

/// The one test that touches the process environment (no other test of this
/// binary reads or writes it, so none can race with it).
#[test]
fn from_env_reads_the_process_environment() {
    let names = [
        "FAIRLOCK_URL",
        "REDIS_URL",
        "FAIRLOCK_LEASE",
        "FAIRLOCK_PROTOCOL",
    ];
    // SAFETY (edition 2024 marks these unsafe): no other thread of this
    // test binary reads or writes the environment.
    unsafe {
        for name in names {
            std::env::remove_var(name);
        }
        std::env::set_var("REDIS_URL", "redis://127.0.0.1:6390/1?waiter_ttl=4s");
        std::env::set_var("FAIRLOCK_LEASE", "12s");
        std::env::set_var("FAIRLOCK_PROTOCOL", "redisson");
    }
    let config = ClientConfig::from_env().unwrap();
    assert_eq!(config.address(), "127.0.0.1:6390");
    assert_eq!(config.get_lease(), Duration::from_secs(12));
    assert_eq!(config.get_waiter_ttl(), Duration::from_secs(4));
    assert_eq!(config.get_protocol(), Protocol::Redisson);
    unsafe {
        std::env::set_var("FAIRLOCK_LEASE", "forever");
    }
    config_error(ClientConfig::from_env(), &["FAIRLOCK_LEASE", "\"forever\""]);
    unsafe {
        for name in names {
            std::env::remove_var(name);
        }
    }
    config_error(ClientConfig::from_env(), &["FAIRLOCK_URL", "REDIS_URL"]);
}

/// The parameters reach the server: a URL's `protocol` picks the keys the
/// lock is written under, its `lease` the lease the holder gets.
#[tokio::test]
async fn url_parameters_take_effect_on_a_server() {
    support::init_tracing();
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let url = format!("{}/0?protocol={protocol}&lease=4s", server.url());
        let client = LockClient::connect(&url).await.unwrap();
        assert_eq!(client.config().get_protocol(), protocol);
        let lock = client.fair_lock("from-url").unwrap();
        let guard = lock.lock().await.unwrap();
        assert!(
            support::is_held(&server, protocol, "from-url"),
            "{protocol}"
        );
        let lease = lock.remaining_lease().await.unwrap().expect("held");
        assert!(
            lease <= Duration::from_secs(4) && lease > Duration::from_secs(2),
            "{protocol}: {lease:?}"
        );
        guard.unlock().await.unwrap();
        client.shutdown().await;
    }
}
