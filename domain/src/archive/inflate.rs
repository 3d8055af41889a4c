//! Inflating entries within a budget counted on the bytes actually
//! inflated, never on the sizes the headers declare.

use std::io::{self, Read};

use super::{ArchiveError, ArchiveLimits};

/// The buffer the first pass inflates into: all the memory counting an
/// entry takes, whatever it inflates to.
pub(super) const BUFFER_BYTES: usize = 64 * 1024;

/// What validating inflated, for tests that bound it.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Meter {
    /// Bytes read out of entries, over both passes.
    pub inflated: u64,
}

/// How many bytes all entries together may still inflate to: the
/// unpacked-size limit, or `max_ratio` times the zip's size once past the
/// ratio floor, whichever is lower.
#[derive(Debug)]
pub(super) struct Budget {
    zip_size: u64,
    limits: ArchiveLimits,
    allowed: u64,
    inflated: u64,
}

impl Budget {
    pub fn new(zip_size: u64, limits: &ArchiveLimits) -> Budget {
        let by_ratio = limits
            .max_ratio
            .saturating_mul(zip_size)
            .max(limits.ratio_floor_bytes);
        Budget {
            zip_size,
            limits: *limits,
            allowed: limits.max_unpacked_bytes.min(by_ratio),
            inflated: 0,
        }
    }

    pub fn spend(&mut self, n: u64) -> Result<(), ArchiveError> {
        self.inflated = self.inflated.saturating_add(n);
        if self.inflated <= self.allowed {
            return Ok(());
        }
        if self.inflated > self.limits.max_unpacked_bytes {
            return Err(ArchiveError::UnpacksTooLarge {
                limit: self.limits.max_unpacked_bytes,
            });
        }
        let zip_size = self.zip_size.max(1);
        Err(ArchiveError::Bomb {
            ratio: self.inflated.div_ceil(zip_size),
            limit: self.limits.max_ratio,
        })
    }
}

/// Why inflating an entry stopped.
#[derive(Debug)]
pub(super) enum Stop {
    /// The entry is corrupt: a CRC mismatch, bad deflate data, more bytes
    /// than its header declares.
    Io(io::Error),
    /// The archive went over a limit.
    Limit(ArchiveError),
}

impl Stop {
    pub fn for_entry(self, path: &str) -> ArchiveError {
        match self {
            Stop::Io(e) => ArchiveError::Corrupt(format!("{path:?}: {e}")),
            Stop::Limit(e) => e,
        }
    }
}

/// Inflates an entry into `buffer` chunk by chunk, charging each chunk to
/// the budget before the next is inflated; returns its size. Reading on to
/// the end is what makes the zip reader check the entry's CRC.
pub(super) fn count(
    entry: &mut impl Read,
    budget: &mut Budget,
    buffer: &mut [u8],
    meter: &mut Meter,
) -> Result<u64, Stop> {
    let mut size = 0u64;
    loop {
        let n = match entry.read(buffer) {
            Ok(0) => return Ok(size),
            Ok(n) => n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Stop::Io(e)),
        };
        meter.inflated += n;
        size += n;
        budget.spend(n).map_err(Stop::Limit)?;
    }
}

/// Reads an entry whose size the first pass counted, checking it holds
/// exactly that many bytes (and, reading to its end, its CRC).
pub(super) fn read_exactly(
    entry: impl Read,
    size: u64,
    meter: &mut Meter,
) -> Result<Vec<u8>, Stop> {
    let capacity = usize::try_from(size).map_err(|e| Stop::Io(io::Error::other(e)))?;
    let mut data = Vec::with_capacity(capacity);
    entry
        .take(size.saturating_add(1))
        .read_to_end(&mut data)
        .map_err(Stop::Io)?;
    meter.inflated += data.len() as u64;
    if data.len() as u64 != size {
        return Err(Stop::Io(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("inflated to {size} bytes, then to {}", data.len()),
        )));
    }
    Ok(data)
}
