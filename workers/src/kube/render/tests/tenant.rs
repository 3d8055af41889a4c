use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sless_domain::Namespace;

use super::{assert_labels_valid, json_of, settings};
use crate::kube::render::namespace::{
    DENY_ALL_POLICY, DNS_POLICY, EGRESS_POLICY, NAMESPACE_NAME_LABEL, PROXY_POLICY,
};
use crate::kube::render::{LABEL_MANAGED_BY, LABEL_NAMESPACE, tenant_objects};

fn ns() -> Namespace {
    Namespace::parse("sless-0123456789abcdef").unwrap()
}

fn find<'a>(policies: &'a [NetworkPolicy], name: &str) -> &'a NetworkPolicy {
    policies
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no policy {name}"))
}

#[test]
fn the_namespace_enforces_restricted_pod_security() {
    let t = tenant_objects(&settings(), &ns());
    json_of(&t.namespace, "Namespace");
    assert_labels_valid(&t.namespace.metadata);
    let labels = t.namespace.metadata.labels.as_ref().unwrap();
    for (k, v) in [
        ("pod-security.kubernetes.io/enforce", "restricted"),
        ("pod-security.kubernetes.io/enforce-version", "latest"),
        ("pod-security.kubernetes.io/warn", "restricted"),
        ("pod-security.kubernetes.io/audit", "restricted"),
        (LABEL_MANAGED_BY, "sless"),
        (LABEL_NAMESPACE, "sless-0123456789abcdef"),
    ] {
        assert_eq!(labels.get(k).map(String::as_str), Some(v), "{k}");
    }
    assert_eq!(
        t.namespace.metadata.name.as_deref(),
        Some("sless-0123456789abcdef")
    );
    assert!(t.namespace.metadata.namespace.is_none());
}

#[test]
fn network_policies_deny_everything_but_dns_the_proxy_and_the_internet() {
    let s = settings();
    let t = tenant_objects(&s, &ns());
    assert_eq!(t.network_policies.len(), 4);
    for p in &t.network_policies {
        json_of(p, "NetworkPolicy");
        assert_labels_valid(&p.metadata);
        assert_eq!(
            p.metadata.namespace.as_deref(),
            Some("sless-0123456789abcdef")
        );
    }

    let deny = find(&t.network_policies, DENY_ALL_POLICY)
        .spec
        .as_ref()
        .unwrap();
    assert_eq!(deny.pod_selector, Some(Default::default()), "every pod");
    assert_eq!(
        deny.policy_types.as_deref(),
        Some(&["Ingress".to_owned(), "Egress".to_owned()][..])
    );
    assert!(deny.ingress.is_none() && deny.egress.is_none());

    let dns = find(&t.network_policies, DNS_POLICY).spec.as_ref().unwrap();
    let rule = &dns.egress.as_ref().unwrap()[0];
    let peer = &rule.to.as_ref().unwrap()[0];
    assert_eq!(
        peer.namespace_selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap()[NAMESPACE_NAME_LABEL],
        "kube-system"
    );
    assert!(peer.pod_selector.is_some(), "the DNS pods only");
    let ports: Vec<_> = rule
        .ports
        .iter()
        .flatten()
        .map(|p| (p.protocol.clone().unwrap(), p.port.clone().unwrap()))
        .collect();
    assert_eq!(ports.len(), 2);
    assert!(ports.iter().all(|(_, port)| *port == IntOrString::Int(53)));

    let proxy = find(&t.network_policies, PROXY_POLICY)
        .spec
        .as_ref()
        .unwrap();
    assert_eq!(
        proxy.policy_types.as_deref(),
        Some(&["Ingress".to_owned()][..])
    );
    let rule = &proxy.ingress.as_ref().unwrap()[0];
    let from = rule.from.as_ref().unwrap();
    assert_eq!(from.len(), 1, "one peer: namespace AND pods");
    assert_eq!(
        from[0]
            .namespace_selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap()[NAMESPACE_NAME_LABEL],
        "sless"
    );
    assert_eq!(
        from[0].pod_selector.as_ref().unwrap().match_labels.as_ref(),
        Some(&s.proxy_pod_labels)
    );
    assert_eq!(rule.ports.as_ref().unwrap().len(), 1);
    assert_eq!(
        rule.ports.as_ref().unwrap()[0].port,
        Some(IntOrString::Int(8080))
    );

    let egress = find(&t.network_policies, EGRESS_POLICY)
        .spec
        .as_ref()
        .unwrap();
    let block = egress.egress.as_ref().unwrap()[0].to.as_ref().unwrap()[0]
        .ip_block
        .as_ref()
        .unwrap();
    assert_eq!(block.cidr, "0.0.0.0/0");
    let except = block.except.as_ref().unwrap();
    assert!(
        except.contains(&"169.254.0.0/16".to_owned()),
        "the metadata endpoint"
    );
    assert!(except.contains(&"10.0.0.0/8".to_owned()));
}

