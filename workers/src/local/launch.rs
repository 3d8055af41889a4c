//! How a function or job process is started ([`Launch`]): its program,
//! arguments, environment and jail, and the socket a served function
//! listens on.

use std::ffi::OsString;
use std::net::{IpAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sless_domain::Runtime;
use sless_sandbox::Mount;

use super::jails::{jailed_env, python_env};
use super::sandbox::{self, Launch};
use super::{LocalDriver, NODE_WRAPPER_RELATIVE, PYTHON_WRAPPER_RELATIVE, build, process};
use crate::driver::{DeployRequest, DriverError};

/// The environment variable that names the file with a job's input.
pub(crate) const EVENT_FILE_ENV: &str = "SLESS_JOB_EVENT_FILE";

/// The argument that starts a runtime wrapper in job mode.
pub(super) const JOB_FLAG: &str = "--job";

/// The environment variable naming the instance a served process was
/// started as; its health check answers with it.
pub(super) const INSTANCE_ENV: &str = "SLESS_INSTANCE";

impl LocalDriver {
    /// A new socket for a function to serve on, on the address the invoke
    /// proxy reaches functions at.
    pub(super) fn listen(&self) -> Result<TcpListener, DriverError> {
        listen_on(self.cfg.advertise)
    }

    /// How to start the function of `req`, built into `artifact_dir`: to
    /// serve on `listener` (sless's socket, handed to the process), or with
    /// none, to run once as a job (the wrapper's `--job` mode). In a jail,
    /// `extra` is mounted too.
    pub(super) async fn launch_spec(
        &self,
        req: &DeployRequest,
        artifact_dir: &Path,
        listener: Option<Arc<TcpListener>>,
        extra: Vec<Mount>,
    ) -> Result<Launch, DriverError> {
        let port = listener.as_ref().map(|l| listener_port(l)).transpose()?;
        let jailed = self.jails.is_some();
        // Paths as the process sees them.
        let (build_dir, runtimes) = if jailed {
            (
                PathBuf::from(sandbox::FUNCTION_DIR),
                PathBuf::from(sandbox::RUNTIME_DIR),
            )
        } else {
            (artifact_dir.to_path_buf(), self.runtimes_dir.clone())
        };
        let code_dir = build_dir.join("code");
        let mut env = match &self.jails {
            Some(jails) => jailed_env(jails),
            None => process::inherited_env(&self.cfg.env, &[]),
        };
        // Defaults the function's own environment may override.
        if req.runtime == Runtime::Nodejs20 {
            env.push(("NODE_ENV".to_owned(), "production".to_owned()));
        }
        env.extend(req.env_vars.iter().map(|(k, v)| (k.clone(), v.clone())));
        if let (Some(port), Some(listener)) = (port, &listener) {
            env.extend([
                (
                    sandbox::LISTEN_FD_ENV.to_owned(),
                    listener.as_raw_fd().to_string(),
                ),
                ("SLESS_PORT".to_owned(), port.to_string()),
                ("SLESS_HOST".to_owned(), self.cfg.advertise.to_string()),
                (
                    INSTANCE_ENV.to_owned(),
                    uuid::Uuid::new_v4().simple().to_string(),
                ),
            ]);
        }
        env.extend([
            (
                "SLESS_CODE_DIR".to_owned(),
                code_dir.to_string_lossy().into_owned(),
            ),
            ("SLESS_ENTRYPOINT".to_owned(), req.entrypoint.clone()),
            ("SLESS_FUNCTION".to_owned(), req.key.to_string()),
            ("SLESS_VERSION".to_owned(), req.version.to_string()),
        ]);
        let (program, mut args) = match req.runtime {
            Runtime::Python311 => {
                env.extend(python_env());
                if tokio::fs::metadata(artifact_dir.join("deps"))
                    .await
                    .is_ok_and(|m| m.is_dir())
                {
                    env.push((
                        "SLESS_DEPS_DIR".to_owned(),
                        build_dir.join("deps").to_string_lossy().into_owned(),
                    ));
                }
                let python = match &self.jails {
                    Some(jails) => jails.toolchain.python.clone(),
                    None => PathBuf::from(&self.cfg.python),
                };
                (
                    python,
                    vec![runtimes.join(PYTHON_WRAPPER_RELATIVE).into_os_string()],
                )
            }
            Runtime::Nodejs20 => {
                let node = match &self.jails {
                    Some(jails) => jails.toolchain.node.clone(),
                    None => PathBuf::from(&self.cfg.node),
                };
                (
                    node,
                    vec![runtimes.join(NODE_WRAPPER_RELATIVE).into_os_string()],
                )
            }
            Runtime::Go123 => {
                if !tokio::fs::try_exists(artifact_dir.join(build::GO_BINARY))
                    .await
                    .unwrap_or(false)
                {
                    return Err(DriverError::Deploy {
                        message: format!(
                            "artifact {} has no Go binary: it was not built for go1.23",
                            req.artifact.reference
                        ),
                        log_tail: String::new(),
                    });
                }
                (build_dir.join(build::GO_BINARY), Vec::new())
            }
        };
        if port.is_none() {
            args.push(OsString::from(JOB_FLAG));
        }
        let jail = match &self.jails {
            None => None,
            Some(jails) => {
                let identity = jails.tenants.identity(&req.key.namespace).await?;
                let mut mounts = vec![
                    Mount::ReadOnly {
                        source: artifact_dir.to_path_buf(),
                        dest: PathBuf::from(sandbox::FUNCTION_DIR),
                    },
                    Mount::ReadOnly {
                        source: self.runtimes_dir.clone(),
                        dest: PathBuf::from(sandbox::RUNTIME_DIR),
                    },
                ];
                mounts.extend(extra);
                let kind = if port.is_some() { "fn" } else { "job" };
                let label = format!(
                    "{kind}-{}-{}-v{}",
                    req.key.namespace, req.key.name, req.version
                );
                Some(jails.parts(identity, mounts, req.memory_mb, label))
            }
        };
        Ok(Launch {
            program,
            args,
            env,
            cwd: code_dir,
            jail,
            listener,
        })
    }
}

/// A new listening socket on `addr`, on a port the kernel picks.
pub(crate) fn listen_on(addr: IpAddr) -> Result<TcpListener, DriverError> {
    TcpListener::bind((addr, 0))
        .map_err(|e| DriverError::Infra(format!("cannot listen on {addr}: {e}")))
}

/// The port `listener` is bound to.
pub(super) fn listener_port(listener: &TcpListener) -> Result<u16, DriverError> {
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| DriverError::Infra(format!("a function's socket has no address: {e}")))
}
