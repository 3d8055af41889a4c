//! A function's whole life in a tenant namespace, in the order an operator
//! would try it on a cluster of their own: the namespace ensured (twice),
//! a job under Pod Security `restricted` with its event from a Secret owned
//! by its Job, a rollout, a job whose input is near the API's limit, a
//! version that cannot be pulled put back to the one that served, scaling
//! to zero, removal, and the namespace deleted.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace as K8sNamespace, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams};
use serde_json::Value;
use sless_domain::Runtime;
use sless_testkit::eventually;
use sless_testkit::kube::{Outcome, PodView};
use sless_workers::driver::{Artifact, DeployRequest, Driver, DriverError, JobRequest};

use super::cluster::{DEADLINE, owned_by, template_image};
use super::{Cluster, image_of};

/// What the runtime wrapper does in job mode: reads the event from the
/// file `SLESS_JOB_EVENT_FILE` names and prints the handler's JSON result.
fn wrapper(pod: &PodView) -> Outcome {
    let event = pod
        .env("SLESS_JOB_EVENT_FILE")
        .and_then(|path| pod.file(path))
        .and_then(|data| serde_json::from_slice::<Value>(data).ok());
    match event {
        Some(event) => {
            let pad = event["json"]["pad"].as_str().map_or(0, str::len);
            Outcome::succeeds(&format!("handling\n{{\"pad\": {pad}}}\n"))
        }
        None => Outcome::fails("Traceback: no event file"),
    }
}

#[tokio::test]
async fn a_function_lives_its_whole_life_in_its_namespace() {
    let c = Cluster::start().await;
    let key = c.key("probe");
    let ns = c.ns.as_str();
    let (image, missing) = (image_of(&c, 1, 1), image_of(&c, 2, 2));
    c.play("sless.dev/component=job", wrapper);
    c.play("sless.dev/component=function", {
        let missing = missing.clone();
        move |pod| {
            if pod.image() == missing {
                Outcome::waits("ImagePullBackOff", "")
            } else {
                Outcome::serves()
            }
        }
    });

    c.driver.ensure_namespace(&c.ns).await.unwrap();
    c.driver.ensure_namespace(&c.ns).await.unwrap();
    let namespace = c.namespace().await.unwrap();
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    let policies = c.list::<NetworkPolicy>(ns, "").await;
    assert!(policies.len() >= 3, "{policies:#?}");

    // A job: its pod admitted under restricted, its event mounted from a
    // Secret owned by its Job.
    let job = |name: &str, event: Value| JobRequest {
        key: key.clone(),
        run: format!("job/{ns}/{name}"),
        version: 1,
        runtime: Runtime::Python311,
        entrypoint: "handler.handle".into(),
        env_vars: BTreeMap::new(),
        memory_mb: 64,
        timeout: Duration::from_secs(120),
        artifact: Artifact {
            reference: image.clone(),
        },
        event,
        invocation: None,
    };
    let out = c
        .driver
        .run_job(job("probe", serde_json::json!({"method": "JOB"})))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let secrets = c.list::<Secret>(ns, "sless.dev/job=probe").await;
    assert_eq!(secrets.len(), 1, "{secrets:#?}");
    let owner = &secrets[0]["metadata"]["ownerReferences"][0];
    assert_eq!(
        (&owner["kind"], &owner["name"]),
        (&"Job".into(), &"job-probe".into())
    );
    let probe = c.get::<Job>(ns, "job-probe").await.unwrap();
    assert!(owned_by(&secrets[0], &probe));

    // A rollout.
    let deploy = |version: u32, image: &str| DeployRequest {
        key: key.clone(),
        version,
        runtime: Runtime::Python311,
        entrypoint: "handler.handle".into(),
        memory_mb: 128,
        timeout_sec: 30,
        env_vars: BTreeMap::new(),
        artifact: Artifact {
            reference: image.to_owned(),
        },
        instances: 1,
    };
    let d = c.driver.deploy(deploy(1, &image)).await.unwrap();
    assert_eq!(c.driver.status(&key).await, Some(d.clone()));

    // A job whose input is near the API's limit: the wrapper reads the
    // whole event from its file and prints a JSON result.
    let input = serde_json::json!({"pad": "\"".repeat(30_000)});
    let event = serde_json::json!({"method": "JOB", "path": "/", "query": {}, "headers": {},
                                   "body": input.to_string(), "json": input});
    let out = c.driver.run_job(job("big", event)).await.unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let last = out
        .stdout
        .text
        .trim_end()
        .lines()
        .last()
        .unwrap_or_default();
    let result: Value = serde_json::from_str(last).unwrap();
    assert_eq!(result["pad"], 30_000, "{out:?}");

    // A version whose image cannot be pulled: the Deployment goes back to
    // version 1, which still serves.
    let err = c.driver.deploy(deploy(2, &missing)).await.unwrap_err();
    assert!(matches!(err, DriverError::Deploy { .. }), "{err:?}");
    assert!(
        !err.to_string().contains("nothing to roll back to"),
        "{err}"
    );
    assert_eq!(c.driver.status(&key).await, Some(d));
    let back = c.get::<K8sDeployment>(ns, "probe").await.unwrap();
    assert_eq!(template_image(&back), image);

    c.driver.stop(&key).await.unwrap();
    assert_eq!(c.driver.status(&key).await, None);
    c.driver.remove(&key).await.unwrap();
    assert!(c.get::<K8sDeployment>(ns, "probe").await.is_none());
    c.assert_writes_are_ours();

    // The namespace goes, and all in it (the namespace controller).
    Api::<K8sNamespace>::all(c.admin.clone())
        .delete(ns, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the namespace to go", DEADLINE, || async {
        c.namespace().await.is_none().then_some(())
    })
    .await;
}
