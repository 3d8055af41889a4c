//! What a tenant namespace holds before any function runs in it: the
//! Namespace (Pod Security `restricted`, enforced), its network policies,
//! a ResourceQuota and a LimitRange.
//!
//! Network: everything is denied, then three things are allowed. DNS to the
//! cluster's DNS pods; ingress to served functions on the function port,
//! from the invoke proxy's pods only; and, when `function_egress` is on
//! (the default: functions usually call out to the internet), egress to any
//! address outside `egress_denied_cidrs` (the private ranges where the
//! cluster's pods, Services and nodes usually are, and link-local, where a
//! cloud's metadata endpoint hands out node credentials). Pods of one
//! tenant never reach another tenant's, nor each other.
//!
//! Egress is allowed to IPv4 addresses only (`0.0.0.0/0`): every IPv6
//! address is denied. An IPv6 range among the denied ones is so already,
//! and is left out of the policy, whose exceptions the API server takes
//! only inside its block.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    LimitRange, LimitRangeItem, LimitRangeSpec, Namespace as K8sNamespace, ResourceQuota,
    ResourceQuotaSpec,
};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sless_domain::Namespace;
use sless_domain::spec::MEMORY_MB_RANGE;

use super::pod::{PULL_SECRET_NAME, ephemeral_mb};
use super::{
    COMPONENT_FUNCTION, LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_NAMESPACE, MANAGED_BY, mebibytes,
    meta, names, quantities,
};
use crate::kube::KubeSettings;

/// The label Kubernetes gives every namespace: its name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";
/// Names of the objects `ensure` puts in a tenant namespace.
pub const DENY_ALL_POLICY: &str = "sless-deny-all";
pub const DNS_POLICY: &str = "sless-allow-dns";
pub const PROXY_POLICY: &str = "sless-allow-proxy";
pub const EGRESS_POLICY: &str = "sless-allow-egress";
pub const QUOTA_NAME: &str = "sless-quota";
pub const LIMIT_RANGE_NAME: &str = "sless-limits";
/// Memory a container gets when it does not say (none of ours).
const DEFAULT_MEMORY_MB: u32 = 128;

/// Everything `ensure` applies for a tenant namespace.
#[derive(Debug, Clone)]
pub struct TenantObjects {
    pub namespace: K8sNamespace,
    /// Deny all, allow DNS, allow the proxy in, and (with
    /// `function_egress`) allow egress out of the cluster.
    pub network_policies: Vec<NetworkPolicy>,
    pub resource_quota: ResourceQuota,
    pub limit_range: LimitRange,
    /// The name the registry pull Secret gets in the namespace (a copy of
    /// `registry_pull_secret`), when there is one.
    pub pull_secret_name: Option<String>,
}

