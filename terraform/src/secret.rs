//! Keeping sensitive values out of what the user sees: a message that
//! could hold one (an error from the API, from a file) has it replaced.

/// `text` with every occurrence of each secret (of 4 characters or more)
/// replaced by `(sensitive value)`.
pub fn redact_all<'a>(text: &str, secrets: impl IntoIterator<Item = &'a str>) -> String {
    let mut out = text.to_owned();
    for s in secrets {
        if s.len() >= 4 {
            out = out.replace(s, "(sensitive value)");
        }
    }
    out
}

pub fn redact(text: &str, secret: &str) -> String {
    redact_all(text, [secret])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_occurrence_of_a_secret_is_replaced() {
        assert_eq!(
            redact_all("a hunter2 b hunter2 c s3cr3t", ["hunter2", "s3cr3t"]),
            "a (sensitive value) b (sensitive value) c (sensitive value)"
        );
        assert_eq!(redact("x=ab", "ab"), "x=ab", "too short to be told apart");
    }
}
