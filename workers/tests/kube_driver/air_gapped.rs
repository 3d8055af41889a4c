//! What an install with a registry and an object store behind a private
//! CA needs of the driver: builds that trust the operator's CA besides the
//! public ones.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use sless_testkit::kube::Outcome;
use sless_workers::driver::Driver;
use sless_workers::kube::KubeSettings;

use super::cluster::{Cluster, REGISTRY};
use super::{BUILD_NS, build_req, image_of, kaniko_push};

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
