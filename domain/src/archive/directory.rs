//! Reading a zip's end records and central directory by hand, for what the
//! zip reader does not tell before it has parsed (and held) everything: how
//! many entries an archive declares, and which name it holds twice.

use std::collections::HashSet;

const EOCD: &[u8; 4] = b"PK\x05\x06";
const EOCD_BYTES: usize = 22;
const ZIP64_LOCATOR: &[u8; 4] = b"PK\x06\x07";
const ZIP64_LOCATOR_BYTES: usize = 20;
const ZIP64_EOCD: &[u8; 4] = b"PK\x06\x06";
const CENTRAL_HEADER: &[u8; 4] = b"PK\x01\x02";
const CENTRAL_HEADER_BYTES: usize = 46;
/// An archive comment is at most this long, so the end record lies within
/// this many bytes of the end.
const MAX_COMMENT: usize = u16::MAX as usize;

fn u16_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?).into())
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The most entries any end-of-central-directory record near the end of
/// the archive declares (a reader may settle on any of them), or `None`
/// when there is none. A zip64 count that cannot be found counts as the
/// 65,535 the plain record then holds.
pub(super) fn declared_entries(bytes: &[u8]) -> Option<u64> {
    let last = bytes.len().checked_sub(EOCD_BYTES)?;
    let first = last.saturating_sub(MAX_COMMENT + 4);
    (first..=last)
        .filter(|&at| &bytes[at..at + 4] == EOCD)
        .map(|at| {
            let on_disk = u16_at(bytes, at + 8).unwrap_or(0);
            let total = u16_at(bytes, at + 10).unwrap_or(0);
            let plain = on_disk.max(total);
            if plain == u64::from(u16::MAX) {
                zip64_entries(bytes, at).unwrap_or(plain)
            } else {
                plain
            }
        })
        .max()
}

/// The entry count of the zip64 end record that the locator just before
/// the end record at `eocd` points to.
fn zip64_entries(bytes: &[u8], eocd: usize) -> Option<u64> {
    let locator = eocd.checked_sub(ZIP64_LOCATOR_BYTES)?;
    if bytes.get(locator..locator + 4)? != ZIP64_LOCATOR {
        return None;
    }
    let at = usize::try_from(u64_at(bytes, locator + 8)?).ok()?;
    if bytes.get(at..at.checked_add(4)?)? != ZIP64_EOCD {
        return None;
    }
    let on_disk = u64_at(bytes, at + 24)?;
    let total = u64_at(bytes, at + 32)?;
    Some(on_disk.max(total))
}

/// The first name the central directory starting at `start` holds twice.
pub(super) fn first_duplicate(bytes: &[u8], start: u64) -> Option<Vec<u8>> {
    let mut at = usize::try_from(start).ok()?;
    let mut seen = HashSet::new();
    while bytes.get(at..at + 4)? == CENTRAL_HEADER {
        let name_len = u16_at(bytes, at + 28)? as usize;
        let extra_len = u16_at(bytes, at + 30)? as usize;
        let comment_len = u16_at(bytes, at + 32)? as usize;
        let name_at = at + CENTRAL_HEADER_BYTES;
        let name = bytes.get(name_at..name_at + name_len)?;
        if !seen.insert(name) {
            return Some(name.to_vec());
        }
        at = name_at + name_len + extra_len + comment_len;
    }
    None
}
