//! A build's artifact is the digest kaniko reported for its push: what
//! runs can never be moved by a later push of the tag.

use sless_testkit::kube_api::Outcome;
use sless_workers::driver::{Artifact, BuildRequest, Driver, DriverError};

use super::{Cluster, NS, REGISTRY, build_req, deploy_req, digest_of, kaniko, key, sha};

#[tokio::test]
async fn the_deployment_runs_the_digest_kaniko_reported() {
    let c = Cluster::start().await;
    kaniko(&c.fake);
    c.fake
        .roll_out_deployments("sless.dev/component=function", Outcome::succeeded(""));
    let k = key("hello");
    let artifact = c.driver.build(build_req(&c, &k, 1, 7).await).await.unwrap();
    let tag = format!("{REGISTRY}/{NS}-hello:v1-{}", &sha(7)[..8]);
    let pinned = format!("{REGISTRY}/{NS}-hello@{}", digest_of(&tag));
    assert_eq!(artifact.reference, pinned);

    c.driver
        .deploy(deploy_req(&k, 1, &artifact.reference))
        .await
        .unwrap();
    let deployment = c
        .fake
        .get(&c.path("apps/v1", "deployments", NS, "hello"))
        .unwrap();
    let template = &deployment["spec"]["template"];
    assert_eq!(template["spec"]["containers"][0]["image"], pinned.as_str());
    assert_eq!(
        template["metadata"]["annotations"]["sless.dev/image"],
        pinned.as_str()
    );

    // An artifact the log recorded as a tag (before builds were pinned) is
    // not trusted: the build runs again and gives the digest.
    let old = BuildRequest {
        built: Some(Artifact { reference: tag }),
        log: Default::default(),
        ..build_req(&c, &k, 1, 7).await
    };
    assert_eq!(c.driver.build(old).await.unwrap().reference, pinned);
    c.assert_writes_are_ours();
}

#[tokio::test]
async fn a_build_without_a_digest_or_with_a_garbled_one_is_a_build_failure() {
    let cases: [(&str, Option<&str>, &str); 3] = [
        ("no digest", None, "no image digest"),
        (
            "a tag",
            Some("latest\n"),
            "\"latest\", which is not an image digest",
        ),
        (
            "a short digest",
            Some("sha256:abc123"),
            "\"sha256:abc123\", which is not an image digest",
        ),
    ];
    for (n, (case, message, expected)) in cases.into_iter().enumerate() {
        let c = Cluster::start().await;
        let outcome = Outcome::succeeded("Pushed it\n");
        let outcome = match message {
            Some(m) => outcome.with_termination_message(m),
            None => outcome,
        };
        c.fake.complete_jobs("sless.dev/component=build", outcome);
        let k = key("hello");
        let err = c
            .driver
            .build(build_req(&c, &k, 1, 10 + n as u8).await)
            .await
            .unwrap_err();
        let DriverError::Build { message, log_tail } = err else {
            panic!("{case}: {err:?}");
        };
        assert!(message.contains(expected), "{case}: {message}");
        assert!(message.contains("kaniko"), "{case}: {message}");
        assert!(message.contains("succeeded"), "{case}: {message}");
        assert_eq!(log_tail, "Pushed it\n", "{case}");
    }
}
