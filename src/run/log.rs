//! A run's write-ahead log of results (issue 31). The kill -9 bound of
//! issue 30 (a worker takes its next test case only once its paid reply is
//! safe) used to be kept by committing every reply to the database before
//! its worker went on: many small transactions, each rewriting the same
//! index pages (14.7 bytes written for every byte kept). Now a reply is
//! safe once it is appended to this log, one MessagePack record (JSON
//! lines before issue 45: escaping every prompt for JSON was 3 % of a run's
//! CPU, and JSON wrote an unknown cost as `null`), compressed and flushed
//! to the file with its group (a kill loses what the process holds,
//! not what the kernel does), and the database takes the
//! results in large transactions. Each transaction records the sequence
//! number of the last record it holds (`Store::write_logged`). The writer
//! goes on logging while a commit is in flight, so the log is moved aside
//! (`DATABASE.run-ID.log.committing`) as each commit starts and a fresh file
//! takes the records after it; the moved file is removed once the commit is
//! answered, and both when the run's writer ends. A process killed in
//! between leaves one or both; the next `--resume` of the run writes every
//! record past the database's mark, then removes them.

use std::fs::File;
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};

use lz4_flex::frame::{BlockMode, BlockSize, FrameDecoder, FrameEncoder, FrameInfo};
use serde::{Deserialize, Serialize};

use crate::domain::{DiscardedCharge, NewResult};
use crate::store::{Store, StoreError};

/// One record: a result or the charges of a request that left none.
#[derive(Deserialize)]
struct Record {
    seq: i64,
    #[serde(flatten)]
    item: Item,
}

#[derive(Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
enum Item {
    Result(Box<NewResult>),
    Charges(Vec<DiscardedCharge>),
}

/// [`Record`] as written, borrowing what it holds (the same fields).
#[derive(Serialize)]
struct RecordRef<'a> {
    seq: i64,
    #[serde(flatten)]
    item: ItemRef<'a>,
}

