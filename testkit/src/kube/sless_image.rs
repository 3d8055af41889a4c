//! What sless installed in the cluster from `deploy/` needs of the tests:
//! its own image, and a way through to the servers the tests run on
//! loopback.
//!
//! The image is what `deploy/Dockerfile` describes (Debian bookworm with
//! ca-certificates, `/usr/local/bin/sless`, user 10001:10001, entrypoint
//! `sless`), made at test time without a Docker engine: a release build
//! takes more than ten minutes on two cores, so the binary is the one the
//! test already has, a debug build. The Debian layer is the first layer of
//! the python3.11 runtime's image in the node's registry: debootstrap's
//! minimal bookworm with ca-certificates (`scripts/ensure-images`), which
//! is what `debian:bookworm-slim` plus ca-certificates is. Its second layer
//! (Python) is left out; umoci adds the binary as a layer of its own, and
//! skopeo pushes the image to the node's registry, where the Debian layer
//! already is.

use std::net::SocketAddr;
use std::path::Path;

use serde_json::{Value, json};

use super::cluster::run;
use super::{Cluster, GATEWAY};

/// The image of the runtime whose first layer is the Debian base.
const BASE_IMAGE: &str = "sless-runtime-python3.11";
/// The user sless's pods run as (deploy/Dockerfile's `USER`).
const USER: &str = "10001:10001";
const PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A plain TCP address on the node's gateway that passes each connection
/// on to `upstream` (a server on loopback), for the rest of the process:
/// what pods reach PostgreSQL, S3 or the API server at.
pub fn tcp_front(upstream: SocketAddr) -> SocketAddr {
    super::front::start_tcp(GATEWAY, upstream)
}

/// Makes sless's image from `binary` (`env!("CARGO_BIN_EXE_sless")`) and
/// pushes it to the node's registry as `{repository}/sless:{tag}`; returns
/// that reference. Checks first that the Debian layer holds every library
/// the binary is linked with (`ldd`).
pub fn sless_image(cluster: &Cluster, binary: &Path, tag: &str) -> String {
    let dir = crate::scratch_dir("sless-image");
    let certs = dir.join("certs");
    std::fs::create_dir_all(&certs).expect("a directory for skopeo's CA");
    std::fs::write(certs.join("ca.crt"), cluster.ca_pem()).expect("writing the node's CA");
    let certs = certs.to_str().expect("a UTF-8 path");
    let layout = dir.join("oci");
    let image = format!("{}:sless", layout.display());
    run(
        "skopeo",
        &[
            "copy",
            "--quiet",
            "--src-cert-dir",
            certs,
            &format!("docker://{}", cluster.image(BASE_IMAGE)),
            &format!("oci:{image}"),
        ],
    );
    let base_layer = keep_base_layer(&layout, "sless");
    let listed = run("tar", &["-tzf", base_layer.to_str().expect("a UTF-8 path")]);
    for library in linked_libraries(binary) {
        let held = listed
            .lines()
            .any(|l| l.trim_start_matches(['.', '/']) == library.trim_start_matches('/'));
        assert!(
            held,
            "{} is linked with {library}, which the Debian layer lacks",
            binary.display()
        );
    }
    run(
        "umoci",
        &[
            "insert",
            "--image",
            &image,
            binary.to_str().expect("a UTF-8 path"),
            "/usr/local/bin/sless",
        ],
    );
    let reference = format!("{}/sless:{tag}", cluster.repository());
    run(
        "skopeo",
        &[
            "copy",
            "--quiet",
            "--dest-cert-dir",
            certs,
            &format!("oci:{image}"),
            &format!("docker://{reference}"),
        ],
    );
    reference
}

/// The libraries `binary` is linked with, by the paths `ldd` resolves them
/// to (as the same Debian has them; `/lib` is `/usr/lib` there).
fn linked_libraries(binary: &Path) -> Vec<String> {
    let out = run("ldd", &[binary.to_str().expect("a UTF-8 path")]);
    out.lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once(" => ") {
                Some((_, resolved)) => resolved.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| {
                let path = path
                    .strip_prefix("/lib64/")
                    .map_or(path.to_owned(), |rest| format!("/usr/lib64/{rest}"));
                match path.strip_prefix("/lib/") {
                    Some(rest) => format!("/usr/lib/{rest}"),
                    None => path,
                }
            })
        })
        .collect()
}

/// Cuts the image `tag` of the OCI layout down to its first layer, with
/// deploy/Dockerfile's configuration (user, entrypoint, no command, only
/// `PATH`); returns the path of that layer's blob.
fn keep_base_layer(layout: &Path, tag: &str) -> std::path::PathBuf {
    let blob = |digest: &str| {
        layout
            .join("blobs/sha256")
            .join(digest.strip_prefix("sha256:").expect("a sha256 digest"))
    };
    let read = |path: &Path| -> Value {
        serde_json::from_slice(
            &std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display())),
        )
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
    };
    let index_path = layout.join("index.json");
    let mut index = read(&index_path);
    let entry = index["manifests"]
        .as_array_mut()
        .expect("the index's manifests")
        .iter_mut()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .expect("the image in the layout");
    let mut manifest = read(&blob(entry["digest"].as_str().expect("a digest")));
    let mut config = read(&blob(
        manifest["config"]["digest"].as_str().expect("a digest"),
    ));

    let first = manifest["layers"][0].clone();
    manifest["layers"] = json!([first]);
    config["rootfs"]["diff_ids"] = json!([config["rootfs"]["diff_ids"][0].clone()]);
    // The history up to the second layer.
    let mut layers = 0;
    let history: Vec<Value> = config["history"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .take_while(|h| {
            if h["empty_layer"] != true {
                layers += 1;
            }
            layers <= 1
        })
        .collect();
    config["history"] = json!(history);
    config["config"] = json!({
        "User": USER,
        "Env": [PATH],
        "Entrypoint": ["sless"],
        "WorkingDir": "/",
    });

    let (digest, size) = write_blob(layout, &config);
    manifest["config"]["digest"] = json!(digest);
    manifest["config"]["size"] = json!(size);
    let (digest, size) = write_blob(layout, &manifest);
    entry["digest"] = json!(digest);
    entry["size"] = json!(size);
    std::fs::write(&index_path, index.to_string()).expect("writing the index");
    blob(first["digest"].as_str().expect("a digest"))
}

/// Writes `value` as a blob of the layout; its digest and size.
fn write_blob(layout: &Path, value: &Value) -> (String, usize) {
    let bytes = value.to_string();
    let tmp = layout.join("blob.tmp");
    std::fs::write(&tmp, &bytes).expect("writing a blob");
    let sum = run("sha256sum", &[tmp.to_str().expect("a UTF-8 path")]);
    let hex = sum.split_whitespace().next().expect("sha256sum's digest");
    std::fs::rename(&tmp, layout.join("blobs/sha256").join(hex)).expect("naming a blob");
    (format!("sha256:{hex}"), bytes.len())
}
