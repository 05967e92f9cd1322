//! The file source: text lines, JSON lines or CSV (header row), gzip by `.gz`, from local
//! paths or `s3://bucket/prefix`, with a glob in the last path component. Bounded and
//! replayable: a split is one file and its state is the byte offset (of the decompressed
//! stream for `.gz`) of the next line.
//!
//! Local plain files are streamed; S3 objects and gzip files are read from the recorded
//! offset into memory (the object is fetched with a ranged GET).

use super::Source;
use crate::job::schema::{JSON_SAMPLE_LINES, SourceSample};
use crate::job::{DeclaredType, FileFormat, FileSourceSpec, SchemaField};
use crate::operators::{EncodedState, OperatorRestore, TaskError, TaskResult};
use crate::record::json::parse_json_row;
use crate::record::{Datum, Record, Row, RowBuilder, Schema, SchemaCache};
use crate::storage::{self, S3Options, Store};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Position of one file split.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileSplit {
    /// Position in the sorted file list (assignment: index mod parallelism).
    pub index: u32,
    /// The file (local path or `s3://` URL).
    pub path: String,
    /// Byte offset of the next line.
    pub offset: u64,
    /// Whether the file was read to the end.
    pub done: bool,
}

/// Lists the files a source path names, sorted. Errors if nothing matches.
pub async fn list_files(pattern: &str, s3: &S3Options) -> TaskResult<Vec<String>> {
    let mut files = if let Some(rest) = pattern.strip_prefix("s3://") {
        let (bucket, key_pattern) = rest.split_once('/').unwrap_or((rest, ""));
        let store = storage::open(&format!("s3://{bucket}"), s3).await?;
        let literal_prefix: String = key_pattern.chars().take_while(|c| !"*?[".contains(*c)).collect();
        let matcher = glob::Pattern::new(key_pattern).map_err(|e| TaskError(format!("bad glob `{pattern}`: {e}")))?;
        store
            .list(&literal_prefix)
            .await?
            .into_iter()
            .filter(|o| matcher.matches(&o.path) || o.path == key_pattern)
            .map(|o| format!("s3://{bucket}/{}", o.path))
            .collect::<Vec<_>>()
    } else {
        list_local_files(pattern)?
    };
    files.sort();
    if files.is_empty() {
        if let Some(hint) = directory_hint(pattern) {
            return Err(TaskError(hint));
        }
        let local = crate::storage::local_path(pattern).ok().flatten().unwrap_or(pattern);
        if !pattern.starts_with("s3://") && !local.contains(['*', '?', '[']) {
            // A file that exists in a directory this user cannot search: glob finds nothing.
            if let Err(e) = std::fs::metadata(local).map_err(|e| (e.kind(), e))
                && e.0 != std::io::ErrorKind::NotFound
            {
                return Err(TaskError(format!("cannot read `{pattern}`: {}", e.1)));
            }
        }
        let relative = !pattern.starts_with('/') && !pattern.contains("://");
        let hint = match std::env::current_dir() {
            Ok(cwd) if relative => format!(
                " (a relative path is read from the current directory, {}; the examples expect the \
                 repository root, next to `shared/`)",
                cwd.display()
            ),
            _ => String::new(),
        };
        return Err(TaskError(format!("no file matches `{pattern}`{hint}")));
    }
    Ok(files)
}

/// The message for a source path that matched no file but names a directory (a local one, or
/// an S3 prefix without a glob, which Flink's `FileSource` would read whole): the file source
/// reads the files a path or glob names, so say which glob reads the directory's files.
fn directory_hint(pattern: &str) -> Option<String> {
    let is_s3 = pattern.starts_with("s3://");
    let local = crate::storage::local_path(pattern).ok().flatten().unwrap_or(pattern);
    let is_dir = if is_s3 {
        !pattern.contains(['*', '?', '['])
    } else {
        std::path::Path::new(local).is_dir()
    };
    is_dir.then(|| {
        let glob = format!("{}/*", pattern.trim_end_matches('/'));
        let what = if is_s3 {
            "no object; if it is a prefix (a directory)"
        } else {
            "a directory"
        };
        format!(
            "`{pattern}` names {what}: the file source reads the files a path or glob names, not a directory's \
             contents; give a glob of its files, like `{glob}`"
        )
    })
}