/// The objects of tenant namespace `ns`.
pub fn tenant_objects(settings: &KubeSettings, ns: &Namespace) -> TenantObjects {
    let labels = tenant_labels(ns);
    let mut namespace_labels = labels.clone();
    for mode in ["enforce", "warn", "audit"] {
        namespace_labels.insert(
            format!("pod-security.kubernetes.io/{mode}"),
            "restricted".to_owned(),
        );
        namespace_labels.insert(
            format!("pod-security.kubernetes.io/{mode}-version"),
            "latest".to_owned(),
        );
    }
    let namespace = K8sNamespace {
        metadata: ObjectMeta {
            name: Some(ns.to_string()),
            labels: Some(namespace_labels),
            ..ObjectMeta::default()
        },
        ..K8sNamespace::default()
    };

    let mut network_policies = vec![
        policy(
            ns,
            DENY_ALL_POLICY,
            LabelSelector::default(),
            vec!["Ingress", "Egress"],
            None,
            None,
        ),
        policy(
            ns,
            DNS_POLICY,
            LabelSelector::default(),
            vec!["Egress"],
            None,
            Some(vec![NetworkPolicyEgressRule {
                to: Some(vec![NetworkPolicyPeer {
                    namespace_selector: Some(match_labels([(NAMESPACE_NAME_LABEL, "kube-system")])),
                    pod_selector: Some(match_labels([("k8s-app", "kube-dns")])),
                    ip_block: None,
                }]),
                ports: Some(vec![port("UDP", 53), port("TCP", 53)]),
            }]),
        ),
        policy(
            ns,
            PROXY_POLICY,
            match_labels([(LABEL_COMPONENT, COMPONENT_FUNCTION)]),
            vec!["Ingress"],
            Some(vec![NetworkPolicyIngressRule {
                // One peer with both selectors: pods with these labels in
                // that namespace (two peers would allow either).
                from: Some(vec![NetworkPolicyPeer {
                    namespace_selector: Some(match_labels([(
                        NAMESPACE_NAME_LABEL,
                        settings.system_namespace.as_str(),
                    )])),
                    pod_selector: Some(LabelSelector {
                        match_labels: Some(settings.proxy_pod_labels.clone()),
                        match_expressions: None,
                    }),
                    ip_block: None,
                }]),
                ports: Some(vec![port("TCP", i32::from(settings.function_port))]),
            }]),
            None,
        ),
    ];
    if settings.function_egress {
        let except: Vec<String> = settings
            .egress_denied_cidrs
            .iter()
            .filter(|cidr| !cidr.contains(':'))
            .cloned()
            .collect();
        network_policies.push(policy(
            ns,
            EGRESS_POLICY,
            LabelSelector::default(),
            vec!["Egress"],
            None,
            Some(vec![NetworkPolicyEgressRule {
                to: Some(vec![NetworkPolicyPeer {
                    ip_block: Some(IPBlock {
                        cidr: "0.0.0.0/0".to_owned(),
                        except: (!except.is_empty()).then_some(except),
                    }),
                    ..NetworkPolicyPeer::default()
                }]),
                ports: None,
            }]),
        ));
    }

    let quota = &settings.quota;
    let resource_quota = ResourceQuota {
        metadata: meta(
            QUOTA_NAME.to_owned(),
            ns.as_str(),
            labels.clone(),
            BTreeMap::new(),
        ),
        spec: Some(ResourceQuotaSpec {
            hard: Some(quantities([
                ("pods", Quantity(quota.pods.to_string())),
                ("limits.cpu", Quantity(quota.cpu_limits.clone())),
                ("limits.memory", Quantity(quota.memory_limits.clone())),
                (
                    "limits.ephemeral-storage",
                    Quantity(quota.ephemeral_storage_limits.clone()),
                ),
            ])),
            ..ResourceQuotaSpec::default()
        }),
        ..ResourceQuota::default()
    };

    // Every pod we render states its resources; the defaults are for
    // anything else, so that the quota (which needs limits) admits it.
    let storage = mebibytes(ephemeral_mb(settings));
    let limit_range = LimitRange {
        metadata: meta(
            LIMIT_RANGE_NAME.to_owned(),
            ns.as_str(),
            labels,
            BTreeMap::new(),
        ),
        spec: Some(LimitRangeSpec {
            limits: vec![LimitRangeItem {
                type_: "Container".to_owned(),
                default: Some(quantities([
                    ("cpu", Quantity(settings.cpu_limit.clone())),
                    ("memory", mebibytes(DEFAULT_MEMORY_MB)),
                    ("ephemeral-storage", storage.clone()),
                ])),
                default_request: Some(quantities([
                    ("cpu", Quantity(settings.cpu_request.clone())),
                    ("memory", mebibytes(DEFAULT_MEMORY_MB)),
                    ("ephemeral-storage", storage.clone()),
                ])),
                max: Some(quantities([
                    ("cpu", Quantity(settings.cpu_limit.clone())),
                    ("memory", mebibytes(MEMORY_MB_RANGE.1)),
                    ("ephemeral-storage", storage),
                ])),
                ..LimitRangeItem::default()
            }],
        }),
    };

    TenantObjects {
        namespace,
        network_policies,
        resource_quota,
        limit_range,
        pull_secret_name: settings
            .registry_pull_secret
            .as_ref()
            .map(|_| PULL_SECRET_NAME.to_owned()),
    }
}

/// The labels of the objects of a tenant namespace.
pub fn tenant_labels(ns: &Namespace) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_NAMESPACE.to_owned(), names::label_value(ns.as_str())),
        (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
    ])
}

fn policy(
    ns: &Namespace,
    name: &str,
    pods: LabelSelector,
    types: Vec<&str>,
    ingress: Option<Vec<NetworkPolicyIngressRule>>,
    egress: Option<Vec<NetworkPolicyEgressRule>>,
) -> NetworkPolicy {
    NetworkPolicy {
        metadata: meta(
            name.to_owned(),
            ns.as_str(),
            tenant_labels(ns),
            BTreeMap::new(),
        ),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(pods),
            policy_types: Some(types.into_iter().map(str::to_owned).collect()),
            ingress,
            egress,
        }),
    }
}

fn match_labels<const N: usize>(pairs: [(&str, &str); N]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(
            pairs
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        ),
        match_expressions: None,
    }
}

fn port(protocol: &str, port: i32) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some(protocol.to_owned()),
        port: Some(IntOrString::Int(port)),
        end_port: None,
    }
}
