//! A zip bomb is stopped while inflating, by the bytes it inflated: having
//! inflated a bounded number of bytes, and having held no more memory than
//! a fixed buffer. Memory is counted by this test binary's allocator, per
//! thread, so other tests running beside it do not count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Write;

use super::super::inflate::{BUFFER_BYTES, Meter};
use super::super::{ArchiveError, ArchiveLimits, validate};
use super::craft::*;

struct Counting;

thread_local! {
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

fn grew(n: usize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + n as i64;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

fn shrank(n: usize) {
    let _ = LIVE.try_with(|live| live.set(live.get() - n as i64));
}

// SAFETY: every call is passed to the system allocator unchanged; the
// counting touches only const-initialised thread locals, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is the system allocator's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            shrank(layout.size());
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f`, returning what it returned and the most memory it held at
/// once on this thread beyond what was held before.
pub(super) fn peak_memory<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(before));
    let out = f();
    let peak = PEAK.with(Cell::get);
    (out, (peak - before).max(0) as u64)
}

const GIB: usize = 1024 * MIB;

#[test]
fn a_gibibyte_bomb_is_refused_having_inflated_a_bounded_amount_in_bounded_memory() {
    let limits = ArchiveLimits::default();
    // 1 GiB of zeros, honestly declared, in about a mebibyte of zip.
    let bomb = zip_of_repeated(&[
        ("handler.py", b"def handle(e):\n    return 1\n", 1),
        ("zeros.bin", &[0u8; MIB], GIB / MIB),
    ]);
    let zip_size = bomb.len() as u64;
    assert!(zip_size < 2 * MIB as u64, "the bomb is {zip_size} bytes");
    let declared: u64 = {
        let zip = zip::ZipArchive::new(std::io::Cursor::new(&bomb)).unwrap();
        (0..zip.len())
            .map(|i| zip.by_index_data(i).unwrap().size())
            .sum()
    };
    assert!(declared > GIB as u64, "declares {declared} bytes");

    let mut meter = Meter::default();
    let (result, held) = peak_memory(|| validate(&bomb, &limits, &mut meter));
    let err = result.expect_err("a bomb");
    assert!(
        matches!(err, ArchiveError::Bomb { limit: 100, .. }),
        "{err:?}"
    );
    // It stops within one buffer of 100 times its size, not after 1 GiB.
    let bound = limits.max_ratio * zip_size + BUFFER_BYTES as u64;
    assert!(
        meter.inflated <= bound,
        "inflated {} bytes; the bound is {bound}",
        meter.inflated
    );
    assert!(
        meter.inflated > limits.max_ratio * zip_size,
        "it was the ratio that stopped it"
    );
    // And held about a buffer and the zip reader's state: nothing that
    // grows with what the bomb inflates to.
    assert!(
        held < 4 * MIB as u64,
        "held {held} bytes while inflating {} bytes",
        meter.inflated
    );
}

#[test]
fn a_bomb_that_lies_about_its_size_is_refused_at_the_size_it_declared() {
    // The same gibibyte declared as 1 KiB: the reader stops one byte past it.
    let mut bomb = zip_of_repeated(&[("zeros.bin", &[0u8; MIB], GIB / MIB)]);
    set_method_crc_size(&mut bomb, 0, 8, 0, 1024);
    let mut meter = Meter::default();
    let (result, held) = peak_memory(|| validate(&bomb, &ArchiveLimits::default(), &mut meter));
    let err = result.expect_err("a lying bomb");
    assert!(matches!(err, ArchiveError::Corrupt(_)), "{err:?}");
    assert!(
        meter.inflated <= BUFFER_BYTES as u64,
        "inflated {}",
        meter.inflated
    );
    assert!(held < 4 * MIB as u64, "held {held} bytes");
}

#[test]
fn a_valid_archive_is_held_once_it_passed() {
    // The second pass holds the files: memory then grows with them, as it must.
    let zip = zip_of_repeated(&[("data.bin", &noise(MIB, 3), 4)]);
    let mut meter = Meter::default();
    let (result, held) = peak_memory(|| validate(&zip, &ArchiveLimits::default(), &mut meter));
    let archive = result.unwrap();
    assert_eq!(archive.files["data.bin"].len(), 4 * MIB);
    assert_eq!(meter.inflated, 8 * MIB as u64, "each byte inflated twice");
    assert!(held >= 4 * MIB as u64, "the allocator counts: held {held}");
}

#[test]
fn deep_names_cost_memory_in_proportion_to_their_length_not_their_depth() {
    // 10,000 files, each under its own tree of 500 directories: five
    // million directories in all, in about 20 MiB of zip.
    let limits = ArchiveLimits::default();
    let deep = "d/".repeat(500);
    let zip = zip_with(|w| {
        for i in 0..limits.max_files {
            w.start_file(format!("{i:04x}/{deep}f"), stored()).unwrap();
            w.write_all(b"x").unwrap();
        }
    });
    assert!(
        zip.len() < limits.max_zip_bytes as usize,
        "{} bytes",
        zip.len()
    );
    let (result, held) = peak_memory(|| validate(&zip, &limits, &mut Meter::default()));
    let archive = result.unwrap();
    assert_eq!(archive.files.len(), limits.max_files);
    assert!(
        held < 8 * zip.len() as u64,
        "held {held} bytes for a zip of {} bytes",
        zip.len()
    );
}
