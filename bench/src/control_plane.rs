//! The Kubernetes control plane the tests run against: how long
//! `scripts/ensure-kubernetes` takes when everything is built (what every
//! test process pays first), and how long a start takes, from nothing to an
//! API server that is ready and controllers that have acted, `--rounds`
//! times (the first round is also the first after the build, with the
//! programs' files freshly written).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use serde_json::json;
use sless_testkit::kube::ControlPlane;

use crate::percentile;

#[derive(clap::Args)]
pub struct ControlPlaneArgs {
    /// Starts to measure.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

pub fn run(args: ControlPlaneArgs) -> anyhow::Result<serde_json::Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/ensure-kubernetes");
    let started = Instant::now();
    let out = Command::new(&script).output()?;
    anyhow::ensure!(
        out.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let ensure_ms = started.elapsed().as_secs_f64() * 1000.0;

    let mut starts = Vec::new();
    let mut stops = Vec::new();
    for _ in 0..args.rounds.max(1) {
        let plane = ControlPlane::start().map_err(anyhow::Error::msg)?;
        starts.push(plane.started_in.as_secs_f64() * 1000.0);
        let stopping = Instant::now();
        drop(plane);
        stops.push(stopping.elapsed().as_secs_f64() * 1000.0);
    }
    let first = starts[0];
    starts.sort_by(f64::total_cmp);
    stops.sort_by(f64::total_cmp);
    Ok(json!({
        "ensure_kubernetes_cached_ms": ensure_ms,
        "start_first_ms": first,
        "start_p50_ms": percentile(&starts, 50.0),
        "start_max_ms": starts.last(),
        "stop_p50_ms": percentile(&stops, 50.0),
        "rounds": starts.len(),
    }))
}
