//! Builds are pinned by digest: the artifact of a build is the image
//! reference with the digest kaniko reported for its push: what runs can
//! never be moved by a later push of the tag.

use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use sless_testkit::kube::Outcome;
use sless_workers::driver::{Artifact, BuildRequest, Driver, DriverError};

use super::{Cluster, REGISTRY, build_req, deploy_req, digest_of, sha};

#[tokio::test]
async fn the_deployment_runs_the_digest_kaniko_reported() {
    let c = Cluster::start().await;
    c.kaniko();
    c.serve_functions();
    let k = c.key("hello");
    let artifact = c.driver.build(build_req(&c, &k, 1, 7).await).await.unwrap();
    let tag = format!("{REGISTRY}/{}-hello:v1-{}", c.ns, &sha(7)[..8]);
    let pinned = format!("{REGISTRY}/{}-hello@{}", c.ns, digest_of(&tag));
    assert_eq!(artifact.reference, pinned);

    c.driver
        .deploy(deploy_req(&k, 1, &artifact.reference))
        .await
        .unwrap();
    let deployment = c
        .get::<K8sDeployment>(c.ns.as_str(), "hello")
        .await
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
    let c = Cluster::start().await;
    for (n, (_, message, _)) in cases.iter().enumerate() {
        let outcome = Outcome::succeeds("Pushed it\n");
        let outcome = match message {
            Some(m) => outcome.with_termination_message(m),
            None => outcome,
        };
        // Each case's build has a context of its own (`sha(10 + n)`).
        let build = format!("sless.dev/build=v1-{}", &sha(10 + n as u8)[..8]);
        c.play_all(&format!("sless.dev/component=build,{build}"), outcome);
    }
    // The cases' builds run side by side.
    let k = c.key("hello");
    let builds = cases.iter().enumerate().map(|(n, _)| {
        let (c, k) = (&c, &k);
        async move {
            let req = build_req(c, k, 1, 10 + n as u8).await;
            c.driver.build(req).await
        }
    });
    let ended = futures_util::future::join_all(builds).await;
    for ((case, _, expected), ended) in cases.into_iter().zip(ended) {
        let err = ended.unwrap_err();
        let DriverError::Build { message, log_tail } = err else {
            panic!("{case}: {err:?}");
        };
        assert!(message.contains(expected), "{case}: {message}");
        assert!(message.contains("kaniko"), "{case}: {message}");
        assert!(message.contains("succeeded"), "{case}: {message}");
        assert_eq!(log_tail, "Pushed it\n", "{case}");
    }
    c.assert_writes_are_ours();
}