/// The local files a source path (`dir/*.csv`, `file:///abs/x.jsonl`) names, sorted; empty if
/// none matches. Errors: a bad glob, an unreadable directory.
pub fn list_local_files(pattern: &str) -> TaskResult<Vec<String>> {
    let local = crate::storage::local_path(pattern)
        .map_err(|e| TaskError(e.to_string()))?
        .unwrap_or(pattern);
    let paths = glob::glob(local).map_err(|e| TaskError(format!("bad glob `{pattern}`: {e}")))?;
    let mut files = Vec::new();
    for p in paths {
        let p = p.map_err(|e| TaskError(format!("cannot read {}: {}", e.path().display(), e.error())))?;
        if p.is_file() {
            files.push(p.to_string_lossy().into_owned());
        }
    }
    files.sort();
    Ok(files)
}

/// Reads what the plan needs from the first file a local CSV or JSON lines source names: the
/// CSV header, or the first [`JSON_SAMPLE_LINES`] non-blank JSON lines parsed as the source
/// parses them (up to the first that does not parse). `None` — the schema is then unknown and
/// the job finds out when it runs — for text and `s3://` sources, and when no file matches yet
/// or the first one cannot be read.
pub fn sample(spec: &FileSourceSpec) -> Option<SourceSample> {
    if spec.format == FileFormat::Text || spec.path.starts_with("s3://") {
        return None;
    }
    let file = list_local_files(&spec.path).ok()?.into_iter().next()?;
    let mut reader = decode(file.ends_with(".gz"), Box::new(std::fs::File::open(&file).ok()?));
    let mut line = Vec::new();
    if spec.format == FileFormat::Csv {
        reader.read_until(b'\n', &mut line).ok()?;
        let columns = csv_fields(&file, 0, trim_eol(&line)).ok()?;
        return Some(SourceSample::CsvHeader { file, columns });
    }
    let mut rows = Vec::new();
    let mut schemas = SchemaCache::default();
    while rows.len() < JSON_SAMPLE_LINES {
        line.clear();
        if reader.read_until(b'\n', &mut line).ok()? == 0 {
            break;
        }
        let first = rows.is_empty();
        let Ok(text) = std::str::from_utf8(if first {
            strip_bom(trim_eol(&line))
        } else {
            trim_eol(&line)
        }) else {
            break;
        };
        if text.trim().is_empty() {
            continue;
        }
        match parse_json_row(text, &mut schemas) {
            Ok(row) => rows.push(row),
            Err(_) => break,
        }
    }
    Some(SourceSample::JsonRows { file, rows })
}

struct OpenSplit {
    reader: Box<dyn BufRead + Send>,
    /// The CSV header.
    header: Option<CsvHeader>,
    /// Bytes the open consumed from the split's position (a CSV header at offset 0).
    consumed: u64,
}

/// A file source subtask.
pub struct FileSource {
    format: FileFormat,
    /// The source's declared `schema` (empty if none).
    declared: Arc<[SchemaField]>,
    rate: Option<u64>,
    s3: S3Options,
    splits: Vec<FileSplit>,
    current: Option<(usize, OpenSplit)>,
    line: Vec<u8>,
    progress: Arc<AtomicU64>,
    schemas: SchemaCache,
    /// Size in bytes of each split's file when it is a local uncompressed file (offsets count
    /// the bytes of the file itself); `None` for compressed and S3 files.
    sizes: Vec<Option<u64>>,
    /// The last batch's split and the byte offset of each of its records
    /// ([`Source::record_origin`]).
    batch_origin: (usize, Vec<u64>),
}

/// Bytes not yet read from `splits` whose file sizes are `sizes` (same order): the sum over
/// splits not done of size − offset. `None` when a split not done has no known size.
pub fn pending_bytes(splits: &[FileSplit], sizes: &[Option<u64>]) -> Option<u64> {
    splits
        .iter()
        .zip(sizes)
        .filter(|(split, _)| !split.done)
        .map(|(split, size)| size.map(|size| size.saturating_sub(split.offset)))
        .sum()
}

