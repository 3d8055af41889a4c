//! The sections' defaults and refusals, each read from a table.

use std::collections::HashMap;
use std::time::Duration;

use sless_api::plumbing::auth::TokenAlgorithm;
use sless_api::plumbing::quota::{Quota, Quotas};
use sless_workers::WorkerConfig;
use sless_workers::kube::{FunctionAddress, KubeSettings};

use super::{Get, Kube, TokenSettings, Worker, api};

/// Reads a section from `vars` instead of the environment.
fn read<T>(vars: &[(&str, &str)], section: impl Fn(Get<'_>) -> T) -> T {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    section(&|name| vars.get(name).cloned())
}

fn kube_with(vars: &[(&str, &str)]) -> anyhow::Result<KubeSettings> {
    read(vars, |get| Kube::from(get).map(|k| k.settings))
}

#[test]
fn kubernetes_settings_have_defaults_and_refuse_bad_values() {
    let err = kube_with(&[]).unwrap_err().to_string();
    assert!(err.contains("SLESS_KUBE_REGISTRY"), "{err}");
    let s = kube_with(&[("SLESS_KUBE_REGISTRY", "registry.example.com/sless/")]).unwrap();
    assert_eq!(s, KubeSettings::new("registry.example.com/sless"));
    let s = kube_with(&[
        ("SLESS_KUBE_REGISTRY", "r.example/s"),
        ("SLESS_KUBE_BUILD_TIMEOUT_SECS", "1200"),
        ("SLESS_KUBE_REGISTRY_PULL_SECRET", "pull"),
        ("SLESS_KUBE_FUNCTION_EGRESS", "false"),
        (
            "SLESS_KUBE_EGRESS_DENIED_CIDRS",
            "10.0.0.0/8, 169.254.0.0/16",
        ),
    ])
    .unwrap();
    assert_eq!(s.build_timeout_secs, 1200);
    assert_eq!(s.registry_pull_secret.as_deref(), Some("pull"));
    assert!(!s.function_egress);
    assert_eq!(s.egress_denied_cidrs, ["10.0.0.0/8", "169.254.0.0/16"]);
    assert_eq!(s.build_ca_secret, None);
    assert_eq!(s.function_address, FunctionAddress::Dns);
    assert_eq!(s.build_cache_repo.as_deref(), Some("r.example/s/cache"));
    let s = kube_with(&[
        ("SLESS_KUBE_REGISTRY", "r.example/s"),
        ("SLESS_KUBE_BUILD_CA_SECRET", "sless-build-ca"),
        ("SLESS_KUBE_FUNCTION_ADDRESS", "cluster-ip"),
    ])
    .unwrap();
    assert_eq!(s.build_ca_secret.as_deref(), Some("sless-build-ca"));
    assert_eq!(s.function_address, FunctionAddress::ClusterIp);
    let dns = kube_with(&[
        ("SLESS_KUBE_REGISTRY", "r.example/s"),
        ("SLESS_KUBE_FUNCTION_ADDRESS", "dns"),
    ]);
    assert_eq!(dns.unwrap().function_address, FunctionAddress::Dns);
    let cache = |vars: &[(&str, &str)]| {
        let mut all = vec![("SLESS_KUBE_REGISTRY", "r.example/s")];
        all.extend_from_slice(vars);
        kube_with(&all).unwrap().build_cache_repo
    };
    assert_eq!(
        cache(&[("SLESS_KUBE_BUILD_CACHE_REPO", "cache.example:5000/layers/")]).as_deref(),
        Some("cache.example:5000/layers")
    );
    assert_eq!(cache(&[("SLESS_KUBE_BUILD_CACHE", "false")]), None);
    assert_eq!(
        cache(&[
            ("SLESS_KUBE_BUILD_CACHE", "0"),
            ("SLESS_KUBE_BUILD_CACHE_REPO", "r.example/c")
        ]),
        None
    );
    assert_eq!(
        cache(&[("SLESS_KUBE_BUILD_CACHE", "true")]).as_deref(),
        Some("r.example/s/cache")
    );
    for (name, value) in [
        ("SLESS_KUBE_BUILD_CACHE", "off"),
        ("SLESS_KUBE_BUILD_CACHE_REPO", "cache"),
        ("SLESS_KUBE_BUILD_CACHE_REPO", "r.example/cache:latest"),
        ("SLESS_KUBE_BUILD_CACHE_REPO", "r.example/cache@sha256:00"),
        ("SLESS_KUBE_BUILD_CACHE_REPO", "r.example/Cache"),
        ("SLESS_KUBE_BUILD_CACHE_REPO", "r.example/my cache"),
        ("SLESS_KUBE_BUILD_CA_SECRET", "Private_CA"),
        ("SLESS_KUBE_BUILD_CA_SECRET", "ca/crt"),
        ("SLESS_KUBE_BUILD_CA_SECRET", "-ca"),
        ("SLESS_KUBE_FUNCTION_ADDRESS", "clusterip"),
        ("SLESS_KUBE_FUNCTION_ADDRESS", "DNS"),
        ("SLESS_KUBE_BUILD_TIMEOUT_SECS", "5"),
        ("SLESS_KUBE_FUNCTION_PORT", "80"),
        ("SLESS_KUBE_FUNCTION_EGRESS", "maybe"),
        ("SLESS_KUBE_EGRESS_DENIED_CIDRS", "10.0.0.0"),
        ("SLESS_KUBE_EGRESS_DENIED_CIDRS", "10.0.0.0/8,metadata/32"),
        ("SLESS_KUBE_EGRESS_DENIED_CIDRS", "10.0.0.0/33"),
        ("SLESS_KUBE_EGRESS_DENIED_CIDRS", "fd00::/129"),
        ("SLESS_KUBE_EGRESS_DENIED_CIDRS", "10.1.2.3/8"),
    ] {
        let err = kube_with(&[("SLESS_KUBE_REGISTRY", "r.example/s"), (name, value)])
            .unwrap_err()
            .to_string();
        assert!(err.contains(name), "{name}={value}: {err}");
    }
    let err = kube_with(&[
        ("SLESS_KUBE_REGISTRY", "r.example/s"),
        ("SLESS_KUBE_EGRESS_DENIED_CIDRS", "10.1.2.3/8"),
    ])
    .unwrap_err()
    .to_string();
    assert!(err.contains("did you mean 10.0.0.0/8?"), "{err}");
    let s = kube_with(&[
        ("SLESS_KUBE_REGISTRY", "r.example/s"),
        (
            "SLESS_KUBE_EGRESS_DENIED_CIDRS",
            "0.0.0.0/0,fd00::/8,169.254.169.254/32",
        ),
    ])
    .unwrap();
    assert_eq!(
        s.egress_denied_cidrs,
        ["0.0.0.0/0", "fd00::/8", "169.254.169.254/32"]
    );
}

fn worker_with(vars: &[(&str, &str)]) -> anyhow::Result<WorkerConfig> {
    read(vars, |get| Worker::from(get).map(|w| w.config))
}

#[test]
fn worker_settings_have_defaults_and_refuse_bad_values() {
    let d = worker_with(&[]).unwrap();
    assert_eq!((d.concurrency, d.job_concurrency), (4, 4));
    assert_eq!(d.orphan_sweep, Duration::from_secs(300));
    assert_eq!(d.orphan_grace, Duration::from_secs(3600));
    let s = worker_with(&[
        ("SLESS_WORKER_CONCURRENCY", "2"),
        ("SLESS_WORKER_JOB_CONCURRENCY", "16"),
        ("SLESS_ORPHAN_SWEEP_SECS", "60"),
        ("SLESS_ORPHAN_GRACE_SECS", "7200"),
    ])
    .unwrap();
    assert_eq!((s.concurrency, s.job_concurrency), (2, 16));
    assert_eq!(s.orphan_sweep, Duration::from_secs(60));
    assert_eq!(s.orphan_grace, Duration::from_secs(7200));
    let policy = |c: &WorkerConfig| c.autoscale.unwrap().policy;
    assert_eq!(
        (
            policy(&d).stable_window,
            policy(&d).panic_window,
            policy(&d).utilisation
        ),
        (60.0, 6.0, 0.7)
    );
    let a = worker_with(&[
        ("SLESS_AUTOSCALE_STABLE_WINDOW_SECS", "20"),
        ("SLESS_AUTOSCALE_PANIC_WINDOW_SECS", "2"),
        ("SLESS_AUTOSCALE_TARGET_UTILISATION", "1"),
    ])
    .unwrap();
    assert_eq!(
        (
            policy(&a).stable_window,
            policy(&a).panic_window,
            policy(&a).utilisation
        ),
        (20.0, 2.0, 1.0)
    );
    for (name, value) in [
        ("SLESS_WORKER_JOB_CONCURRENCY", "many"),
        ("SLESS_ORPHAN_SWEEP_SECS", "0"),
        ("SLESS_ORPHAN_GRACE_SECS", "10"),
        ("SLESS_ORPHAN_GRACE_SECS", "NaN"),
        ("SLESS_LEASE_SECS", "0.5"),
        ("SLESS_AUTOSCALE_STABLE_WINDOW_SECS", "5"),
        ("SLESS_AUTOSCALE_PANIC_WINDOW_SECS", "0.5"),
        ("SLESS_AUTOSCALE_PANIC_WINDOW_SECS", "90"),
        ("SLESS_AUTOSCALE_TARGET_UTILISATION", "0"),
        ("SLESS_AUTOSCALE_TARGET_UTILISATION", "1.5"),
        ("SLESS_AUTOSCALE_TARGET_UTILISATION", "NaN"),
    ] {
        let err = worker_with(&[(name, value)]).unwrap_err().to_string();
        assert!(err.contains(name), "{name}={value}: {err}");
    }
}

fn quotas_with(vars: &[(&str, &str)]) -> anyhow::Result<Quotas> {
    read(vars, api::quotas)
}

#[test]
fn quotas_have_defaults_zero_lifts_one_and_a_bad_value_names_its_variable() {
    assert_eq!(quotas_with(&[]).unwrap(), Quotas::DEFAULT);
    let q = quotas_with(&[
        ("SLESS_QUOTA_FUNCTIONS", "5"),
        ("SLESS_QUOTA_STORED_BYTES", "0"),
        ("SLESS_QUOTA_UPLOADS_PER_MINUTE", "120"),
    ])
    .unwrap();
    assert_eq!(q.functions, Some(5));
    assert_eq!(q.stored_bytes, None, "0 is no limit");
    assert_eq!(q.uploads_per_minute, Some(120));
    assert_eq!(q.versions, Quotas::DEFAULT.versions);
    for quota in Quota::ALL {
        for bad in ["-1", "ten", "1.5", "1e3"] {
            let e = quotas_with(&[(quota.setting(), bad)])
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(quota.setting()), "{bad}: {e}");
        }
    }
}

