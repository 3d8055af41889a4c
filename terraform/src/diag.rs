//! Diagnostics: what Terraform shows the user when a call fails or warns,
//! pointing at the attribute at fault when there is one.

use crate::proto::tfplugin6::{AttributePath, Diagnostic, attribute_path, diagnostic};

/// What went wrong, for the user: one summary line, the detail, and the
/// attribute it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diag {
    pub summary: String,
    pub detail: String,
    /// The attribute's path from the block's top (`["timeouts", "create"]`).
    pub attribute: Vec<String>,
    pub warning: bool,
}

impl Diag {
    pub fn error(summary: impl Into<String>, detail: impl Into<String>) -> Diag {
        Diag {
            summary: summary.into(),
            detail: detail.into(),
            attribute: Vec::new(),
            warning: false,
        }
    }

    /// An error about one attribute of the configuration.
    pub fn attr(name: &str, summary: impl Into<String>, detail: impl Into<String>) -> Diag {
        Diag::error(summary, detail).at(&[name])
    }

    pub fn at(mut self, path: &[&str]) -> Diag {
        self.attribute = path.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    pub fn to_proto(&self) -> Diagnostic {
        Diagnostic {
            severity: if self.warning {
                diagnostic::Severity::Warning
            } else {
                diagnostic::Severity::Error
            } as i32,
            summary: self.summary.clone(),
            detail: self.detail.clone(),
            attribute: (!self.attribute.is_empty()).then(|| path(&self.attribute)),
        }
    }
}

/// The path of an attribute, one name per step.
pub fn path(names: &[impl AsRef<str>]) -> AttributePath {
    AttributePath {
        steps: names
            .iter()
            .map(|n| attribute_path::Step {
                selector: Some(attribute_path::step::Selector::AttributeName(
                    n.as_ref().to_owned(),
                )),
            })
            .collect(),
    }
}

/// Diagnostics of a call, as the protocol carries them.
pub fn all(diags: &[Diag]) -> Vec<Diagnostic> {
    diags.iter().map(Diag::to_proto).collect()
}