/// The size of a local uncompressed file (`None` for `.gz`, `s3://` or an unreadable file).
fn plain_local_size(path: &str) -> Option<u64> {
    if path.starts_with("s3://") || path.ends_with(".gz") {
        return None;
    }
    std::fs::metadata(path).ok().map(|m| m.len())
}

impl FileSource {
    /// Creates subtask `subtask` of `parallelism`. Splits come from the current file listing
    /// (sorted; split index = position); restored offsets are applied by path.
    pub async fn new(
        spec: &FileSourceSpec,
        subtask: u32,
        parallelism: u32,
        restore: OperatorRestore,
        s3: &S3Options,
        progress: Arc<AtomicU64>,
    ) -> TaskResult<FileSource> {
        let files = list_files(&spec.path, s3).await?;
        let mut restored = std::collections::HashMap::new();
        for item in &restore.operator_state {
            let s: FileSplit =
                postcard::from_bytes(item).map_err(|e| TaskError(format!("file split state does not decode: {e}")))?;
            restored.insert(s.path.clone(), s);
        }
        // Every subtask gets every restored split (pooled for rescaling): subtask 0 reports.
        if subtask == 0 {
            for split in unlisted_restored_splits(restored.values(), &files) {
                tracing::warn!(
                    target: "weir",
                    "file source `{}`: the restore point's split {} (read to byte {}) is not among the files the \
                     path matches now, so the rest of it is not read; restore the file, or accept that its \
                     unread lines are skipped",
                    spec.path,
                    split.path,
                    split.offset
                );
            }
        }
        let splits = files
            .into_iter()
            .enumerate()
            .filter(|(i, _)| *i as u32 % parallelism == subtask)
            .map(|(i, path)| match restored.get(&path) {
                Some(r) => FileSplit {
                    index: i as u32,
                    ..r.clone()
                },
                None => FileSplit {
                    index: i as u32,
                    path,
                    offset: 0,
                    done: false,
                },
            })
            .collect::<Vec<FileSplit>>();
        let sizes = splits.iter().map(|s| plain_local_size(&s.path)).collect();
        Ok(FileSource {
            format: spec.format,
            declared: spec.schema.clone().unwrap_or_default().into(),
            rate: spec.max_records_per_second,
            s3: s3.clone(),
            splits,
            current: None,
            line: Vec::with_capacity(256),
            progress,
            schemas: SchemaCache::default(),
            sizes,
            batch_origin: (0, Vec::new()),
        })
    }
}

/// A restored split whose file is now shorter (`size` bytes, decompressed) than the offset the
/// restore point recorded: the file changed since the snapshot (found by trial: a truncated
/// file's rest was skipped without a word).
fn shorter_than_restored(split: &FileSplit, size: u64) -> TaskError {
    TaskError(format!(
        "{}: shorter ({size} bytes) than the offset {} the restore point recorded as read: the \
         file was truncated or replaced since the snapshot; put the file back as it was, or \
         restore another snapshot, or start without --restore",
        split.path, split.offset
    ))
}

/// Restored splits that are not done and whose file the source's `path` no longer matches
/// (`listed`: the current listing): their unread rest will not be read. Pure.
pub fn unlisted_restored_splits<'a>(
    restored: impl Iterator<Item = &'a FileSplit>,
    listed: &[String],
) -> Vec<&'a FileSplit> {
    let mut unlisted: Vec<&FileSplit> = restored.filter(|s| !s.done && !listed.contains(&s.path)).collect();
    unlisted.sort_by(|a, b| a.path.cmp(&b.path));
    unlisted
}