const KEYS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/api/tests/api/keys");

fn tokens_with(vars: &[(&str, &str)]) -> anyhow::Result<TokenSettings> {
    read(vars, TokenSettings::from)
}

/// The whole message, causes included, as the binary prints it.
fn refusal(vars: &[(&str, &str)], dev_secret: Option<&str>) -> String {
    let e = match tokens_with(vars) {
        Err(e) => e,
        Ok(t) => t.auth(dev_secret).expect_err("a refusal"),
    };
    format!("{e:#}")
}

/// What `sless dev` generates: 32 random bytes, hex.
const DEV_SECRET: &str = "5f1d0c8e2b7a49e6a3c4d2f18b9e7a60c1d2e3f405a6b7c8d9e0f1a2b3c4d5e6";

fn key(name: &str) -> String {
    format!("{KEYS}/{name}")
}

#[test]
fn hs256_is_the_default_and_needs_a_secret_outside_dev() {
    let t = tokens_with(&[]).unwrap();
    assert_eq!(t.algorithm, TokenAlgorithm::Hs256);
    assert!(t.auth(Some(DEV_SECRET)).is_ok());
    let e = format!("{:#}", t.auth(None).unwrap_err());
    assert!(e.contains("SLESS_JWT_SECRET is not set"), "{e}");
    let t = tokens_with(&[("SLESS_JWT_SECRET", "a-secret-of-the-deployment-32-bytes")]).unwrap();
    assert!(t.auth(None).is_ok());
    let t = tokens_with(&[("SLESS_JWT_SECRET", "a-secret-of-31-bytes-0123456789")]).unwrap();
    let e = format!("{:#}", t.auth(Some(DEV_SECRET)).unwrap_err());
    assert!(e.contains("SLESS_JWT_SECRET has 31 bytes"), "{e}");
}

