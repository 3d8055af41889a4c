//! Writing the zip: the same sources always give the same bytes.

use std::fs::File;
use std::io::{self, Cursor, Read};

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, DateTime, ZipWriter};

use super::PackError;
use super::walk::Source;

/// The deflate level of every entry.
const DEFLATE_LEVEL: i64 = 6;
const FILE_MODE: u32 = 0o644;
const EXECUTABLE_MODE: u32 = 0o755;

/// The zip of `sources`, in their order.
pub(super) fn zip(sources: &[Source]) -> Result<Vec<u8>, PackError> {
    let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
    for source in sources {
        zip.start_file(source.path.as_str(), options(source))?;
        let file = File::open(&source.read_from).map_err(|e| io_error(source, e))?;
        // One byte more than walked, to see that it grew.
        let copied =
            io::copy(&mut file.take(source.size + 1), &mut zip).map_err(|e| io_error(source, e))?;
        if copied != source.size {
            return Err(PackError::Changed {
                path: source.path.clone(),
            });
        }
    }
    Ok(zip.finish()?.into_inner())
}

/// An entry's options: nothing in them depends on the file but its size and
/// execute bit.
fn options(source: &Source) -> SimpleFileOptions {
    // `DEFAULT`, unlike `default()`, does not stamp the current time.
    SimpleFileOptions::DEFAULT
        .compression_method(CompressionMethod::Deflated)
        .compression_level(Some(DEFLATE_LEVEL))
        .last_modified_time(DateTime::DEFAULT)
        .unix_permissions(if source.executable {
            EXECUTABLE_MODE
        } else {
            FILE_MODE
        })
        // A size that does not fit the classic fields needs zip64 fields.
        .large_file(source.size >= u64::from(u32::MAX))
}

fn io_error(source: &Source, e: io::Error) -> PackError {
    PackError::Io {
        path: source.path.clone(),
        source: e,
    }
}