/// Opens a split at its recorded offset.
async fn open_split(
    format: FileFormat,
    declared: &[SchemaField],
    s3: &S3Options,
    split: &FileSplit,
) -> TaskResult<OpenSplit> {
    {
        let gz = split.path.ends_with(".gz");
        let (mut reader, header_reader): (Box<dyn BufRead + Send>, Option<Box<dyn BufRead + Send>>) =
            if let Some(rest) = split.path.strip_prefix("s3://") {
                let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
                let store: Store = storage::open(&format!("s3://{bucket}"), s3).await?;
                let need_header = format == FileFormat::Csv;
                if gz || (need_header && split.offset > 0) {
                    let all = store.get(key).await?;
                    let hdr: Option<Box<dyn BufRead + Send>> =
                        need_header.then(|| decode(gz, Box::new(std::io::Cursor::new(all.clone()))));
                    (decode(gz, Box::new(std::io::Cursor::new(all))), hdr)
                } else {
                    (
                        Box::new(std::io::Cursor::new(store.get_from(key, split.offset).await?)),
                        None,
                    )
                }
            } else {
                let open = || std::fs::File::open(&split.path).map_err(|e| TaskError(format!("{}: {e}", split.path)));
                let mut f = open()?;
                let hdr: Option<Box<dyn BufRead + Send>> = if format == FileFormat::Csv && split.offset > 0 {
                    Some(decode(gz, Box::new(open()?)))
                } else {
                    None
                };
                if !gz && split.offset > 0 {
                    use std::io::Seek;
                    // A seek past the end reads nothing: the rest would be skipped unsaid.
                    let size = f
                        .metadata()
                        .map_err(|e| TaskError(format!("{}: {e}", split.path)))?
                        .len();
                    if size < split.offset {
                        return Err(shorter_than_restored(split, size));
                    }
                    f.seek(std::io::SeekFrom::Start(split.offset))
                        .map_err(|e| TaskError(format!("{}: {e}", split.path)))?;
                }
                (decode(gz, Box::new(f)), hdr)
            };
        let s3_plain = split.path.starts_with("s3://") && !gz && !(format == FileFormat::Csv && split.offset > 0);
        let local_plain = !split.path.starts_with("s3://") && !gz;
        if !(s3_plain || local_plain) && split.offset > 0 {
            // Skip to the offset in the decompressed (or whole) stream.
            let skipped = std::io::copy(&mut (&mut reader).take(split.offset), &mut std::io::sink())
                .map_err(|e| TaskError(format!("{}: {e}", split.path)))?;
            if skipped != split.offset {
                return Err(shorter_than_restored(split, skipped));
            }
        }
        let mut consumed = 0u64;
        let header = if format == FileFormat::Csv {
            let mut line = Vec::new();
            let read = match header_reader {
                Some(mut hr) => hr.read_until(b'\n', &mut line),
                None => reader.read_until(b'\n', &mut line).inspect(|&n| consumed = n as u64),
            };
            read.map_err(|e| TaskError(format!("{}: {e}", split.path)))?;
            Some(CsvHeader::new(
                csv_fields(&split.path, 0, strip_bom(trim_eol(&line)))?,
                declared,
            ))
        } else {
            None
        };
        Ok(OpenSplit {
            reader,
            header,
            consumed,
        })
    }
}

/// The schema of text lines: one field, `line`.
pub fn text_schema() -> Arc<Schema> {
    static SCHEMA: std::sync::OnceLock<Arc<Schema>> = std::sync::OnceLock::new();
    SCHEMA.get_or_init(|| Schema::new(["line"])).clone()
}