#[test]
fn rs256_and_es256_load_pem_files_and_key_sets() {
    let two_pems = format!("{}, {}", key("rsa-a.pub.pem"), key("rsa-b.pub.pem"));
    let jwks = key("jwks.json");
    let ec = key("ec-a.pub.pem");
    let cases: [&[(&str, &str)]; 5] = [
        &[
            ("SLESS_JWT_ALGORITHM", "RS256"),
            ("SLESS_JWT_PUBLIC_KEY_FILE", &two_pems),
        ],
        &[("SLESS_JWT_ALGORITHM", "RS256"), ("SLESS_JWKS_FILE", &jwks)],
        &[
            ("SLESS_JWT_ALGORITHM", "rs256"),
            ("SLESS_JWT_PUBLIC_KEY_FILE", &two_pems),
            ("SLESS_JWKS_FILE", &jwks),
            ("SLESS_JWT_ISSUER", "https://id.example.com/"),
            ("SLESS_JWT_AUDIENCE", "sless, sless-staging"),
            ("SLESS_JWT_ADMIN_CLAIM", "https://sless.dev/admin"),
            ("SLESS_JWT_LEEWAY_SECS", "0"),
        ],
        &[
            ("SLESS_JWT_ALGORITHM", "ES256"),
            ("SLESS_JWT_PUBLIC_KEY_FILE", &ec),
        ],
        &[("SLESS_JWT_ALGORITHM", "ES256"), ("SLESS_JWKS_FILE", &jwks)],
    ];
    for vars in cases {
        let auth = tokens_with(vars).unwrap().auth(None);
        assert!(auth.is_ok(), "{vars:?}: {:#}", auth.err().unwrap());
    }
    let t = tokens_with(cases[2]).unwrap();
    let auth = t.auth(None).unwrap();
    assert_eq!(auth.settings().audiences, ["sless", "sless-staging"]);
    assert_eq!(auth.settings().leeway, Duration::ZERO);
}

