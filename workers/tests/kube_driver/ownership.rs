//! Server-side apply as the real API server does it: sless owns the fields
//! it writes (field manager `sless`); another manager's change to one of
//! them is a conflict unless forced; sless's next apply (forced, as every
//! apply of the driver) takes the field back; and what sless never writes,
//! someone else's annotation, is left to whoever wrote it.

use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use serde_json::Value;
use sless_testkit::kube::ControlPlane;
use sless_workers::driver::Driver;

use super::cluster::template_image;
use super::{Cluster, deploy_req, image_of};

/// The managers that own the template's first container's `image`.
fn owners_of_the_image(d: &Value) -> Vec<String> {
    let container = d["spec"]["template"]["spec"]["containers"][0]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let key = format!("k:{{\"name\":\"{container}\"}}");
    d["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| {
            m["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"][&key]
                .get("f:image")
                .is_some()
        })
        .map(|m| m["manager"].as_str().unwrap().to_owned())
        .collect()
}

/// An operator's apply of an image and an annotation of their own.
fn operator_apply(ns: &str, container: &str, force: bool) -> std::process::Output {
    let yaml = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: hello\n  namespace: {ns}\n  \
         annotations:\n    operator.example/note: kept\nspec:\n  template:\n    spec:\n      \
         containers:\n      - name: {container}\n        image: registry.test/someone-else:1\n"
    );
    let mut args = vec![
        "apply",
        "--server-side",
        "--field-manager=operator",
        "-f",
        "-",
    ];
    if force {
        args.push("--force-conflicts");
    }
    ControlPlane::shared().kubectl_run(&args, Some(&yaml))
}

#[tokio::test]
async fn sless_takes_back_the_fields_it_owns_and_leaves_the_rest() {
    let c = Cluster::start().await;
    c.serve_functions();
    let k = c.key("hello");
    let ns = c.ns.as_str();
    let image = image_of(&c, 1, 1);
    c.driver.deploy(deploy_req(&k, 1, &image)).await.unwrap();
    let d = c.get::<K8sDeployment>(ns, "hello").await.unwrap();
    assert_eq!(owners_of_the_image(&d), ["sless"]);
    let container = d["spec"]["template"]["spec"]["containers"][0]["name"]
        .as_str()
        .unwrap()
        .to_owned();

    // Unforced, the operator's change of sless's field is refused.
    let out = operator_apply(ns, &container, false);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an unforced apply went through");
    assert!(
        said.contains("conflict") && said.contains("\"sless\""),
        "{said}"
    );
    // Forced, it takes the field.
    let out = operator_apply(ns, &container, true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d = c.get::<K8sDeployment>(ns, "hello").await.unwrap();
    assert_eq!(template_image(&d), "registry.test/someone-else:1");
    assert_eq!(owners_of_the_image(&d), ["operator"]);

    // sless's next deploy of the version puts its image back and owns it
    // again; the operator's annotation, which sless never wrote, stays.
    c.driver.deploy(deploy_req(&k, 1, &image)).await.unwrap();
    let d = c.get::<K8sDeployment>(ns, "hello").await.unwrap();
    assert_eq!(template_image(&d), image);
    assert_eq!(owners_of_the_image(&d), ["sless"]);
    assert_eq!(
        d["metadata"]["annotations"]["operator.example/note"],
        "kept"
    );
    c.assert_writes_are_ours();
}
