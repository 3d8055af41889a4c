//! One-shot jobs: a function run once with arguments and an environment,
//! its output kept.
//!
//! Only the request rules live here so far: the Job aggregate (its events
//! and decider) comes with the job runner.

use std::collections::BTreeMap;

use crate::DomainError;
use crate::names::{FunctionName, JobName};
use crate::spec::check_env;

/// At most this many arguments.
pub const MAX_ARGS: usize = 100;
/// Largest argument, in bytes.
pub const MAX_ARG_BYTES: usize = 4 * 1024;
/// Largest total of all arguments, in bytes.
pub const MAX_ARGS_TOTAL_BYTES: usize = 32 * 1024;

/// A job as a user asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    pub name: JobName,
    pub function: FunctionName,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
}

impl JobSpec {
    /// Checks a job request: names; at most 100 arguments of at most 4 KiB
    /// (32 KiB in all) without NUL bytes; the environment by the rules of a
    /// function's `env_vars`.
    pub fn parse(
        name: &str,
        function: &str,
        args: Vec<String>,
        env: BTreeMap<String, String>,
    ) -> Result<JobSpec, DomainError> {
        let name = JobName::parse(name)?;
        let function = FunctionName::parse(function).map_err(|e| match e {
            DomainError::Invalid { detail, .. } => DomainError::Invalid {
                field: "function",
                detail,
            },
            other => other,
        })?;
        let invalid = |detail: String| DomainError::Invalid {
            field: "args",
            detail,
        };
        if args.len() > MAX_ARGS {
            return Err(invalid(format!(
                "at most {MAX_ARGS} arguments (got {})",
                args.len()
            )));
        }
        for (i, a) in args.iter().enumerate() {
            if a.len() > MAX_ARG_BYTES {
                return Err(invalid(format!(
                    "argument {i} is {} bytes; the limit is {MAX_ARG_BYTES}",
                    a.len()
                )));
            }
            if a.contains('\0') {
                return Err(invalid(format!("argument {i} holds a NUL byte")));
            }
        }
        let total: usize = args.iter().map(String::len).sum();
        if total > MAX_ARGS_TOTAL_BYTES {
            return Err(invalid(format!(
                "the arguments add up to {total} bytes; the limit is {MAX_ARGS_TOTAL_BYTES}"
            )));
        }
        check_env("env", &env)?;
        Ok(JobSpec {
            name,
            function,
            args,
            env,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_needs_names_sane_args_and_a_valid_env() {
        let env = |k: &str| BTreeMap::from([(k.to_owned(), "v".to_owned())]);
        assert!(JobSpec::parse("once", "report", vec!["--all".into()], env("MODE")).is_ok());
        let cases: Vec<(&str, Result<JobSpec, DomainError>)> = vec![
            ("name", JobSpec::parse("Once", "report", vec![], env("A"))),
            (
                "function",
                JobSpec::parse("once", "Report", vec![], env("A")),
            ),
            (
                "args",
                JobSpec::parse("once", "report", vec!["a\0".into()], env("A")),
            ),
            (
                "args",
                JobSpec::parse("once", "report", vec!["x".repeat(4097)], env("A")),
            ),
            (
                "args",
                JobSpec::parse("once", "report", vec!["a".into(); 101], env("A")),
            ),
            (
                "args",
                JobSpec::parse("once", "report", vec!["x".repeat(4000); 9], env("A")),
            ),
            ("env", JobSpec::parse("once", "report", vec![], env("PORT"))),
            (
                "env",
                JobSpec::parse("once", "report", vec![], env("SLESS_X")),
            ),
            ("env", JobSpec::parse("once", "report", vec![], env("1A"))),
        ];
        for (field, result) in cases {
            match result {
                Err(DomainError::Invalid { field: got, .. }) => assert_eq!(got, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }
}
