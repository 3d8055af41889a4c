//! A failed rollout puts the Deployment back to what served before it.

use serde_json::Value;
use sless_testkit::kube_api::Outcome;
use sless_workers::driver::{Driver, DriverError};

use super::{Cluster, NS, deploy_req, image_of, key};

/// The image of a Deployment's template.
fn template_image(d: &Value) -> &str {
    d["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
}

/// Rollouts of `bad` cannot pull it; every other image rolls out.
fn cluster_that_cannot_pull(c: &Cluster, bad: String) {
    c.fake
        .roll_out_deployments_with("sless.dev/component=function", move |d| {
            if template_image(d) == bad {
                Outcome::failed("ImagePullBackOff", "")
            } else {
                Outcome::succeeded("")
            }
        });
}

#[tokio::test]
async fn a_failed_rollout_puts_the_deployment_back_to_the_version_that_served() {
    let c = Cluster::start().await;
    let (good, bad) = (image_of(1, 1), image_of(2, 2));
    cluster_that_cannot_pull(&c, bad.clone());
    let k = key("hello");
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
    let d = c
        .fake
        .get(&c.path("apps/v1", "deployments", NS, "hello"))
        .unwrap();
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
    let pods = c.objects("", "pods", NS, "sless.dev/function=hello");
    assert!(!pods.is_empty());
    assert!(
        pods.iter()
            .all(|p| p["spec"]["containers"][0]["image"] == good.as_str()),
        "{pods:#?}"
    );
    c.assert_writes_are_ours();
}

#[tokio::test]
async fn a_first_deploy_that_fails_has_nothing_to_roll_back_to() {
    let c = Cluster::start().await;
    let bad = image_of(1, 1);
    cluster_that_cannot_pull(&c, bad.clone());
    let k = key("hello");
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
    let good = image_of(2, 2);
    c.driver.deploy(deploy_req(&k, 2, &good)).await.unwrap();
    c.driver.stop(&k).await.unwrap();
    let err = c.driver.deploy(deploy_req(&k, 3, &bad)).await.unwrap_err();
    assert!(err.to_string().contains("nothing to roll back to"), "{err}");
    c.assert_writes_are_ours();
}