#[test]
fn configuration_errors_name_their_variable() {
    let rsa = key("rsa-a.pub.pem");
    let ec = key("ec-a.pub.pem");
    let private = key("rsa-a.key.pem");
    let jwks = key("jwks.json");
    let p384 = key("ec-p384.pub.pem");
    let readme = key("README.md");
    // (what, variables, what the message says)
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            "an algorithm not supported",
            vec![("SLESS_JWT_ALGORITHM", "none")],
            "SLESS_JWT_ALGORITHM: \"none\" is not a supported algorithm",
        ),
        (
            "RS256 without keys",
            vec![("SLESS_JWT_ALGORITHM", "RS256")],
            "SLESS_JWT_ALGORITHM=RS256 needs SLESS_JWT_PUBLIC_KEY_FILE",
        ),
        (
            "a missing key file",
            vec![
                ("SLESS_JWT_ALGORITHM", "RS256"),
                ("SLESS_JWT_PUBLIC_KEY_FILE", "/nonexistent/sless/key.pem"),
            ],
            "SLESS_JWT_PUBLIC_KEY_FILE: cannot read /nonexistent/sless/key.pem",
        ),
        (
            "a missing key set",
            vec![
                ("SLESS_JWT_ALGORITHM", "ES256"),
                ("SLESS_JWKS_FILE", "/nonexistent/jwks.json"),
            ],
            "SLESS_JWKS_FILE: cannot read /nonexistent/jwks.json",
        ),
        (
            "a file that is not PEM",
            vec![
                ("SLESS_JWT_ALGORITHM", "RS256"),
                ("SLESS_JWT_PUBLIC_KEY_FILE", &readme),
            ],
            "SLESS_JWT_PUBLIC_KEY_FILE: ",
        ),
        (
            "a private key",
            vec![
                ("SLESS_JWT_ALGORITHM", "RS256"),
                ("SLESS_JWT_PUBLIC_KEY_FILE", &private),
            ],
            "is a private key",
        ),
        (
            "an EC key for RS256",
            vec![
                ("SLESS_JWT_ALGORITHM", "RS256"),
                ("SLESS_JWT_PUBLIC_KEY_FILE", &ec),
            ],
            "holds an EC public key, but RS256 needs an RSA public key",
        ),
        (
            "an RSA key for ES256",
            vec![
                ("SLESS_JWT_ALGORITHM", "ES256"),
                ("SLESS_JWT_PUBLIC_KEY_FILE", &rsa),
            ],
            "holds an RSA public key",
        ),
        (
            "a P-384 key for ES256",
            vec![
                ("SLESS_JWT_ALGORITHM", "ES256"),
                ("SLESS_JWT_PUBLIC_KEY_FILE", &p384),
            ],
            "another curve than P-256",
        ),
        (
            "a key set for HS256",
            vec![("SLESS_JWKS_FILE", &jwks), ("SLESS_JWT_SECRET", "s")],
            "SLESS_JWKS_FILE is set, but SLESS_JWT_ALGORITHM is HS256",
        ),
        (
            "a secret for RS256",
            vec![
                ("SLESS_JWT_ALGORITHM", "RS256"),
                ("SLESS_JWT_PUBLIC_KEY_FILE", &rsa),
                ("SLESS_JWT_SECRET", "s"),
            ],
            "SLESS_JWT_SECRET is set, but SLESS_JWT_ALGORITHM=RS256",
        ),
        (
            "a leeway over 60 s",
            vec![("SLESS_JWT_LEEWAY_SECS", "61")],
            "SLESS_JWT_LEEWAY_SECS=61 is more than the 60 s allowed",
        ),
        (
            "a leeway that is not a number",
            vec![("SLESS_JWT_LEEWAY_SECS", "1m")],
            "SLESS_JWT_LEEWAY_SECS=\"1m\" is not a number",
        ),
        (
            "an admin claim that is a registered claim",
            vec![("SLESS_JWT_ADMIN_CLAIM", "sub")],
            "SLESS_JWT_ADMIN_CLAIM: the admin claim \"sub\"",
        ),
    ];
    for (what, vars, want) in cases {
        let e = refusal(&vars, Some(DEV_SECRET));
        assert!(e.contains(want), "{what}: {e}");
    }
    let e = refusal(
        &[
            ("SLESS_JWT_ALGORITHM", "ES256"),
            ("SLESS_JWKS_FILE", &readme),
        ],
        None,
    );
    assert!(e.starts_with("SLESS_JWKS_FILE: "), "{e}");
    assert!(e.contains("not a JSON Web Key Set"), "{e}");
}