/// Egress goes to IPv4 addresses only: an IPv6 range to deny is denied
/// already, and an exception outside `0.0.0.0/0` would make the API server
/// refuse the policy.
#[test]
fn denied_ipv6_ranges_are_left_out_of_the_ipv4_block() {
    let mut s = settings();
    s.egress_denied_cidrs = ["10.0.0.0/8", "fd00::/8", "169.254.169.254/32"]
        .map(String::from)
        .to_vec();
    let t = tenant_objects(&s, &ns());
    let egress = find(&t.network_policies, EGRESS_POLICY)
        .spec
        .as_ref()
        .unwrap();
    let to = egress.egress.as_ref().unwrap()[0].to.as_ref().unwrap();
    assert_eq!(to.len(), 1);
    let block = to[0].ip_block.as_ref().unwrap();
    assert_eq!(block.cidr, "0.0.0.0/0");
    assert_eq!(
        block.except.as_deref(),
        Some(&["10.0.0.0/8".to_owned(), "169.254.169.254/32".to_owned()][..])
    );

    s.egress_denied_cidrs = vec!["fd00::/8".to_owned()];
    let t = tenant_objects(&s, &ns());
    let egress = find(&t.network_policies, EGRESS_POLICY)
        .spec
        .as_ref()
        .unwrap();
    let block = egress.egress.as_ref().unwrap()[0].to.as_ref().unwrap()[0]
        .ip_block
        .as_ref()
        .unwrap();
    assert_eq!(block.except, None);
}

#[test]
fn without_function_egress_only_dns_leaves_the_namespace() {
    let mut s = settings();
    s.function_egress = false;
    let t = tenant_objects(&s, &ns());
    let names: Vec<_> = t
        .network_policies
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, [DENY_ALL_POLICY, DNS_POLICY, PROXY_POLICY]);
}

#[test]
fn quota_and_limits_bound_the_namespace() {
    let mut s = settings();
    let t = tenant_objects(&s, &ns());
    json_of(&t.resource_quota, "ResourceQuota");
    json_of(&t.limit_range, "LimitRange");
    assert_labels_valid(&t.resource_quota.metadata);
    assert_labels_valid(&t.limit_range.metadata);
    let hard = t
        .resource_quota
        .spec
        .as_ref()
        .unwrap()
        .hard
        .as_ref()
        .unwrap();
    for (k, v) in [
        ("pods", "50"),
        ("limits.cpu", "16"),
        ("limits.memory", "32Gi"),
        ("limits.ephemeral-storage", "8Gi"),
    ] {
        assert_eq!(hard[k].0, v, "{k}");
    }
    let item = &t.limit_range.spec.as_ref().unwrap().limits[0];
    assert_eq!(item.type_, "Container");
    assert_eq!(item.max.as_ref().unwrap()["memory"].0, "4096Mi");
    for part in ["cpu", "memory", "ephemeral-storage"] {
        assert!(
            item.default.as_ref().unwrap().contains_key(part),
            "default {part}"
        );
        assert!(
            item.default_request.as_ref().unwrap().contains_key(part),
            "defaultRequest {part}"
        );
    }
    assert_eq!(t.pull_secret_name, None);
    s.registry_pull_secret = Some("regcred".to_owned());
    assert_eq!(
        tenant_objects(&s, &ns()).pull_secret_name.as_deref(),
        Some("sless-pull")
    );
}