/// Parses one line (without its line ending) into a row; `None` for blank lines of JSON/CSV.
/// A JSON line's fields are checked against the `declared` schema (an empty one checks
/// nothing); CSV values are converted to their column's declared type. Errors name the file
/// and byte offset (and the field, for a value of the wrong type).
fn parse(
    format: FileFormat,
    path: &str,
    offset: u64,
    line: &[u8],
    header: Option<&CsvHeader>,
    declared: &[SchemaField],
    schemas: &mut SchemaCache,
) -> TaskResult<Option<Row>> {
    let text =
        std::str::from_utf8(line).map_err(|e| TaskError(format!("{path} at byte {offset}: invalid UTF-8: {e}")))?;
    Ok(match format {
        FileFormat::Text => Some(Row::new_unchecked(text_schema(), vec![Datum::Str(text.into())])),
        FileFormat::Jsonl if text.trim().is_empty() => None,
        FileFormat::Jsonl => {
            let row = parse_json_row(text, schemas)
                .map_err(|e| TaskError(format!("{path} at byte {offset}: invalid JSON line: {e}")))?;
            for d in declared {
                if let Some(value) = row.get(&d.name)
                    && !declared_admits(d.field_type, value)
                {
                    return Err(TaskError(format!(
                        "{path} at byte {offset}: field `{}` is {value}, and the source's schema declares it {}",
                        d.name,
                        declared_name(d.field_type)
                    )));
                }
            }
            Some(row)
        }
        FileFormat::Csv if text.is_empty() => None,
        FileFormat::Csv => {
            let header = header.expect("csv header read at open");
            let fields = csv_fields(path, offset, text.as_bytes())?;
            let names = header.schema.names();
            if fields.len() != names.len() {
                return Err(TaskError(format!(
                    "{path} at byte {offset}: {} fields, the header has {}",
                    fields.len(),
                    names.len()
                )));
            }
            let values = fields
                .into_iter()
                .zip(&header.types)
                .zip(names)
                .map(|((f, t), name)| {
                    convert_csv(f, *t, name).map_err(|m| TaskError(format!("{path} at byte {offset}: {m}")))
                })
                .collect::<TaskResult<Vec<Datum>>>()?
                .into_iter();
            if header.repeats_a_name {
                // A repeated column name keeps its first position and its last value, as
                // when rows were JSON objects.
                let mut b = RowBuilder::with_capacity(names.len());
                for (name, value) in names.iter().zip(values) {
                    b.push(name.clone(), value);
                }
                Some(b.finish(schemas))
            } else {
                Some(Row::new_unchecked(header.schema.clone(), values.collect()))
            }
        }
    })
}

/// A CSV file's header: the schema of its rows and each column's type.
struct CsvHeader {
    schema: Arc<Schema>,
    /// The declared type of each column, by position (`string` where none is declared).
    types: Vec<DeclaredType>,
    /// Whether a column name repeats (rows are then built field by field).
    repeats_a_name: bool,
}

impl CsvHeader {
    fn new(names: Vec<String>, declared: &[SchemaField]) -> CsvHeader {
        let repeats_a_name = names.iter().enumerate().any(|(i, n)| names[..i].contains(n));
        let types = names
            .iter()
            .map(|n| {
                declared
                    .iter()
                    .find(|d| d.name == *n)
                    .map_or(DeclaredType::String, |d| d.field_type)
            })
            .collect();
        CsvHeader {
            schema: Schema::new(names),
            types,
            repeats_a_name,
        }
    }
}

/// The name of a declared type, as the source's `schema` spells it.
fn declared_name(t: DeclaredType) -> &'static str {
    crate::job::types::FieldType::declared(t).name()
}

/// Whether a JSON value may stand in a field declared `t`: null always; an integer where a
/// float is declared.
fn declared_admits(t: DeclaredType, value: &Datum) -> bool {
    matches!(
        (t, value),
        (_, Datum::Null)
            | (DeclaredType::String, Datum::Str(_))
            | (DeclaredType::Int, Datum::Int(_) | Datum::UInt(_))
            | (DeclaredType::Float, Datum::Int(_) | Datum::UInt(_) | Datum::Float(_))
            | (DeclaredType::Bool, Datum::Bool(_))
    )
}

/// Converts a CSV value to its column's declared type: an empty value of a non-string column
/// is null; numbers as Rust parses them (`1`, `-2`, `1.5e3`); booleans `true` / `false`.
/// Errors: a message naming the column and the value.
fn convert_csv(value: String, t: DeclaredType, column: &str) -> Result<Datum, String> {
    if t == DeclaredType::String {
        return Ok(Datum::Str(value.into()));
    }
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Ok(Datum::Null);
    }
    let converted = match t {
        DeclaredType::Int => trimmed.parse::<i64>().ok().map(Datum::Int),
        DeclaredType::Float => trimmed.parse::<f64>().ok().filter(|f| f.is_finite()).map(Datum::Float),
        DeclaredType::Bool => trimmed.parse::<bool>().ok().map(Datum::Bool),
        DeclaredType::String => None,
    };
    converted.ok_or_else(|| {
        format!(
            "column `{column}` is `{value}`, not {} {} as the source's schema declares (fix the value or the column's `type`)",
            if t == DeclaredType::Int { "an" } else { "a" },
            declared_name(t)
        )
    })
}