#[test]
fn api_and_worker_sections_have_defaults_and_name_a_bad_value() {
    let a = read(&[], api::Api::from).unwrap();
    assert_eq!(a.proxy, sless_api::proxy::ProxyLimits::default());
    assert_eq!(a.keep_versions, sless_api::DEFAULT_KEEP_VERSIONS);
    assert_eq!(a.upload_wait, Duration::from_secs(30));
    assert!(!a.crash_after_commit);
    let on = [(sless_api::plumbing::faults::CRASH_AFTER_COMMIT_ENV, "1")];
    assert!(read(&on, api::Api::from).unwrap().crash_after_commit);
    for (name, value) in [
        ("SLESS_PROXY_MAX_HEADERS", "101"),
        ("SLESS_PROXY_IDLE_SECS", "0.01"),
        ("SLESS_INVOCATION_RETENTION_DAYS", "0"),
        ("SLESS_UPLOAD_CONCURRENCY", "0"),
        ("SLESS_VERSION_RETENTION", "many"),
    ] {
        let e = read(&[(name, value)], api::Api::from).unwrap_err();
        assert!(e.to_string().starts_with(name), "{name}={value}: {e}");
    }
    let w = read(&[], Worker::from).unwrap();
    assert_eq!(w.driver, super::DriverKind::Local);
    assert_eq!(w.cron_starting_deadline, Duration::from_secs(3600));
    assert_eq!((w.logs.retention_days, w.logs.lines_per_sec), (7, 1000));
    let w = read(
        &[
            ("SLESS_LOG_RETENTION_DAYS", "3"),
            ("SLESS_LOG_RETENTION_NAMESPACES", " team-a=30, team-b=1 "),
            ("SLESS_LOG_LINES_PER_SEC", "50"),
        ],
        Worker::from,
    )
    .unwrap();
    assert_eq!(
        (
            w.logs.days_of("team-a"),
            w.logs.days_of("team-b"),
            w.logs.days_of("other")
        ),
        (30, 1, 3)
    );
    assert_eq!(w.logs.lines_per_sec, 50);
    for (name, value) in [
        ("SLESS_DRIVER", "nomad"),
        ("SLESS_CRON_STARTING_DEADLINE_SECS", "5"),
        ("SLESS_LOG_RETENTION_DAYS", "0"),
        ("SLESS_LOG_RETENTION_DAYS", "367"),
        ("SLESS_LOG_RETENTION_DAYS", "a week"),
        ("SLESS_LOG_RETENTION_NAMESPACES", "team-a"),
        ("SLESS_LOG_RETENTION_NAMESPACES", "team-a=0"),
        ("SLESS_LOG_RETENTION_NAMESPACES", "Not A Namespace=3"),
        ("SLESS_LOG_LINES_PER_SEC", "0"),
        ("SLESS_LOG_BYTES_PER_SEC", "-1"),
    ] {
        let e = read(&[(name, value)], Worker::from).unwrap_err();
        assert!(e.to_string().starts_with(name), "{name}={value}: {e}");
    }
}
