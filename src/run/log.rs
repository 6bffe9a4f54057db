//! A run's write-ahead log of results (issue 31). The kill -9 bound of
//! issue 30 (a worker takes its next test case only once its paid reply is
//! safe) used to be kept by committing every reply to the database before
//! its worker went on: many small transactions, each rewriting the same
//! index pages (14.7 bytes written for every byte kept). Now a reply is
//! safe once it is appended to this log, one line of JSON, compressed and
//! flushed to the file with its group (a kill loses what the process holds,
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

/// [`Record`] as written, borrowing what it holds (same JSON).
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
    out: FrameEncoder<File>,
    /// The sequence number of the last record appended.
    seq: i64,
    /// Records in the current file.
    records: usize,
    /// A file moved aside for a commit not yet answered
    /// ([`ResultLog::move_aside`]).
    aside: bool,
    /// One record's JSON, reused: the compressor takes it in one write
    /// rather than serde's many small ones.
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
            out: encoder(file),
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
        serde_json::to_writer(&mut self.line, &RecordRef { seq, item })?;
        self.line.push(b'\n');
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
        self.out.flush()
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
        std::fs::rename(&self.path, aside_path(&self.path))?;
        self.aside = true;
        self.out = encoder(File::create(&self.path)?);
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
fn encoder(file: File) -> FrameEncoder<File> {
    let info = FrameInfo::new()
        .block_size(BlockSize::Max64KB)
        .block_mode(BlockMode::Linked);
    FrameEncoder::with_frame_info(info, file)
}

/// An LZ4 frame's first bytes; a log without them is the deflate stream of
/// an earlier version (read the same way, so its records are not lost).
const LZ4_MAGIC: [u8; 4] = [0x04, 0x22, 0x4d, 0x18];

/// A log's readable records, and the first unreadable one (its number and
/// why) when there is one.
struct Read {
    records: Vec<Record>,
    damage: Option<(usize, String)>,
}

/// Reads a log's records. A record cut short by the kill (no newline, or
/// compressed bytes that stop mid-block: the decoder says the stream is
/// incomplete) ends the log: every record before it was flushed whole. A
/// whole line that is not a record, or bytes the decoder calls corrupt or
/// that are not text, are damage: never skipped without a word (issue 41).
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
    Ok(Read { records, damage })
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