#[derive(Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
enum ItemRef<'a> {
    Result(&'a NewResult),
    Charges(&'a [DiscardedCharge]),
}

/// The open log of one run, written by its writer only.
pub(super) struct ResultLog {
    path: PathBuf,
    out: FrameEncoder<Staged>,
    /// The sequence number of the last record appended.
    seq: i64,
    /// Records in the current file.
    records: usize,
    /// A file moved aside for a commit not yet answered
    /// ([`ResultLog::move_aside`]).
    aside: bool,
    /// One record (its length, then its MessagePack), reused: the
    /// compressor takes it in one write rather than serde's many small ones.
    line: Vec<u8>,
}

impl ResultLog {
    /// Starts an empty log at `path`, numbering records after `after` (the
    /// database's mark for the run, so numbers never repeat).
    pub(super) fn create(path: PathBuf, after: i64) -> io::Result<ResultLog> {
        // A run's log is opened once what an earlier process left is
        // written (`--resume` replays both files first; a SQLite run has
        // one writing process): a file aside here is stale, like the log
        // `File::create` empties, and a later resume must not replay it.
        remove_if_there(&aside_path(&path))?;
        let file = File::create(&path)?;
        Ok(ResultLog {
            path,
            out: encoder(file)?,
            seq: after,
            records: 0,
            aside: false,
            line: Vec::new(),
        })
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The sequence number of the last record appended.
    pub(super) fn seq(&self) -> i64 {
        self.seq
    }

    /// Appends a result; it is safe once [`ResultLog::flush`] returns.
    pub(super) fn append_result(&mut self, r: &NewResult) -> io::Result<()> {
        self.append(ItemRef::Result(r))
    }

    /// Appends the charges of a request that left no result.
    pub(super) fn append_charges(&mut self, c: &[DiscardedCharge]) -> io::Result<()> {
        self.append(ItemRef::Charges(c))
    }

    fn append(&mut self, item: ItemRef<'_>) -> io::Result<()> {
        let seq = self.seq + 1;
        self.line.clear();
        self.line.extend_from_slice(&[0; 4]);
        // Fields by name: a record read by a later version finds its fields
        // whatever their order, and skipped or defaulted ones stay optional.
        rmp_serde::encode::write_named(&mut self.line, &RecordRef { seq, item })
            .map_err(io::Error::other)?;
        let len = u32::try_from(self.line.len() - 4).map_err(io::Error::other)?;
        self.line[..4].copy_from_slice(&len.to_le_bytes());
        self.out.write_all(&self.line)?;
        self.seq = seq;
        self.records += 1;
        Ok(())
    }

    /// Hands every record appended so far to the kernel: one block for the
    /// group of records the writer took at once (issue 45). Every byte of
    /// the records reaches the file, and the blocks are linked, so records
    /// compress against the 64 KB before them (composed prompts share most
    /// of their text).
    pub(super) fn flush(&mut self) -> io::Result<()> {
        self.out.flush()?;
        self.out.get_mut().flush()
    }

    /// As a commit of every record appended so far starts: the file moves
    /// aside and a fresh one takes what comes next (sequence numbers go
    /// on). While an earlier file is still aside (its commit failed, and the
    /// next commit holds its records again) the current file stays.
    pub(super) fn move_aside(&mut self) -> io::Result<()> {
        if self.records == 0 || self.aside {
            return Ok(());
        }
        // The stream ends before the file moves: an encoder dropped
        // afterwards wrote its last bytes into the file after it, a stray
        // block that read as a corrupt stream (and, since issue 41, as a
        // damaged log).
        self.out.try_finish().map_err(io::Error::other)?;
        self.out.get_mut().flush()?;
        std::fs::rename(&self.path, aside_path(&self.path))?;
        self.aside = true;
        self.out = encoder(File::create(&self.path)?)?;
        self.records = 0;
        Ok(())
    }

    /// The commit that started after the last [`ResultLog::move_aside`]
    /// (or a later one) is in the database: the file aside goes.
    pub(super) fn committed(&mut self) -> io::Result<()> {
        if !self.aside {
            return Ok(());
        }
        remove_if_there(&aside_path(&self.path))?;
        self.aside = false;
        Ok(())
    }

    /// The run's writer is done and every record is in the database (or
    /// kept elsewhere): the log goes, and any file aside.
    pub(super) fn remove(self) -> io::Result<()> {
        drop(self.out);
        remove_if_there(&aside_path(&self.path))?;
        remove_if_there(&self.path)
    }
}

fn remove_if_there(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Where a log is moved while the commit of its records is in flight.
fn aside_path(log: &Path) -> PathBuf {
    let mut p = log.as_os_str().to_owned();
    p.push(".committing");
    PathBuf::from(p)
}

/// Whether `run_id` left a log (or a file of it moved aside) that a
/// `--resume` has not written yet.
pub(super) fn left(store: &Store, run_id: i64) -> bool {
    store
        .log_path(run_id)
        .is_some_and(|p| p.exists() || aside_path(&p).exists())
}

/// The log's compressor: LZ4 frames (issue 45: deflate's Huffman table per
/// flushed group and its matching cost 8-10 % of a run's CPU; LZ4 writes
/// somewhat more bytes for a fraction of the CPU), blocks linked so each
/// group compresses against the records before it.
fn encoder(file: File) -> io::Result<FrameEncoder<Staged>> {
    let info = FrameInfo::new()
        .block_size(BlockSize::Max64KB)
        .block_mode(BlockMode::Linked);
    let mut out = FrameEncoder::with_frame_info(
        info,
        Staged {
            file,
            bytes: Vec::new(),
        },
    );
    // Buffered with the first group's records: reaches the file with them.
    out.write_all(RECORDS_HEAD)?;
    Ok(out)
}

/// The log's file behind its compressor, which writes a block's header and
/// its bytes (and a frame's header first) in writes of their own: they wait
/// here for the group's flush and reach the file in one `write` (issue 45:
/// two system calls a group were 1 % of a run's CPU). Nothing the writer
/// has flushed waits here.
struct Staged {
    file: File,
    bytes: Vec<u8>,
}

impl Write for Staged {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.bytes.is_empty() {
            // Cleared even when the write fails: the writer gives the log up
            // then, and bytes written twice would read as a damaged stream.
            let written = self.file.write_all(&self.bytes);
            self.bytes.clear();
            written?;
        }
        Ok(())
    }
}

/// The start of a log's (decompressed) text since its records are
/// MessagePack, each after its length (4 bytes, little-endian). A log that
/// does not start so is JSON lines, as earlier versions wrote it.
const RECORDS_HEAD: &[u8] = b"helmbench result log 2\n";

/// A record longer than this is no record: its length was damaged (a
/// reply is cut at the size limit long before).
const MAX_RECORD: usize = 1 << 30;

/// An LZ4 frame's first bytes; a log without them is the deflate stream of
/// an earlier version (read the same way, so its records are not lost).
const LZ4_MAGIC: [u8; 4] = [0x04, 0x22, 0x4d, 0x18];

/// A log's readable records, and the first unreadable one (its number and
/// why) when there is one.
struct Read {
    records: Vec<Record>,
    damage: Option<(usize, String)>,
}

/// Reads a log's records. A record cut short by the kill (its length or
/// its bytes incomplete, or compressed bytes that stop mid-block: the
/// decoder says the stream is incomplete) ends the log: every record before
/// it was flushed whole. A whole record that is not one, or bytes the
/// decoder calls corrupt, are damage: never skipped without a word (issue
/// 41). Logs of earlier versions (JSON lines, LZ4 or deflate) read too.
fn read(path: &Path) -> io::Result<Read> {
    let mut file = File::open(path)?;
    let mut head = [0u8; 4];
    let lz4 = matches!(io::Read::read_exact(&mut file, &mut head), Ok(()) if head == LZ4_MAGIC);
    io::Seek::rewind(&mut file)?;
    let decoder: Box<dyn io::Read> = if lz4 {
        Box::new(FrameDecoder::new(file))
    } else {
        Box::new(flate2::read::DeflateDecoder::new(file))
    };
    let mut reader = io::BufReader::new(decoder);
    let mut start = vec![0u8; RECORDS_HEAD.len()];
    let got = match fill(&mut reader, &mut start) {
        Ok(n) => n,
        Err(e) => {
            let why = format!("{e}; nothing after it can be read");
            return Ok(Read {
                records: Vec::new(),
                damage: Some((1, why)),
            });
        }
    };
    if got == RECORDS_HEAD.len() && start == RECORDS_HEAD {
        return Ok(read_records(reader));
    }
    start.truncate(got);
    Ok(read_lines(io::BufReader::new(io::Read::chain(
        &start[..],
        reader,
    ))))
}

/// Reads into `buf` until it is full or the stream ends (a stream cut
/// short, the decoder's EOF, is an end); how many bytes it read.
fn fill(reader: &mut impl io::Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match reader.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The records after [`RECORDS_HEAD`].
fn read_records(mut reader: impl io::Read) -> Read {
    let (mut records, mut damage) = (Vec::new(), None);
    let cannot = |e: io::Error| format!("{e}; nothing after it can be read");
    let mut body = Vec::new();
    for n in 1.. {
        let mut len = [0u8; 4];
        match fill(&mut reader, &mut len) {
            Ok(4) => {}
            // The end, or the last record cut short.
            Ok(_) => break,
            Err(e) => {
                damage = Some((n, cannot(e)));
                break;
            }
        }
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_RECORD {
            let why = format!("a record of {len} bytes; nothing after it can be read");
            damage = Some((n, why));
            break;
        }
        body.resize(len, 0);
        match fill(&mut reader, &mut body) {
            Ok(k) if k == len => match rmp_serde::from_slice::<Record>(&body) {
                Ok(r) => records.push(r),
                Err(e) => {
                    damage.get_or_insert((n, e.to_string()));
                }
            },
            Ok(_) => break,
            Err(e) => {
                damage.get_or_insert((n, cannot(e)));
                break;
            }
        }
    }
    Read { records, damage }
}

/// The records of a log of JSON lines, as versions before issue 45 wrote.
fn read_lines(mut reader: impl BufRead) -> Read {
    let (mut records, mut damage) = (Vec::new(), None);
    let mut line = String::new();
    for n in 1.. {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) if line.ends_with('\n') => match serde_json::from_str::<Record>(&line) {
                Ok(r) => records.push(r),
                Err(e) => {
                    damage.get_or_insert((n, e.to_string()));
                }
            },
            // The last record, cut short; or the end of a stream never
            // finished (the log is only ever flushed): the decoder's EOF.
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
            Err(e) => {
                damage.get_or_insert((n, format!("{e}; nothing after it can be read")));
                break;
            }
        }
    }
    Read { records, damage }
}

/// Writes what an earlier process kept for `run_id` (what `--resume` does
/// first): the pending file of results it could not write, and the log a
/// killed process left. Returns how many results they held.
pub async fn write_kept(store: &Store, run_id: i64) -> Result<usize, StoreError> {
    // Both are written before either's error is returned (a damaged file
    // must not keep the other's results from the database).
    let pending = store.write_pending(run_id).await;
    let logged = replay(store, run_id).await;
    Ok(pending? + logged?)
}

/// Writes what a killed process left in `run_id`'s log (the records past
/// the database's mark), then removes the log; returns how many results
/// it held.
async fn replay(store: &Store, run_id: i64) -> Result<usize, StoreError> {
    let Some(path) = store.log_path(run_id) else {
        return Ok(0);
    };
    // The file aside holds the earlier records: read first.
    let mut files = Vec::new();
    for path in [aside_path(&path), path] {
        match read(&path) {
            Ok(r) => files.push((path, r)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(log_error(&path, e)),
        }
    }
    if files.is_empty() {
        return Ok(0);
    }
    let mark = store.log_mark(run_id).await?;
    let records = files
        .iter_mut()
        .flat_map(|(_, r)| std::mem::take(&mut r.records));
    let mut written = 0;
    let (mut results, mut charges, mut last) = (Vec::new(), Vec::new(), mark);
    for r in records.filter(|r| r.seq > mark) {
        last = last.max(r.seq);
        match r.item {
            Item::Result(x) => results.push(*x),
            Item::Charges(c) => charges.extend(c),
        }
        if results.len() == 256 {
            written += results.len();
            store
                .write_logged(&results, &charges, Some((run_id, last)))
                .await?;
            results.clear();
            charges.clear();
        }
    }
    if !results.is_empty() || !charges.is_empty() {
        written += results.len();
        store
            .write_logged(&results, &charges, Some((run_id, last)))
            .await?;
    }
    for (path, read) in files {
        if let Some((record, why)) = read.damage {
            return Err(Store::set_aside(&path, record, why));
        }
        std::fs::remove_file(&path).map_err(|e| log_error(&path, e))?;
    }
    Ok(written)
}

fn log_error(path: &Path, source: io::Error) -> StoreError {
    StoreError::Pending {
        file: path.display().to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(code: &str) -> NewResult {
        NewResult {
            test_code: code.into(),
            prompt: "a composed prompt ".repeat(40),
            ..Default::default()
        }
    }

    /// A kill mid-write leaves the last group's block cut short (or its
    /// header alone): every group flushed before it reads back whole, and
    /// nothing is taken for damage.
    #[test]
    fn a_block_cut_short_ends_the_log_after_the_groups_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.log");
        let mut log = ResultLog::create(path.clone(), 0).unwrap();
        for code in ["A", "B", "C"] {
            log.append_result(&result(code)).unwrap();
        }
        log.flush().unwrap();
        let whole = std::fs::metadata(&path).unwrap().len();
        for code in ["D", "E"] {
            log.append_result(&result(code)).unwrap();
        }
        log.flush().unwrap();
        let full = std::fs::read(&path).unwrap();
        assert_eq!(&full[..4], &LZ4_MAGIC);
        let codes = |p: &Path| -> (Vec<String>, bool) {
            let r = read(p).unwrap();
            let codes = r
                .records
                .iter()
                .map(|r| match &r.item {
                    Item::Result(x) => x.test_code.clone(),
                    Item::Charges(_) => "charges".into(),
                })
                .collect();
            (codes, r.damage.is_some())
        };
        assert_eq!(
            codes(&path),
            (
                vec!["A", "B", "C", "D", "E"]
                    .into_iter()
                    .map(String::from)
                    .collect(),
                false
            )
        );
        // The second group cut in its data, then right after its header.
        for cut in [full.len() - 7, whole as usize + 4] {
            std::fs::write(&path, &full[..cut]).unwrap();
            assert_eq!(
                codes(&path),
                (vec!["A".to_string(), "B".into(), "C".into()], false),
                "cut at {cut} of {}",
                full.len()
            );
        }
        // A commit starting moves the file aside and a fresh one takes the
        // records after it; sequence numbers go on.
        std::fs::write(&path, &full).unwrap();
        log.move_aside().unwrap();
        let aside = aside_path(&path);
        log.append_result(&result("F")).unwrap();
        log.flush().unwrap();
        assert_eq!(log.seq(), 6);
        assert_eq!(codes(&path), (vec!["F".to_string()], false));
        assert_eq!(codes(&aside).0.len(), 5, "the file aside reads whole");
        // Another commit before the first is answered (the first failed,
        // the next holds its records again): nothing moves.
        log.move_aside().unwrap();
        assert_eq!(codes(&path).0, vec!["F".to_string()]);
        assert_eq!(codes(&aside).0.len(), 5);
        log.committed().unwrap();
        assert!(!aside.exists(), "answered: the file aside goes");
        log.remove().unwrap();
        assert!(!path.exists());
        // A new log starts with no file aside: one left there is stale,
        // like the log it empties.
        std::fs::write(&aside, b"stale").unwrap();
        let log = ResultLog::create(path.clone(), 6).unwrap();
        assert!(!aside.exists());
        log.remove().unwrap();
    }
}

#[cfg(test)]
mod unknown_cost {
    use super::*;
    use crate::domain::NewJudgement;

    /// A cost nobody knows (NaN) reads back as unknown, in a result, its
    /// judgement and a loose charge: JSON has no NaN and wrote `null`, which
    /// no `f64` read, so the record was taken for damage.
    #[test]
    fn an_unknown_cost_reads_back_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.log");
        let mut log = ResultLog::create(path.clone(), 0).unwrap();
        let r = NewResult {
            test_code: "A".into(),
            cost_usd: f64::NAN,
            judgements: vec![NewJudgement {
                cost_usd: f64::NAN,
                ..Default::default()
            }],
            ..Default::default()
        };
        log.append_result(&r).unwrap();
        log.append_charges(&[DiscardedCharge {
            cost_usd: f64::NAN,
            ..Default::default()
        }])
        .unwrap();
        log.flush().unwrap();
        let read = read(&path).unwrap();
        assert!(read.damage.is_none(), "{:?}", read.damage);
        match &read.records[..] {
            [
                Record {
                    item: Item::Result(r),
                    ..
                },
                Record {
                    item: Item::Charges(c),
                    ..
                },
            ] => {
                assert!(r.cost_usd.is_nan() && r.judgements[0].cost_usd.is_nan());
                assert!(c[0].cost_usd.is_nan());
            }
            _ => panic!("two records"),
        }
    }
}

#[cfg(test)]
mod records {
    use std::io::Read as _;

    use super::*;

    /// A log of `n` results, flushed, and its decompressed text.
    fn log_of(dir: &Path, n: usize) -> (PathBuf, Vec<u8>) {
        let path = dir.join("run.log");
        let mut log = ResultLog::create(path.clone(), 0).unwrap();
        for i in 0..n {
            log.append_result(&NewResult {
                test_code: format!("T{i}"),
                prompt: format!("a prompt with \"quotes\", é and a line\nbreak {i}"),
                ..Default::default()
            })
            .unwrap();
        }
        log.flush().unwrap();
        let mut text = Vec::new();
        FrameDecoder::new(File::open(&path).unwrap())
            .read_to_end(&mut text)
            .unwrap();
        (path, text)
    }

    fn write_text(path: &Path, text: &[u8]) {
        let mut z = encoder(File::create(path).unwrap()).unwrap();
        // `encoder` writes the head itself.
        z.write_all(&text[RECORDS_HEAD.len().min(text.len())..])
            .unwrap();
        // The end mark waits in the staging buffer until it is flushed.
        z.finish().unwrap().flush().unwrap();
    }

    fn codes(r: &Read) -> Vec<String> {
        r.records
            .iter()
            .map(|r| match &r.item {
                Item::Result(x) => x.test_code.clone(),
                Item::Charges(_) => "charges".into(),
            })
            .collect()
    }

    #[test]
    fn a_record_cut_anywhere_ends_the_log_after_the_whole_ones() {
        let dir = tempfile::tempdir().unwrap();
        let (path, text) = log_of(dir.path(), 3);
        assert!(text.starts_with(RECORDS_HEAD));
        let ends: Vec<usize> = {
            let (mut at, mut ends) = (RECORDS_HEAD.len(), Vec::new());
            while at < text.len() {
                at += 4 + u32::from_le_bytes(text[at..at + 4].try_into().unwrap()) as usize;
                ends.push(at);
            }
            ends
        };
        assert_eq!(ends.len(), 3);
        for cut in RECORDS_HEAD.len()..=text.len() {
            write_text(&path, &text[..cut]);
            let r = read(&path).unwrap();
            assert!(r.damage.is_none(), "cut at {cut}: {:?}", r.damage);
            let whole = ends.iter().filter(|&&e| e <= cut).count();
            assert_eq!(
                codes(&r),
                (0..whole).map(|i| format!("T{i}")).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn a_damaged_record_is_named_and_the_others_read() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut text) = log_of(dir.path(), 3);
        // The second record's bytes, not MessagePack of a record.
        let first = u32::from_le_bytes(text[RECORDS_HEAD.len()..][..4].try_into().unwrap());
        let second = RECORDS_HEAD.len() + 4 + first as usize + 4;
        text[second..second + 8].copy_from_slice(b"garbage!");
        write_text(&path, &text);
        let r = read(&path).unwrap();
        assert_eq!(r.damage.as_ref().map(|d| d.0), Some(2), "{:?}", r.damage);
        assert_eq!(codes(&r), ["T0", "T2"]);
        // A length no record has: nothing after it can be read.
        text[second - 4..second].copy_from_slice(&u32::MAX.to_le_bytes());
        write_text(&path, &text);
        let r = read(&path).unwrap();
        assert!(
            r.damage
                .as_ref()
                .is_some_and(|d| d.0 == 2 && d.1.contains("bytes"))
        );
        assert_eq!(codes(&r), ["T0"]);
    }

    /// A log an earlier version left (JSON lines in LZ4 frames) reads as
    /// it always did.
    #[test]
    fn a_log_of_json_lines_still_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.log");
        let mut z = FrameEncoder::new(File::create(&path).unwrap());
        for (seq, code) in [(1, "A"), (2, "B")] {
            let r = NewResult {
                test_code: code.into(),
                ..Default::default()
            };
            let item = ItemRef::Result(&r);
            serde_json::to_writer(&mut z, &RecordRef { seq, item }).unwrap();
            z.write_all(b"\n").unwrap();
        }
        z.write_all(b"{\"seq\": 3, \"kind\"").unwrap();
        z.finish().unwrap();
        let r = read(&path).unwrap();
        assert!(r.damage.is_none());
        assert_eq!(codes(&r), ["A", "B"]);
        assert_eq!(r.records[1].seq, 2);
    }
}
