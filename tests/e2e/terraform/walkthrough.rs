//! examples/terraform applied from nothing and changed as a user changes
//! it: a file, the environment, a scaling setting, a trigger; changes made
//! outside Terraform seen and undone; every resource imported; everything
//! destroyed.

use std::time::Duration;

use super::{Version, Workspace, answers, api, last_position};
use crate::dev::{start_dev, stop_dev};

/// A value the plan and apply output must never show.
const SECRET: &str = "bonjour-s3cr3t-7f3a";

const DATA: &str = r#"
data "sless_functions" "all" {
  depends_on = [sless_function.greeter]
}

data "sless_function" "greeter" {
  name       = sless_function.greeter.name
  depends_on = [sless_function.greeter]
}

output "names" {
  value = data.sless_functions.all.names
}

output "versions" {
  value = [for v in data.sless_function.greeter.versions : v.version]
}

output "scaling" {
  value = [
    data.sless_function.greeter.min_instances,
    data.sless_function.greeter.max_instances,
    data.sless_function.greeter.concurrency,
  ]
}
"#;

async fn walkthrough(version: Version) {
    let scratch = sless_testkit::scratch_dir(&format!("tf-walk-{version:?}").to_lowercase());
    let data = scratch.join("data");
    let (proc, c) = start_dev(&data, "log").await;
    let api = api(&c);
    let ws = Workspace::with_example(version, &scratch, &c);
    ws.write("data.tf", DATA);

    // From nothing: the function answers, its job ran, the data sources see it.
    ws.apply().await;
    let out = ws.outputs().await;
    let url = out["url"]["value"].as_str().unwrap().to_owned();
    assert!(url.starts_with(&c.fn_url), "{url}");
    let body = answers(&c, &url, 200).await;
    assert!(body.contains("hello, world"), "{body}");
    let job = out["job_output"]["value"].as_str().unwrap();
    assert!(job.contains("hello, terraform"), "the job's output: {job}");
    assert_eq!(out["names"]["value"], serde_json::json!(["greeter"]));
    assert_eq!(out["versions"]["value"], serde_json::json!([1]));
    assert_eq!(out["scaling"]["value"], serde_json::json!([0, 3, 10]));
    let plan = ws.plan().await;
    assert_eq!(
        plan.code,
        0,
        "a second plan changes nothing:\n{}",
        plan.text()
    );

    // A file edited: only code_hash changes (and what follows from it).
    ws.edit("greeter/handler.py", "\"hello\")", "\"hello\") + \"!\"");
    let changes = ws.changes().await;
    for ch in &changes {
        if ch.address == "sless_function.greeter" {
            assert_eq!(ch.actions, ["update"], "{ch:?}");
            assert_eq!(ch.known, ["code_hash"], "{ch:?}");
        } else {
            assert!(ch.is_noop(), "only the function changes: {ch:?}");
        }
    }
    ws.apply().await;
    assert!(answers(&c, &url, 200).await.contains("hello!, world"));
    let versions = api.list_versions("greeter").await.unwrap();
    let numbers: Vec<u32> = versions.items.iter().map(|v| v.version).collect();
    assert_eq!(numbers, [2, 1], "the old version is kept");
    assert_eq!(versions.live_version, Some(2));

    // The environment: changed in place, its value never shown.
    ws.edit(
        "main.tf",
        "GREETING = \"hello\"",
        &format!("GREETING = \"{SECRET}\""),
    );
    let changes = ws.changes().await;
    let f = changes
        .iter()
        .find(|c| c.address == "sless_function.greeter")
        .unwrap();
    assert_eq!(f.actions, ["update"], "in place: {f:?}");
    let plan = ws.plan().await;
    let apply = ws.apply().await;
    for run in [&plan, &apply] {
        assert!(
            !run.text().contains(SECRET),
            "the value is shown:\n{}",
            run.text()
        );
    }
    assert!(plan.text().contains("(sensitive value)"), "{}", plan.text());
    assert!(
        answers(&c, &url, 200)
            .await
            .contains(&format!("{SECRET}!, world"))
    );
    assert_eq!(
        api.list_versions("greeter").await.unwrap().items.len(),
        2,
        "no new version"
    );

    // A scaling setting: changed in place, the others kept as they are.
    ws.edit("main.tf", "max_instances = 3", "max_instances = 4");
    let changes = ws.changes().await;
    for ch in &changes {
        if ch.address == "sless_function.greeter" {
            assert_eq!(ch.actions, ["update"], "{ch:?}");
            assert_eq!(ch.known, ["max_instances"], "{ch:?}");
        } else {
            assert!(ch.is_noop(), "only the function changes: {ch:?}");
        }
    }
    ws.apply().await;
    let f = api.get_function("greeter").await.unwrap();
    assert_eq!(
        (f.min_instances, f.max_instances, f.concurrency),
        (Some(0), Some(4), Some(10))
    );
    assert_eq!(ws.plan().await.code, 0);

    // A rollback outside Terraform: the plan shows it, apply undoes it.
    let tail = api.tail_function("greeter").await.unwrap();
    api.rollback("greeter", 1).await.unwrap();
    api.wait_for_version("greeter", 1, None, tail, Duration::from_secs(120), |_| {})
        .await
        .unwrap();
    let plan = ws.plan().await;
    assert_eq!(plan.code, 2, "the rollback shows:\n{}", plan.text());
    assert!(plan.text().contains("code_hash"), "{}", plan.text());
    ws.apply().await;
    assert!(answers(&c, &url, 200).await.contains("!, world"));
    assert_eq!(
        api.list_versions("greeter").await.unwrap().live_version,
        Some(2)
    );

    // Deleted outside Terraform: planned for creation, and made again.
    api.delete_function("greeter").await.unwrap();
    let plan = ws.plan().await;
    assert_eq!(plan.code, 2);
    assert!(
        plan.text()
            .contains("sless_function.greeter will be created"),
        "{}",
        plan.text()
    );
    ws.apply().await;
    answers(&c, &url, 200).await;
    assert_eq!(ws.plan().await.code, 0);

    // The http trigger disabled: the function answers 503; enabled: 200.
    ws.edit(
        "main.tf",
        "type     = \"http\"",
        "type     = \"http\"\n  enabled  = false",
    );
    ws.apply().await;
    answers(&c, &url, 503).await;
    ws.edit("main.tf", "\n  enabled  = false", "");
    ws.apply().await;
    answers(&c, &url, 200).await;

    // Imported, each by name or namespace/name: the function records its
    // source directory (a setting of Terraform's own, nothing on the
    // server); then nothing changes.
    let ns = c.namespace.clone();
    for address in [
        "sless_function.greeter",
        "sless_trigger.web",
        "sless_trigger.nightly",
        "sless_job.hello",
    ] {
        assert_eq!(ws.run(&["state", "rm", address]).await.code, 0);
    }
    for (address, id) in [
        ("sless_function.greeter", "greeter".to_owned()),
        ("sless_trigger.web", format!("{ns}/greeter-web")),
        ("sless_trigger.nightly", "greeter-nightly".to_owned()),
        ("sless_job.hello", format!("{ns}/greeter-hello")),
    ] {
        let run = ws
            .run(&["import", "-input=false", "-no-color", address, &id])
            .await;
        assert_eq!(run.code, 0, "import {address}:\n{}", run.text());
    }
    let changes = ws.changes().await;
    for ch in &changes {
        if ch.address == "sless_function.greeter" {
            assert_eq!(ch.actions, ["update"], "{ch:?}");
            assert_eq!(ch.known, ["source_dir"], "{ch:?}");
            assert!(ch.unknown.is_empty(), "{ch:?}");
        } else {
            assert!(ch.is_noop(), "{ch:?}");
        }
    }
    let before = last_position(&api).await;
    ws.apply().await;
    assert_eq!(
        last_position(&api).await,
        before,
        "recording source_dir writes nothing"
    );
    let plan = ws.plan().await;
    assert_eq!(plan.code, 0, "{}", plan.text());

    // Destroyed: nothing is left in the namespace.
    let run = ws
        .run(&["destroy", "-auto-approve", "-input=false", "-no-color"])
        .await;
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(api.list_functions().await.unwrap().items.is_empty());
    assert!(api.list_triggers().await.unwrap().items.is_empty());
    assert!(
        api.get_job("greeter-hello")
            .await
            .unwrap_err()
            .is_not_found()
    );
    stop_dev(proc, &data).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terraform_1_0_applies_changes_imports_and_destroys_the_example() {
    walkthrough(Version::Old).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn current_terraform_applies_changes_imports_and_destroys_the_example() {
    walkthrough(Version::Current).await;
}
