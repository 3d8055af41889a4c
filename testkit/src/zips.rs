//! Zips for tests and benchmarks of uploads.

use std::io::Write;

/// A deterministic generator (xorshift64*): the same seed, the same zip.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const WORDS: [&str; 24] = [
    "request", "response", "value", "items", "config", "handler", "result", "index", "payload",
    "session", "record", "buffer", "count", "status", "token", "user", "event", "cache", "path",
    "limit", "offset", "parse", "render", "update",
];

/// About `mib` MiB of zip for a python function (`handler.handle`): a `handler.py`, source
/// files in packages (about 40% of the zip, compressing about 4.5x) and
/// binary files that do not compress (about 60%). `seed` makes it differ.
pub fn realistic_zip(mib: usize, seed: u64) -> Vec<u8> {
    let target = (mib as u64) << 20;
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let deflated = zip::write::SimpleFileOptions::default();
    w.start_file("handler.py", deflated).unwrap();
    write!(
        w,
        "# {seed}\ndef handle(event):\n    return {{\"path\": event[\"path\"]}}\n"
    )
    .unwrap();
    let mut text = 0u64;
    let mut file = 0u64;
    while text < target * 18 / 10 {
        let mut src = String::new();
        while src.len() < 16 * 1024 {
            let w = |r: &mut Rng| WORDS[r.below(WORDS.len() as u64) as usize];
            let (a, b, c) = (w(&mut rng), w(&mut rng), w(&mut rng));
            let n = rng.below(100_000);
            src.push_str(&format!(
                "def {a}_{b}_{n}({c}, {a}=None):\n    \"\"\"{b} the {c}.\"\"\"\n    \
                 return {c}.get(\"{a}\", {n}) + len({b}_{c})\n\n"
            ));
        }
        w.start_file(format!("lib/pkg{}/mod_{file}.py", file % 16), deflated)
            .unwrap();
        w.write_all(src.as_bytes()).unwrap();
        text += src.len() as u64;
        file += 1;
    }
    let mut binary = 0u64;
    let mut blob = 0;
    while binary < target * 6 / 10 {
        let bytes: Vec<u8> = (0..64 * 1024)
            .flat_map(|_| rng.next().to_le_bytes())
            .collect();
        w.start_file(format!("lib/native/part_{blob}.so"), deflated)
            .unwrap();
        w.write_all(&bytes).unwrap();
        binary += bytes.len() as u64;
        blob += 1;
    }
    w.finish().unwrap().into_inner()
}
