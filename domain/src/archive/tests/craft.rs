//! Making zips for tests: with the `zip` crate's writer where it will, and
//! by byte surgery on its output where it will not (duplicate names,
//! encryption flags, lying headers, precompressed bombs).

use std::io::{Cursor, Write};

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, System};

pub type Writer = zip::ZipWriter<Cursor<Vec<u8>>>;

pub fn opts() -> SimpleFileOptions {
    SimpleFileOptions::default()
}

/// Options for an entry made on Unix with `mode` (type and permission bits).
pub fn mode(mode: u32) -> SimpleFileOptions {
    opts().system(System::Unix).external_attributes(mode << 16)
}

pub fn stored() -> SimpleFileOptions {
    opts().compression_method(CompressionMethod::Stored)
}

/// A zip of regular files, deflated.
pub fn zip_of(files: &[(&str, &[u8])]) -> Vec<u8> {
    zip_with(|w| {
        for (name, data) in files {
            w.start_file(*name, opts()).unwrap();
            w.write_all(data).unwrap();
        }
    })
}

pub fn zip_with(build: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    build(&mut w);
    w.finish().unwrap().into_inner()
}

/// A zip of one file under a raw (perhaps not UTF-8) name.
pub fn zip_of_raw_name(name: &[u8], data: &[u8]) -> Vec<u8> {
    zip_with(|w| {
        w.start_file_with_options(opts().name(name)).unwrap();
        w.write_all(data).unwrap();
    })
}

fn u16_at(b: &[u8], at: usize) -> usize {
    u16::from_le_bytes([b[at], b[at + 1]]) as usize
}

fn u32_at(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize
}

pub fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Offset of the end record (the writer adds no comment).
pub fn eocd(zip: &[u8]) -> usize {
    zip.len() - 22
}

/// Offsets of entry `index`'s local header and central directory header.
pub fn headers(zip: &[u8], index: usize) -> (usize, usize) {
    let end = eocd(zip);
    assert_eq!(
        &zip[end..end + 4],
        b"PK\x05\x06",
        "no comment after the end record"
    );
    let mut cd = u32_at(zip, end + 16);
    for _ in 0..index {
        cd += 46 + u16_at(zip, cd + 28) + u16_at(zip, cd + 30) + u16_at(zip, cd + 32);
    }
    assert_eq!(&zip[cd..cd + 4], b"PK\x01\x02");
    let local = u32_at(zip, cd + 42);
    assert_eq!(&zip[local..local + 4], b"PK\x03\x04");
    (local, cd)
}

/// Offset of entry `index`'s data.
pub fn data_at(zip: &[u8], index: usize) -> usize {
    let (local, _) = headers(zip, index);
    local + 30 + u16_at(zip, local + 26) + u16_at(zip, local + 28)
}

/// Sets general-purpose flag bits of entry `index` in both its headers.
pub fn set_flags(zip: &mut [u8], index: usize, bits: u16) {
    let (local, cd) = headers(zip, index);
    for at in [local + 6, cd + 8] {
        let v = u16_at(zip, at) as u16 | bits;
        put_u16(zip, at, v);
    }
}

/// Sets entry `index`'s compression method, CRC and uncompressed size in
/// both its headers.
pub fn set_method_crc_size(zip: &mut [u8], index: usize, method: u16, crc: u32, size: u32) {
    let (local, cd) = headers(zip, index);
    put_u16(zip, local + 8, method);
    put_u32(zip, local + 14, crc);
    put_u32(zip, local + 22, size);
    put_u16(zip, cd + 10, method);
    put_u32(zip, cd + 16, crc);
    put_u32(zip, cd + 24, size);
}

/// Replaces every occurrence of `from` with `to` (of the same length).
pub fn replace_all(zip: &mut [u8], from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len());
    let mut hits = 0;
    let mut at = 0;
    while let Some(i) = zip[at..].windows(from.len()).position(|w| w == from) {
        zip[at + i..at + i + to.len()].copy_from_slice(to);
        at += i + to.len();
        hits += 1;
    }
    assert!(hits > 0, "nothing to replace");
}

/// Raw deflate of `times` copies of `chunk`: the chunk is compressed once
/// by a fresh compressor and sync-flushed (byte-aligned, no references
/// before its start), so copies of it can be laid end to end; an empty
/// final block closes the stream. Gigabytes of deflate in milliseconds.
pub fn deflate_repeated(chunk: &[u8], times: usize) -> Vec<u8> {
    let mut c = flate2::Compress::new(flate2::Compression::best(), false);
    let mut block = Vec::with_capacity(chunk.len() + chunk.len() / 10 + 1024);
    c.compress_vec(chunk, &mut block, flate2::FlushCompress::Sync)
        .unwrap();
    assert_eq!(
        c.total_in(),
        chunk.len() as u64,
        "the whole chunk compressed"
    );
    let mut out = Vec::with_capacity(block.len() * times + 2);
    for _ in 0..times {
        out.extend_from_slice(&block);
    }
    out.extend_from_slice(&[0x03, 0x00]);
    out
}

/// The CRC-32 of `times` copies of `chunk`, by combining CRCs of doubling
/// runs of copies instead of hashing every byte.
pub fn crc_repeated(chunk: &[u8], times: usize) -> u32 {
    let mut run = flate2::Crc::new();
    run.update(chunk);
    let mut all = flate2::Crc::new();
    let mut n = times;
    while n > 0 {
        if n & 1 == 1 {
            all.combine(&run);
        }
        let mut doubled = flate2::Crc::new();
        doubled.combine(&run);
        doubled.combine(&run);
        run = doubled;
        n >>= 1;
    }
    all.sum()
}

/// A zip whose entries are `(name, chunk, times)`: each deflated from
/// `times` copies of `chunk`, with honest headers, written without ever
/// holding the inflated bytes.
pub fn zip_of_repeated(entries: &[(&str, &[u8], usize)]) -> Vec<u8> {
    let mut zip = zip_with(|w| {
        for (name, chunk, times) in entries {
            w.start_file(*name, stored()).unwrap();
            w.write_all(&deflate_repeated(chunk, *times)).unwrap();
        }
    });
    for (i, (_, chunk, times)) in entries.iter().enumerate() {
        let size = u32::try_from(chunk.len() * times).expect("under 4 GiB");
        set_method_crc_size(&mut zip, i, 8, crc_repeated(chunk, *times), size);
    }
    zip
}

/// Bytes that do not compress: a xorshift stream.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub const MIB: usize = 1024 * 1024;
