use clap::Parser;

use super::*;
use crate::cli::output::code;

#[derive(Parser)]
struct Command {
    #[command(flatten)]
    deploy: DeployArgs,
}

/// What `sless deploy DIR ARGS` wants, with `manifest` as DIR's sless.toml.
fn wanted_of(args: &[&str], manifest: Option<&str>) -> Wanted {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("handler.py"),
        "def handle(e):\n    return 1\n",
    )
    .unwrap();
    if let Some(text) = manifest {
        std::fs::write(dir.path().join(MANIFEST), text).unwrap();
    }
    let mut argv = vec!["deploy", dir.path().to_str().unwrap(), "--name", "f"];
    argv.extend(args);
    let command = Command::try_parse_from(argv).unwrap();
    wanted(&command.deploy).unwrap()
}

/// A function as the API shows it, with these scaling settings.
fn function(min: u32, max: u32, concurrency: u32) -> FunctionView {
    serde_json::from_value(serde_json::json!({
        "namespace": "sless-0123456789abcdef", "name": "f", "runtime": "python3.11",
        "entrypoint": "handler.handle", "memory_mb": 128, "timeout_sec": 30,
        "phase": "Ready", "url": "/fn/sless-0123456789abcdef/f", "instances": 1,
        "min_instances": min, "max_instances": max, "concurrency": concurrency,
    }))
    .unwrap()
}

#[test]
fn scaling_settings_are_checked_before_anything_is_sent_naming_the_flag_or_key() {
    let toml = "min_instances = 5\nmax_instances = 2\n";
    let now = function(5, 20, 10);
    // (flags, sless.toml, the function now, the error's start)
    type Case<'a> = (
        &'a [&'a str],
        Option<&'a str>,
        Option<&'a FunctionView>,
        Option<&'a str>,
    );
    let cases: &[Case] = &[
        (
            &[
                "--min-instances",
                "2",
                "--max-instances",
                "3",
                "--concurrency",
                "1",
            ],
            None,
            None,
            None,
        ),
        (
            &["--min-instances", "5", "--max-instances", "2"],
            None,
            None,
            Some("--min-instances: min_instances (5) must not be above its max_instances, 2"),
        ),
        (
            &["--concurrency", "0"],
            None,
            None,
            Some(
                "--concurrency: concurrency (calls in flight per instance) must be between 1 and 1000 (got 0)",
            ),
        ),
        (
            &["--concurrency", "1001"],
            None,
            None,
            Some("--concurrency: "),
        ),
        (
            &["--max-instances", "0"],
            None,
            None,
            Some("--max-instances: max_instances must be between 1 and 100 (got 0)"),
        ),
        (
            &["--max-instances", "101"],
            None,
            None,
            Some("--max-instances: "),
        ),
        // A new function's max is the default, 10.
        (
            &["--min-instances", "11"],
            None,
            None,
            Some(
                "--min-instances: min_instances (11) must not be above max_instances, which is 10 when left out",
            ),
        ),
        (
            &[],
            Some(toml),
            None,
            Some("min_instances in sless.toml: min_instances (5)"),
        ),
        (
            &[],
            Some("concurrency = 0\n"),
            None,
            Some("concurrency in sless.toml: "),
        ),
        // A flag wins over sless.toml.
        (&["--max-instances", "6"], Some(toml), None, None),
        (
            &["--concurrency", "4"],
            Some("concurrency = 0\n"),
            None,
            None,
        ),
        // Over a function that exists: its settings count where none is given.
        (&["--min-instances", "15"], None, Some(&now), None),
        (
            &["--max-instances", "2"],
            None,
            Some(&now),
            Some("--max-instances: min_instances (5) must not be above its max_instances, 2"),
        ),
        (
            &["--min-instances", "30"],
            None,
            Some(&now),
            Some("--min-instances: "),
        ),
        (
            &[],
            Some("max_instances = 3\n"),
            Some(&now),
            Some("max_instances in sless.toml: "),
        ),
    ];
    for (args, manifest, now, want) in cases {
        let w = wanted_of(args, *manifest);
        let got = check_scaling(&w, *now);
        match (got, want) {
            (Ok(()), None) => {}
            (Err(f), Some(start)) => {
                assert_eq!(f.code, code::USAGE, "{args:?} {manifest:?}");
                assert!(
                    f.message.starts_with(start) && !f.message.contains('\n'),
                    "{args:?} {manifest:?}: {:?} does not start with {start:?}",
                    f.message
                );
            }
            (got, want) => panic!("{args:?} {manifest:?}: {got:?}, wanted {want:?}"),
        }
    }
}

#[test]
fn only_the_scaling_settings_that_differ_are_sent() {
    let now = function(0, 10, 10);
    // (flags, sless.toml, the change sent: min, max, concurrency)
    type Case<'a> = (&'a [&'a str], Option<&'a str>, [Option<u32>; 3]);
    let cases: &[Case] = &[
        (&[], None, [None, None, None]),
        (
            &[
                "--min-instances",
                "0",
                "--max-instances",
                "10",
                "--concurrency",
                "10",
            ],
            None,
            [None, None, None],
        ),
        (&["--min-instances", "1"], None, [Some(1), None, None]),
        (
            &["--max-instances", "4", "--concurrency", "10"],
            None,
            [None, Some(4), None],
        ),
        (
            &[],
            Some("concurrency = 2\nmax_instances = 10\n"),
            [None, None, Some(2)],
        ),
        (
            &["--concurrency", "10"],
            Some("concurrency = 2\n"),
            [None, None, None],
        ),
    ];
    for (args, manifest, [min, max, concurrency]) in cases {
        let change = change_of(&wanted_of(args, *manifest), &now);
        assert_eq!(
            (
                change.min_instances,
                change.max_instances,
                change.concurrency
            ),
            (*min, *max, *concurrency),
            "{args:?} {manifest:?}"
        );
        assert_eq!(
            is_empty(&change),
            min.is_none() && max.is_none() && concurrency.is_none(),
            "{args:?} {manifest:?}"
        );
    }
}
