//! Generates the provider protocol's messages and services from proto/.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: a build script is one thread; nothing reads the environment
    // while it is set.
    unsafe { std::env::set_var("PROTOC", protoc) };
    tonic_prost_build::configure()
        .build_client(false)
        .compile_protos(
            &[
                "proto/tfplugin6.proto",
                "proto/plugin.proto",
                "proto/health.proto",
            ],
            &["proto"],
        )?;
    Ok(())
}
