//! The file source: text lines, JSON lines or CSV (header row), gzip by `.gz`, from local
//! paths or `s3://bucket/prefix`, with a glob in the last path component. Bounded and
//! replayable: a split is one file and its state is the byte offset (of the decompressed
//! stream for `.gz`) of the next line.
//!
//! Local plain files are streamed; S3 objects and gzip files are read from the recorded
//! offset into memory (the object is fetched with a ranged GET).

use super::Source;
use crate::job::{FileFormat, FileSourceSpec};
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
        let local = pattern.strip_prefix("file://").unwrap_or(pattern);
        let paths = glob::glob(local).map_err(|e| TaskError(format!("bad glob `{pattern}`: {e}")))?;
        let mut v = Vec::new();
        for p in paths {
            let p = p.map_err(|e| TaskError(format!("cannot read {}: {}", e.path().display(), e.error())))?;
            if p.is_file() {
                v.push(p.to_string_lossy().into_owned());
            }
        }
        v
    };
    files.sort();
    if files.is_empty() {
        return Err(TaskError(format!("no file matches `{pattern}`")));
    }
    Ok(files)
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
    rate: Option<u64>,
    s3: S3Options,
    splits: Vec<FileSplit>,
    current: Option<(usize, OpenSplit)>,
    line: Vec<u8>,
    progress: Arc<AtomicU64>,
    schemas: SchemaCache,
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
            .collect();
        Ok(FileSource {
            format: spec.format,
            rate: spec.max_records_per_second,
            s3: s3.clone(),
            splits,
            current: None,
            line: Vec::with_capacity(256),
            progress,
            schemas: SchemaCache::default(),
        })
    }
}

/// Opens a split at its recorded offset.
async fn open_split(format: FileFormat, s3: &S3Options, split: &FileSplit) -> TaskResult<OpenSplit> {
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
                return Err(TaskError(format!(
                    "{}: shorter ({skipped} bytes) than the restored offset {}",
                    split.path, split.offset
                )));
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
            Some(CsvHeader::new(csv_fields(&split.path, 0, trim_eol(&line))?))
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
/// Errors name the file and byte offset.
fn parse(
    format: FileFormat,
    path: &str,
    offset: u64,
    line: &[u8],
    header: Option<&CsvHeader>,
    schemas: &mut SchemaCache,
) -> TaskResult<Option<Row>> {
    let text =
        std::str::from_utf8(line).map_err(|e| TaskError(format!("{path} at byte {offset}: invalid UTF-8: {e}")))?;
    Ok(match format {
        FileFormat::Text => Some(Row::new_unchecked(text_schema(), vec![Datum::Str(text.into())])),
        FileFormat::Jsonl if text.trim().is_empty() => None,
        FileFormat::Jsonl => Some(
            parse_json_row(text, schemas)
                .map_err(|e| TaskError(format!("{path} at byte {offset}: invalid JSON line: {e}")))?,
        ),
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
            let values = fields.into_iter().map(|f| Datum::Str(f.into()));
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

/// A CSV file's header: the schema of its rows.
struct CsvHeader {
    schema: Arc<Schema>,
    /// Whether a column name repeats (rows are then built field by field).
    repeats_a_name: bool,
}

impl CsvHeader {
    fn new(names: Vec<String>) -> CsvHeader {
        let repeats_a_name = names.iter().enumerate().any(|(i, n)| names[..i].contains(n));
        CsvHeader {
            schema: Schema::new(names),
            repeats_a_name,
        }
    }
}

fn decode(gz: bool, r: Box<dyn Read + Send>) -> Box<dyn BufRead + Send> {
    if gz {
        Box::new(BufReader::with_capacity(1 << 16, flate2::read::MultiGzDecoder::new(r)))
    } else {
        Box::new(BufReader::with_capacity(1 << 16, r))
    }
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
                let opened = open_split(self.format, &self.s3, &self.splits[i]).await?;
                self.splits[i].offset += opened.consumed;
                self.current = Some((i, opened));
            }
            let (i, open) = self.current.as_mut().expect("opened above");
            let split = &mut self.splits[*i];
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
                let line = trim_eol(&self.line);
                if let Some(v) = parse(
                    self.format,
                    &split.path,
                    at,
                    line,
                    open.header.as_ref(),
                    &mut self.schemas,
                )? {
                    out.push(Record::new(v));
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
        Ok(EncodedState {
            state_names: vec!["operator:splits".into()],
            key_group_range: None,
            key_groups: vec![],
            operator_state: self.splits.iter().map(postcard::to_stdvec).collect::<Result<_, _>>()?,
        })
    }

    fn max_records_per_second(&self) -> Option<u64> {
        self.rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csv_json(header: &[&str], line: &str) -> String {
        let header = CsvHeader::new(header.iter().map(|s| s.to_string()).collect());
        let row = parse(
            FileFormat::Csv,
            "f.csv",
            0,
            line.as_bytes(),
            Some(&header),
            &mut SchemaCache::default(),
        )
        .unwrap()
        .unwrap();
        serde_json::to_string(&row).unwrap()
    }

    #[test]
    fn csv_rows_follow_the_header_and_a_repeated_name_keeps_its_last_value() {
        assert_eq!(csv_json(&["a", "b"], "1,\"x, y\""), r#"{"a":"1","b":"x, y"}"#);
        assert_eq!(csv_json(&["a", "b", "a"], "1,2,3"), r#"{"a":"3","b":"2"}"#);
        let text = parse(
            FileFormat::Text,
            "f",
            0,
            "é \"q\"".as_bytes(),
            None,
            &mut SchemaCache::default(),
        );
        assert_eq!(
            serde_json::to_string(&text.unwrap().unwrap()).unwrap(),
            r#"{"line":"é \"q\""}"#
        );
    }
}
