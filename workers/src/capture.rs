//! Output capture, for every driver: what a job's record keeps of a
//! stream it printed. The first and last [`JOB_OUTPUT_LIMIT`] / 2 bytes are
//! kept, with how many there were in all; whatever lies between is left
//! out, marked by a line that says how much, and a cut never splits a
//! UTF-8 character. The local driver pushes a run's pipes through it as
//! they come; the Kubernetes driver pushes a pod's log, read back whole.
//! A build's log (`crate::build_log`) is kept the same way, with a limit of
//! its own.

/// Most bytes of stdout (and of stderr) a job's record keeps.
pub const JOB_OUTPUT_LIMIT: usize = 64 * 1024;

/// What a run printed: at most [`JOB_OUTPUT_LIMIT`] bytes of it, with
/// truncation marked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Captured {
    /// The output as UTF-8 (invalid bytes replaced). When truncated: its
    /// first and last part, with a line between them saying how many bytes
    /// were left out.
    pub text: String,
    /// How many bytes were printed in all.
    pub bytes: u64,
    /// Whether `text` leaves something out.
    pub truncated: bool,
}

/// What a record keeps of `bytes`, output read back whole.
pub(crate) fn captured(bytes: &[u8]) -> Captured {
    let mut capture = Capture::default();
    capture.push(bytes);
    capture.finish()
}

/// One stream's output: its first `limit / 2` bytes, its last `limit / 2`
/// bytes, and how many there were.
#[derive(Debug, Clone)]
pub(crate) struct Capture {
    limit: usize,
    head: Vec<u8>,
    /// A ring of the last bytes after the head; `tail_start` is its oldest.
    tail: Vec<u8>,
    tail_start: usize,
    total: u64,
}

impl Default for Capture {
    fn default() -> Capture {
        Capture::with_limit(JOB_OUTPUT_LIMIT)
    }
}

impl Capture {
    pub(crate) fn with_limit(limit: usize) -> Capture {
        Capture {
            limit,
            head: Vec::new(),
            tail: Vec::new(),
            tail_start: 0,
            total: 0,
        }
    }

    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let head_room = (self.limit / 2).saturating_sub(self.head.len());
        let into_head = head_room.min(bytes.len());
        self.head.extend_from_slice(&bytes[..into_head]);
        bytes = &bytes[into_head..];
        let cap = self.limit - self.limit / 2;
        if cap == 0 {
            return;
        }
        if bytes.len() >= cap {
            self.tail.clear();
            self.tail.extend_from_slice(&bytes[bytes.len() - cap..]);
            self.tail_start = 0;
            return;
        }
        for &b in bytes {
            if self.tail.len() < cap {
                self.tail.push(b);
            } else {
                self.tail[self.tail_start] = b;
                self.tail_start = (self.tail_start + 1) % cap;
            }
        }
    }

    pub(crate) fn finish(self) -> Captured {
        let mut tail = self.tail[self.tail_start..].to_vec();
        tail.extend_from_slice(&self.tail[..self.tail_start]);
        let kept = (self.head.len() + tail.len()) as u64;
        if kept == self.total {
            let mut all = self.head;
            all.extend_from_slice(&tail);
            return Captured {
                text: String::from_utf8_lossy(&all).into_owned(),
                bytes: self.total,
                truncated: false,
            };
        }
        let head = without_partial_end(&self.head);
        let tail = without_partial_start(&tail);
        let omitted = self.total - (head.len() + tail.len()) as u64;
        let mut text = String::from_utf8_lossy(head).into_owned();
        text.push_str(&format!("\n… {} bytes omitted …\n", thousands(omitted)));
        text.push_str(&String::from_utf8_lossy(tail));
        Captured {
            text,
            bytes: self.total,
            truncated: true,
        }
    }
}

fn is_continuation(b: u8) -> bool {
    b & 0b1100_0000 == 0b1000_0000
}

/// How long the UTF-8 sequence that `lead` starts is (1 for anything else).
fn sequence_len(lead: u8) -> usize {
    match lead {
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf7 => 4,
        _ => 1,
    }
}

/// `bytes` without a character cut off at its end.
fn without_partial_end(bytes: &[u8]) -> &[u8] {
    let len = bytes.len();
    let mut start = len;
    while start > 0 && len - start < 4 {
        start -= 1;
        if !is_continuation(bytes[start]) {
            if sequence_len(bytes[start]) > len - start {
                return &bytes[..start];
            }
            break;
        }
    }
    bytes
}

/// `bytes` without the continuation of a character cut off at its start.
fn without_partial_start(bytes: &[u8]) -> &[u8] {
    let skip = bytes
        .iter()
        .take(3)
        .take_while(|&&b| is_continuation(b))
        .count();
    &bytes[skip..]
}

/// `983040` as `983,040`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captured(limit: usize, chunks: &[&[u8]]) -> Captured {
        let mut c = Capture::with_limit(limit);
        for chunk in chunks {
            c.push(chunk);
        }
        c.finish()
    }

    #[test]
    fn output_within_the_limit_is_kept_whole() {
        let got = captured(8, &[b"abc", b"defgh"]);
        assert_eq!(got.text, "abcdefgh");
        assert_eq!(got.bytes, 8);
        assert!(!got.truncated);
    }

    #[test]
    fn output_past_the_limit_keeps_its_first_and_last_half() {
        let got = captured(8, &[b"0123", b"456789", b"ab"]);
        assert_eq!(got.text, "0123\n… 4 bytes omitted …\n89ab");
        assert_eq!(got.bytes, 12);
        assert!(got.truncated);
        let got = captured(8, &[b"0123456789abcdef"]);
        assert_eq!(got.text, "0123\n… 8 bytes omitted …\ncdef");
    }

    #[test]
    fn cutting_never_splits_a_character() {
        // "é" is two bytes, "€" three: the head ends inside "é", the tail
        // starts inside "€".
        let text = "abcé----------€xyz";
        let got = captured(8, &[text.as_bytes()]);
        assert!(got.truncated);
        assert!(!got.text.contains('\u{fffd}'), "{:?}", got.text);
        assert!(got.text.starts_with("abc\n"), "{:?}", got.text);
        assert!(got.text.ends_with("\nxyz"), "{:?}", got.text);
        let omitted = text.len() - 6;
        assert!(got.text.contains(&format!("… {omitted} bytes omitted …")));
    }

    #[test]
    fn a_log_read_back_whole_is_kept_as_a_streamed_one_is() {
        let log: Vec<u8> = (0..JOB_OUTPUT_LIMIT + 1000)
            .map(|i| b'a' + (i % 26) as u8)
            .collect();
        let mut streamed = Capture::default();
        for chunk in log.chunks(1500) {
            streamed.push(chunk);
        }
        let got = super::captured(&log);
        assert_eq!(got, streamed.finish());
        assert!(got.truncated);
        assert_eq!(got.bytes, log.len() as u64);
        assert!(got.text.contains("… 1,000 bytes omitted …"), "{}", got.text);
        assert!(super::captured(b"").text.is_empty());
    }

    #[test]
    fn big_numbers_are_grouped_by_thousands() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(983_040), "983,040");
        assert_eq!(thousands(1_048_576), "1,048,576");
    }
}
