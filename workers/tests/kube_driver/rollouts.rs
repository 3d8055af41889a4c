//! A failed rollout puts the Deployment back to what served before it.

use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use k8s_openapi::api::core::v1::Pod;
use sless_testkit::kube::Outcome;
use sless_workers::driver::{Driver, DriverError};
use sless_workers::kube::{KubeSettings, TenantQuota};

use super::cluster::template_image;
use super::{Cluster, REGISTRY, deploy_req, image_of};

/// Pods of `bad` cannot pull it; every other image starts and serves.
fn cluster_that_cannot_pull(c: &Cluster, bad: String) {
    c.play("sless.dev/component=function", move |pod| {
        if pod.image() == bad {
            Outcome::waits("ImagePullBackOff", "")
        } else {
            Outcome::serves()
        }
    });
}

#[tokio::test]
async fn a_failed_rollout_puts_the_deployment_back_to_the_version_that_served() {
    let c = Cluster::start().await;
    let (good, bad) = (image_of(&c, 1, 1), image_of(&c, 2, 2));
    cluster_that_cannot_pull(&c, bad.clone());
    let k = c.key("hello");
    let ns = c.ns.as_str();
    let v1 = c.driver.deploy(deploy_req(&k, 1, &good)).await.unwrap();

    let err = c.driver.deploy(deploy_req(&k, 2, &bad)).await.unwrap_err();
    let DriverError::Deploy { message, .. } = err else {
        panic!("{err:?}");
    };
    assert!(
        message.contains("version 2 does not start: ImagePullBackOff"),
        "{message}"
    );
    assert!(!message.contains("nothing to roll back to"), "{message}");

    // The template is version 1's again, and version 1 is what serves.
    let d = c.get::<K8sDeployment>(ns, "hello").await.unwrap();
    assert_eq!(template_image(&d), good);
    assert_eq!(
        d["spec"]["template"]["metadata"]["labels"]["sless.dev/version"],
        "1"
    );
    assert_eq!(d["metadata"]["labels"]["sless.dev/version"], "1");
    assert_eq!(
        d["metadata"]["annotations"]["sless.dev/image"],
        good.as_str()
    );
    assert_eq!(c.driver.status(&k).await, Some(v1));
    // What serves: the pods not on their way out (the failed version's pod
    // is being deleted, by the Deployment controller and the node).
    let pods = c.list::<Pod>(ns, "sless.dev/function=hello").await;
    let serving: Vec<_> = pods
        .iter()
        .filter(|p| p["metadata"].get("deletionTimestamp").is_none())
        .collect();
    assert!(!serving.is_empty(), "{pods:#?}");
    assert!(
        serving
            .iter()
            .all(|p| p["spec"]["containers"][0]["image"] == good.as_str()),
        "{pods:#?}"
    );
    c.assert_writes_are_ours();
}

#[tokio::test]
async fn a_first_deploy_that_fails_has_nothing_to_roll_back_to() {
    let c = Cluster::start().await;
    let bad = image_of(&c, 1, 1);
    cluster_that_cannot_pull(&c, bad.clone());
    let k = c.key("hello");
    let err = c.driver.deploy(deploy_req(&k, 1, &bad)).await.unwrap_err();
    let DriverError::Deploy { message, .. } = err else {
        panic!("{err:?}");
    };
    assert!(message.contains("ImagePullBackOff"), "{message}");
    assert!(
        message.contains("nothing to roll back to: no earlier version of the function was serving"),
        "{message}"
    );
    assert_eq!(c.driver.status(&k).await, None);

    // Stopped (scaled to zero), nothing serves either: a failed deploy of
    // another version leaves it as it was.
    let good = image_of(&c, 2, 2);
    c.driver.deploy(deploy_req(&k, 2, &good)).await.unwrap();
    c.driver.stop(&k).await.unwrap();
    let err = c.driver.deploy(deploy_req(&k, 3, &bad)).await.unwrap_err();
    assert!(err.to_string().contains("nothing to roll back to"), "{err}");
    c.assert_writes_are_ours();
}

/// The tenant's quota (ResourceQuota admission) refuses the pods of a new
/// function: its deploy fails at the rollout's deadline, saying why.
#[tokio::test]
async fn a_rollout_whose_pods_the_quota_refuses_fails_saying_so() {
    let defaults = KubeSettings::new(REGISTRY);
    let c = Cluster::start_with(KubeSettings {
        rollout_timeout_secs: 2,
        quota: TenantQuota {
            pods: 1,
            ..defaults.quota.clone()
        },
        ..defaults
    })
    .await;
    c.serve_functions();
    let (first, second) = (c.key("hello"), c.key("other"));
    let image = image_of(&c, 1, 1);
    let serving = c
        .driver
        .deploy(deploy_req(&first, 1, &image))
        .await
        .unwrap();
    let err = c
        .driver
        .deploy(deploy_req(&second, 1, &image))
        .await
        .unwrap_err();
    let DriverError::Deploy { message, .. } = err else {
        panic!("{err:?}");
    };
    assert!(message.contains("exceeded quota: sless-quota"), "{message}");
    assert!(message.contains("nothing to roll back to"), "{message}");
    assert_eq!(c.driver.status(&first).await, Some(serving));
    c.assert_writes_are_ours();
}
