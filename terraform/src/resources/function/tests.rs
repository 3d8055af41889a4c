use super::*;

fn api() -> Api {
    let mut cfg = sless_client::Config::new("http://127.0.0.1:1", Some("t".into()));
    cfg.namespace = Some("sless-0123456789abcdef".into());
    Api {
        client: sless_client::Client::with_config(cfg).unwrap(),
        namespace: "sless-0123456789abcdef".into(),
        endpoint: "http://127.0.0.1:1".into(),
        stop: tokio::sync::watch::channel(false).1,
    }
}

/// A function's configuration (its code a zip of a given hash, so nothing
/// is packed), with `extra` set over it.
fn config(extra: &[(&'static str, Value)]) -> Value {
    let mut v = Value::object([
        ("name", Value::string("f")),
        ("runtime", Value::string("python3.11")),
        ("entrypoint", Value::string("handler.handle")),
        ("code_path", Value::string("f.zip")),
        ("code_hash", Value::string("ab")),
    ]);
    for (k, x) in extra {
        v.set(k, x.clone());
    }
    v
}

fn n(v: u32) -> Value {
    Value::int(v)
}

#[test]
fn scaling_settings_are_refused_at_validate_naming_the_attribute() {
    // (set, the attribute of the one diagnostic)
    type Case<'a> = (&'a [(&'static str, Value)], Option<&'a str>);
    let cases: &[Case] = &[
        (
            &[
                ("min_instances", n(0)),
                ("max_instances", n(1)),
                ("concurrency", n(1)),
            ],
            None,
        ),
        (
            &[
                ("min_instances", n(100)),
                ("max_instances", n(100)),
                ("concurrency", n(1000)),
            ],
            None,
        ),
        (
            &[("min_instances", n(5)), ("max_instances", n(2))],
            Some("min_instances"),
        ),
        (&[("max_instances", n(0))], Some("max_instances")),
        (&[("max_instances", n(101))], Some("max_instances")),
        (&[("concurrency", n(0))], Some("concurrency")),
        (&[("concurrency", n(1001))], Some("concurrency")),
        (
            &[("min_instances", Value::Number(1.5))],
            Some("min_instances"),
        ),
        // Against a max_instances the configuration leaves to the server,
        // or that is not known yet: the plan decides.
        (&[("min_instances", n(11))], None),
        (
            &[("min_instances", n(11)), ("max_instances", Value::Unknown)],
            None,
        ),
    ];
    for (set, want) in cases {
        let diags = validate(&config(set));
        let attrs: Vec<String> = diags.iter().flat_map(|d| d.attribute.clone()).collect();
        assert_eq!(
            attrs,
            want.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
            "{set:?}: {diags:?}"
        );
        if let Some(d) = diags.first() {
            assert!(
                d.detail.contains(want.unwrap()),
                "the detail names it: {d:?}"
            );
        }
    }
}

/// A function's state as a refresh leaves it, with these settings.
fn prior(min: u32, max: u32, concurrency: u32) -> Value {
    let mut v = config(&[
        ("min_instances", n(min)),
        ("max_instances", n(max)),
        ("concurrency", n(concurrency)),
    ]);
    for (k, x) in [
        ("memory_mb", n(128)),
        ("timeout_sec", n(30)),
        ("build_timeout_sec", n(300)),
        ("phase", Value::string("Ready")),
        ("version", n(1)),
        ("live_version", n(1)),
    ] {
        v.set(k, x);
    }
    v
}

#[test]
fn unset_scaling_settings_are_the_servers_and_the_whole_is_checked_at_plan() {
    let unknown = || Value::Unknown;
    // (prior state, configuration's settings, planned min/max/concurrency
    // or the attribute of the error)
    type Case = (
        Option<Value>,
        Vec<(&'static str, Value)>,
        Result<[Value; 3], &'static str>,
    );
    let cases: Vec<Case> = vec![
        (None, vec![], Ok([unknown(), unknown(), unknown()])),
        (
            None,
            vec![("min_instances", n(3)), ("max_instances", n(5))],
            Ok([n(3), n(5), unknown()]),
        ),
        // A new function's max is the server's default, 10.
        (None, vec![("min_instances", n(11))], Err("min_instances")),
        (Some(prior(2, 10, 5)), vec![], Ok([n(2), n(10), n(5)])),
        // The max the server has counts where the configuration sets none.
        (
            Some(prior(0, 20, 10)),
            vec![("min_instances", n(15))],
            Ok([n(15), n(20), n(10)]),
        ),
        (
            Some(prior(0, 10, 10)),
            vec![("min_instances", n(11))],
            Err("min_instances"),
        ),
        (
            Some(prior(5, 20, 10)),
            vec![("max_instances", n(2))],
            Err("min_instances"),
        ),
        // A new runtime has a default of its own.
        (
            Some(prior(0, 10, 10)),
            vec![("runtime", Value::string("nodejs20"))],
            Ok([n(0), n(10), unknown()]),
        ),
        (
            Some(prior(0, 10, 10)),
            vec![
                ("runtime", Value::string("nodejs20")),
                ("concurrency", n(7)),
            ],
            Ok([n(0), n(10), n(7)]),
        ),
    ];
    for (prior, set, want) in cases {
        let config = config(&set);
        // Terraform's proposal: the configuration over the prior state.
        let mut proposed = prior.clone().unwrap_or(Value::Null);
        if let Value::Map(m) = &config {
            for (k, v) in m {
                proposed.set(k, v.clone());
            }
        }
        let change = Change {
            prior: prior.clone().unwrap_or(Value::Null),
            proposed,
            config,
            private: vec![],
        };
        let got = plan(&api(), change)
            .map(|p| SCALING.map(|a| p.state.get(a).clone()))
            .map_err(|d| d.attribute);
        let want = want.map_err(|a| vec![a.to_owned()]);
        assert_eq!(got, want, "{prior:?} {set:?}");
    }
}

#[test]
fn an_update_sends_the_scaling_settings_that_changed_only() {
    let before = prior(0, 10, 10);
    let mut after = before.clone();
    after.set("max_instances", n(4));
    after.set("concurrency", Value::Unknown);
    let change = apply::changed_fields(&before, &after);
    assert_eq!(
        (
            change.min_instances,
            change.max_instances,
            change.concurrency
        ),
        (None, Some(4), None)
    );
    assert_eq!(change.memory_mb, None);
}
