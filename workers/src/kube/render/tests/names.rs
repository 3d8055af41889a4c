use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Service;
use sless_domain::Runtime;

use super::{SHA, hello, key, settings};
use crate::kube::render::names::{
    MAX_CRONJOB, MAX_LABEL, RunId, is_dns_label, is_label_value, is_pinned_image, label_value,
    pinned_image,
};
use crate::kube::render::{
    build_job_name, cluster_ip_endpoint, cronjob_name, endpoint, escape_env, function_name, image,
    run_job_name, runtime_image,
};
use crate::kube::{FunctionAddress, KubeSettings};

/// The longest namespace (63) and function name (40) there can be.
fn longest() -> sless_domain::FunctionKey {
    key(
        &format!("n{}", "s".repeat(62)),
        &format!("f{}", "x".repeat(39)),
    )
}

#[test]
fn images_have_the_documented_shape() {
    let s = settings();
    assert_eq!(
        image(&s, &hello(), 3, SHA),
        "registry.example.com/sless/sless-0123456789abcdef-hello:v3-d2a84f4b"
    );
    assert_eq!(
        runtime_image(&s, Runtime::Python311),
        format!(
            "registry.example.com/sless/sless-runtime-python3.11:{}",
            env!("CARGO_PKG_VERSION")
        )
    );
}

#[test]
fn a_pinned_image_is_the_repository_at_a_sha256_digest() {
    let s = settings();
    let digest = format!("sha256:{}", "ab".repeat(32));
    let repo = "registry.example.com/sless/sless-0123456789abcdef-hello";
    let pinned = pinned_image(&s, &hello(), &format!("{digest}\n")).unwrap();
    assert_eq!(pinned, format!("{repo}@{digest}"));
    assert!(is_pinned_image(&s, &hello(), &pinned));
    for bad in [
        "",
        "  \n",
        "latest",
        "sha256:",
        "sha256:abc",
        &format!("sha256:{}", "AB".repeat(32)),
        &format!("sha512:{}", "ab".repeat(32)),
        &format!("{digest}0"),
        &format!("{repo}@{digest}"),
    ] {
        assert!(pinned_image(&s, &hello(), bad).is_err(), "{bad:?}");
    }
    // A tag, another function's image, or a digest of another repository
    // is not this function's pinned image.
    assert!(!is_pinned_image(&s, &hello(), &image(&s, &hello(), 3, SHA)));
    assert!(!is_pinned_image(
        &s,
        &key("sless-0123456789abcdef", "other"),
        &pinned
    ));
    assert!(!is_pinned_image(
        &s,
        &hello(),
        &format!("elsewhere/x@{digest}")
    ));
}

#[test]
fn the_endpoint_is_the_services_cluster_dns_name() {
    assert_eq!(
        endpoint(&settings(), &hello()),
        "http://hello.sless-0123456789abcdef.svc.cluster.local:8080"
    );
    assert_eq!(function_name(&hello()), "hello");
}

/// A Service as the cluster holds it, with `cluster_ip` as its address.
fn applied_service(cluster_ip: Option<&str>) -> Service {
    let mut service = crate::kube::render::service(&settings(), &hello());
    service.spec.as_mut().unwrap().cluster_ip = cluster_ip.map(str::to_owned);
    service
}

#[test]
fn the_cluster_ip_endpoint_is_the_address_the_cluster_gave_the_service() {
    let s = KubeSettings {
        function_address: FunctionAddress::ClusterIp,
        function_port: 9000,
        ..settings()
    };
    assert_eq!(
        cluster_ip_endpoint(&s, &applied_service(Some("10.96.12.34"))),
        Ok("http://10.96.12.34:9000".to_owned())
    );
    assert_eq!(
        cluster_ip_endpoint(&s, &applied_service(Some("fd00:10:96::2a"))),
        Ok("http://[fd00:10:96::2a]:9000".to_owned())
    );
    // The DNS form does not depend on the Service's address.
    assert_eq!(
        endpoint(&s, &hello()),
        "http://hello.sless-0123456789abcdef.svc.cluster.local:9000"
    );
    // A headless Service, or one the cluster gave no address yet, is no
    // address to reach: the error names the Service.
    for ip in [Some("None"), Some(""), None] {
        let err = cluster_ip_endpoint(&s, &applied_service(ip)).unwrap_err();
        assert!(
            err.starts_with("the Service sless-0123456789abcdef/hello has no cluster IP"),
            "{ip:?}: {err}"
        );
    }
}

