//! What the API server does only now and then, made to happen by the
//! proxy in front of it: a watch it ends, a conflict it answers.

use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use k8s_openapi::api::core::v1::Pod;
use sless_testkit::eventually;
use sless_workers::driver::{Driver, DriverError};

use super::cluster::{DEADLINE, template_image};
use super::{Cluster, deploy_req, image_of};

/// Watches of `plural` the driver opened so far.
fn watches(c: &Cluster, plural: &str) -> usize {
    c.proxy
        .requests()
        .iter()
        .filter(|r| r.is_watch() && r.path.ends_with(&format!("/{plural}")))
        .count()
}

/// The API server ends every watch (it restarts, a load balancer cuts
/// long requests) while a deploy waits for its rollout: the deploy watches
/// again and sees the rollout through.
#[tokio::test]
async fn a_deploy_outlives_the_end_of_its_watches() {
    let c = Cluster::start().await;
    let k = c.key("hello");
    let ns = c.ns.as_str();
    let driver = c.driver.clone();
    let image = image_of(&c, 1, 1);
    let req = deploy_req(&k, 1, &image);
    let deploy = tokio::spawn(async move { driver.deploy(req).await });
    // It waits: its pod is there, and stays Pending (no play yet).
    eventually("the deploy to wait for its pod", DEADLINE, || async {
        let pods = c.list::<Pod>(ns, "sless.dev/function=hello").await;
        let watching = watches(&c, "deployments") > 0 && watches(&c, "pods") > 0;
        (watching && !pods.is_empty()).then_some(())
    })
    .await;
    let (deployments, pods) = (watches(&c, "deployments"), watches(&c, "pods"));
    c.proxy.end_watches();
    eventually("the deploy to watch again", DEADLINE, || async {
        let again = watches(&c, "deployments") > deployments && watches(&c, "pods") > pods;
        (again || deploy.is_finished()).then_some(())
    })
    .await;
    assert!(
        !deploy.is_finished(),
        "the deploy ended with its watches: {:?}",
        deploy.await
    );

    c.serve_functions();
    let deployed = deploy.await.unwrap().unwrap();
    assert_eq!(c.driver.status(&k).await, Some(deployed));
    c.assert_writes_are_ours();
}

/// A conflict (409) on an apply is the platform's trouble, never the
/// function's: the deploy fails with an error worth retrying that names
/// what was refused (the reconciler retries it, `Retry`), leaves what
/// serves as it was, and the next attempt goes through.
#[tokio::test]
async fn a_conflict_on_an_apply_is_retried_not_a_failed_deploy() {
    let c = Cluster::start().await;
    c.serve_functions();
    let k = c.key("hello");
    let ns = c.ns.as_str();
    let (v1, v2) = (image_of(&c, 1, 1), image_of(&c, 2, 2));
    let first = c.driver.deploy(deploy_req(&k, 1, &v1)).await.unwrap();

    let path = format!("/apis/apps/v1/namespaces/{ns}/deployments/hello");
    c.proxy.fail_next(Some("PATCH"), &path, 1, 409);
    let err = c.driver.deploy(deploy_req(&k, 2, &v2)).await.unwrap_err();
    let DriverError::Infra(message) = &err else {
        panic!("a conflict is not the function's failure: {err:?}");
    };
    assert!(
        message.contains(&format!("deployment {ns}/hello")) && message.contains("409"),
        "{message}"
    );
    let d = c.get::<K8sDeployment>(ns, "hello").await.unwrap();
    assert_eq!(template_image(&d), v1);
    assert_eq!(c.driver.status(&k).await, Some(first));

    let second = c.driver.deploy(deploy_req(&k, 2, &v2)).await.unwrap();
    assert_eq!(second.version, 2);
    let d = c.get::<K8sDeployment>(ns, "hello").await.unwrap();
    assert_eq!(template_image(&d), v2);
    let refused: Vec<_> = c
        .proxy
        .requests()
        .into_iter()
        .filter(|r| r.status == Some(409))
        .collect();
    assert_eq!(refused.len(), 1, "{refused:#?}");
    c.assert_writes_are_ours();
}