fn decode(gz: bool, r: Box<dyn Read + Send>) -> Box<dyn BufRead + Send> {
    if gz {
        Box::new(BufReader::with_capacity(1 << 16, flate2::read::MultiGzDecoder::new(r)))
    } else {
        Box::new(BufReader::with_capacity(1 << 16, r))
    }
}

/// `line` without a leading UTF-8 byte order mark (`EF BB BF`), which Windows tools write at
/// the start of text and JSON files: it is not part of the first line's content (a JSON line's
/// opening brace). (The csv crate drops it from a CSV header itself.)
fn strip_bom(line: &[u8]) -> &[u8] {
    line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line)
}

fn trim_eol(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn csv_fields(path: &str, offset: u64, line: &[u8]) -> TaskResult<Vec<String>> {
    let mut rdr = csv::ReaderBuilder::new().has_headers(false).from_reader(line);
    match rdr.records().next() {
        Some(Ok(rec)) => Ok(rec.iter().map(str::to_string).collect()),
        Some(Err(e)) => Err(TaskError(format!("{path} at byte {offset}: invalid CSV: {e}"))),
        None => Ok(vec![]),
    }
}

#[async_trait]
impl Source for FileSource {
    async fn next_batch(&mut self, out: &mut Vec<Record>, max: usize) -> TaskResult<bool> {
        loop {
            if self.current.is_none() {
                let Some(i) = self.splits.iter().position(|s| !s.done) else {
                    return Ok(false);
                };
                let opened = open_split(self.format, &self.declared, &self.s3, &self.splits[i]).await?;
                self.splits[i].offset += opened.consumed;
                self.current = Some((i, opened));
            }
            let (i, open) = self.current.as_mut().expect("opened above");
            let split = &mut self.splits[*i];
            self.batch_origin.0 = *i;
            self.batch_origin.1.clear();
            let mut produced = 0;
            while produced < max {
                self.line.clear();
                let n = open
                    .reader
                    .read_until(b'\n', &mut self.line)
                    .map_err(|e| TaskError(format!("{}: {e}", split.path)))?;
                if n == 0 {
                    split.done = true;
                    break;
                }
                let at = split.offset;
                split.offset += n as u64;
                self.progress.fetch_add(n as u64, Ordering::Relaxed);
                let line = if at == 0 {
                    strip_bom(trim_eol(&self.line))
                } else {
                    trim_eol(&self.line)
                };
                if let Some(v) = parse(
                    self.format,
                    &split.path,
                    at,
                    line,
                    open.header.as_ref(),
                    &self.declared,
                    &mut self.schemas,
                )? {
                    out.push(Record::new(v));
                    self.batch_origin.1.push(at);
                    produced += 1;
                }
            }
            if split.done {
                self.current = None;
            }
            if produced > 0 {
                return Ok(true);
            }
        }
    }

    fn snapshot(&self) -> TaskResult<EncodedState> {
        Ok(EncodedState::operator_only(
            "operator:splits",
            self.splits.iter().map(postcard::to_stdvec).collect::<Result<_, _>>()?,
        ))
    }

    fn max_records_per_second(&self) -> Option<u64> {
        self.rate
    }

    fn pending(&self) -> Option<super::SourcePending> {
        pending_bytes(&self.splits, &self.sizes).map(super::SourcePending::Bytes)
    }

    fn record_origin(&self, index: usize) -> Option<String> {
        let (split, offsets) = &self.batch_origin;
        let offset = offsets.get(index)?;
        Some(format!(
            "the record at byte offset {offset} of {}",
            self.splits.get(*split)?.path
        ))
    }
}

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
