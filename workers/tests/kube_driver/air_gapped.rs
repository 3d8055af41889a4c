//! What an install with sless outside the cluster, and a registry and an
//! object store behind a private CA, needs of the driver: functions
//! reached by their Service's cluster IP (no cluster DNS where sless
//! runs), and builds that trust the operator's CA besides the public ones.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use k8s_openapi::api::core::v1::{Secret, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use sless_testkit::kube::Outcome;
use sless_workers::driver::{Driver, DriverError};
use sless_workers::kube::{FunctionAddress, KubeSettings};

use super::cluster::{Cluster, REGISTRY};
use super::{BUILD_NS, build_req, deploy_req, image_of, kaniko_push};

fn cluster_ip_settings() -> KubeSettings {
    KubeSettings {
        function_address: FunctionAddress::ClusterIp,
        ..KubeSettings::new(REGISTRY)
    }
}

#[tokio::test]
async fn with_cluster_ip_a_deploy_records_the_address_the_cluster_gave_the_service() {
    let c = Cluster::start_with(cluster_ip_settings()).await;
    c.serve_functions();
    let key = c.key("hello");
    let d = c
        .driver
        .deploy(deploy_req(&key, 1, &image_of(&c, 1, 1)))
        .await
        .unwrap();
    let service = c.get::<Service>(c.ns.as_str(), "hello").await.unwrap();
    let ip = service["spec"]["clusterIP"].as_str().unwrap();
    assert!(ip.parse::<std::net::IpAddr>().is_ok(), "{service:#}");
    assert_eq!(d.endpoint, format!("http://{ip}:8080"));
    // What serves, asked again, is at the same address.
    assert_eq!(c.driver.status(&key).await, Some(d));
    c.assert_writes_are_ours();
}

/// A headless Service of the function's name, made by someone else, keeps
/// `clusterIP: None` through sless's apply (the field is immutable): the
/// deploy stops before anything rolls out, naming the Service.
#[tokio::test]
async fn with_cluster_ip_a_headless_service_is_an_error_that_names_it() {
    let c = Cluster::start_with(cluster_ip_settings()).await;
    c.serve_functions();
    c.driver.ensure_namespace(&c.ns).await.unwrap();
    let ns = c.ns.as_str();
    let headless = Service {
        metadata: ObjectMeta {
            name: Some("hello".into()),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            // With a selector it is single-stack, as sless's Service is.
            selector: Some(BTreeMap::from([("app".into(), "other".into())])),
            ports: Some(vec![ServicePort {
                port: 8080,
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    Api::<Service>::namespaced(c.admin.clone(), ns)
        .create(&PostParams::default(), &headless)
        .await
        .unwrap();
    let key = c.key("hello");
    let err = c
        .driver
        .deploy(deploy_req(&key, 1, &image_of(&c, 1, 1)))
        .await
        .unwrap_err();
    let DriverError::Infra(message) = &err else {
        panic!("{err:?}");
    };
    assert!(
        message.contains(&format!("the Service {ns}/hello has no cluster IP")),
        "{message}"
    );
    assert!(c.get::<K8sDeployment>(ns, "hello").await.is_none());
}

#[tokio::test]
async fn a_build_trusts_the_operators_ca_secret_which_sless_never_touches() {
    const PEM: &str =
        "-----BEGIN CERTIFICATE-----\nMIIB...private CA...\n-----END CERTIFICATE-----\n";
    let ca = format!("build-ca-{:08x}", rand::random::<u32>());
    let c = Cluster::start_with(KubeSettings {
        build_ca_secret: Some(ca.clone()),
        ..KubeSettings::new(REGISTRY)
    })
    .await;
    // The operator's Secret, beside the push Secret in the build namespace.
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(ca.clone()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "ca.crt".to_owned(),
            ByteString(PEM.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(c.admin.clone(), BUILD_NS)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    // kaniko reaches the object store and the registry only when it
    // trusts the CA: its certificate in a directory of SSL_CERT_DIR,
    // kaniko's own CAs still first.
    c.play("sless.dev/component=build", |pod| {
        let dirs = pod.env("SSL_CERT_DIR").unwrap_or_default();
        if dirs == "/kaniko/ssl/certs:/sless/ca"
            && pod.file("/sless/ca/ca.crt") == Some(PEM.as_bytes())
        {
            kaniko_push(pod)
        } else {
            Outcome::fails(&format!(
                "error resolving dockerfile path: x509: certificate signed by unknown authority \
                 (SSL_CERT_DIR={dirs:?})"
            ))
        }
    });
    let k = c.key("hello");
    let artifact = c.driver.build(build_req(&c, &k, 1, 1).await).await;
    c.delete::<Secret>(BUILD_NS, &ca).await;
    assert_eq!(artifact.unwrap().reference, image_of(&c, 1, 1));
    // The RBAC and admission policy of deploy/ let sless's Job mount it;
    // sless itself never asked for it.
    c.assert_writes_are_ours();
    let asked: Vec<_> = c
        .proxy
        .requests()
        .into_iter()
        .filter(|r| r.path.contains(&ca))
        .collect();
    assert!(asked.is_empty(), "{asked:#?}");
}