#[test]
fn names_of_the_longest_inputs_fit_their_limits() {
    let k = longest();
    let trigger = format!("t{}", "r".repeat(62));
    let job = format!("j{}", "o".repeat(62));
    let checks = [
        (function_name(&k), MAX_LABEL),
        (build_job_name(&k, u32::MAX, SHA), MAX_LABEL),
        (cronjob_name(&trigger), MAX_CRONJOB),
        (
            run_job_name(&format!("job/{}/{job}", k.namespace)),
            MAX_LABEL,
        ),
        (
            run_job_name(&format!("cron/{}/{trigger}/1764470400", k.namespace)),
            MAX_LABEL,
        ),
        (run_job_name(&"x/".repeat(200)), MAX_LABEL),
    ];
    for (name, max) in checks {
        assert!(
            is_dns_label(&name, max),
            "{name:?} is not a label of ≤ {max}"
        );
    }
    // A Service name must also start with a letter (DNS-1035).
    assert!(function_name(&k).starts_with(|c: char| c.is_ascii_lowercase()));
}

#[test]
fn cut_names_of_distinct_inputs_stay_distinct() {
    let k = longest();
    let trigger = format!("t{}", "r".repeat(62));
    let builds: BTreeSet<String> = [
        build_job_name(&k, 1, SHA),
        build_job_name(&k, 2, SHA),
        build_job_name(&k, 1, &SHA.replace('d', "e")),
        build_job_name(
            &key(&format!("n{}", "s".repeat(61)), k.name.as_str()),
            1,
            SHA,
        ),
    ]
    .into();
    assert_eq!(builds.len(), 4, "{builds:?}");
    let crons: BTreeSet<String> = [
        cronjob_name(&trigger),
        cronjob_name(&format!("{trigger}x")),
        cronjob_name(&trigger[..50]),
    ]
    .into();
    assert_eq!(crons.len(), 3, "{crons:?}");
    let runs: BTreeSet<String> = [
        run_job_name(&format!("cron/ns/{trigger}/1764470400")),
        run_job_name(&format!("cron/ns/{trigger}/1764470460")),
        run_job_name(&format!("job/ns/{trigger}")),
        run_job_name(&format!("job/ns/{trigger}x")),
    ]
    .into();
    assert_eq!(runs.len(), 4, "{runs:?}");
}

#[test]
fn builds_of_keys_that_join_alike_get_distinct_names() {
    // `sless-a` + `b-c` and `sless-a-b` + `c` both read `sless-a-b-c`.
    let one = build_job_name(&key("sless-a", "b-c"), 1, SHA);
    let two = build_job_name(&key("sless-a-b", "c"), 1, SHA);
    assert_ne!(one, two);
    assert!(one.starts_with("sless-a-b-c-v1-"), "{one}");
}

#[test]
fn jobs_cron_runs_and_cronjobs_never_share_a_name() {
    // A user job named like a cron run, a cron run, and the Job a CronJob
    // starts (`{cronjob}-{minutes}`) for trigger `x`.
    let user = run_job_name("job/ns/x-1764470400");
    let tick = run_job_name("cron/ns/x/1764470400");
    let cronjob = cronjob_name("x");
    assert_eq!(user, "job-x-1764470400");
    assert_eq!(tick, "run-x-1764470400");
    assert_eq!(cronjob, "cron-x");
    let prefixes = [&user[..4], &tick[..4], &cronjob[..5]];
    assert_eq!(prefixes, ["job-", "run-", "cron-"]);
}

#[test]
fn run_ids_are_parsed() {
    assert_eq!(
        RunId::parse("job/ns/nightly"),
        RunId::Job { name: "nightly" }
    );
    assert_eq!(
        RunId::parse("cron/ns/report/1764470400"),
        RunId::Cron {
            trigger: "report",
            at: "1764470400"
        }
    );
    for other in ["job/ns", "job/ns/", "cron/ns/report/soon", "x", ""] {
        assert_eq!(RunId::parse(other), RunId::Other, "{other:?}");
    }
    let a = run_job_name("elsewhere/1");
    assert!(a.starts_with("run-") && is_dns_label(&a, MAX_LABEL));
    assert_ne!(a, run_job_name("elsewhere/2"));
}

#[test]
fn label_values_are_valid_and_distinct() {
    for valid in ["sless-0123456789abcdef", "v3-d2a84f4b", "A.b_c-9", ""] {
        assert_eq!(label_value(valid), valid);
    }
    let long = "a".repeat(64);
    let inputs = [
        "job/ns/x",
        "-x",
        "x-",
        "é",
        long.as_str(),
        &long[..63],
        "a b",
        "a-b",
    ];
    let mut seen = BTreeSet::new();
    for s in inputs {
        let v = label_value(s);
        assert!(is_label_value(&v), "{s:?} → {v:?}");
        assert!(seen.insert(v.clone()), "{s:?} → {v:?} again");
    }
    assert!(!is_label_value("x-") && !is_label_value(&long) && !is_label_value("a/b"));
}

#[test]
fn dollars_are_doubled() {
    assert_eq!(escape_env("a$(B)"), "a$$(B)");
    assert_eq!(escape_env("$$"), "$$$$");
    assert_eq!(escape_env("plain"), "plain");
}
