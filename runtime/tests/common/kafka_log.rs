//! A partition's raw log as the broker stores it, read with a tiny Kafka-protocol client (Fetch
//! v4, `read_uncommitted`, record batches of magic 2, no compression), and the **committed
//! view** computed from it: what a `read_committed` consumer would read if the broker listed
//! aborted transactions in its fetch responses.
//!
//! Why: tansu (the CI broker) writes the transaction markers (control batches COMMIT/ABORT)
//! into the log but lists no aborted transactions in its fetch responses, so librdkafka's
//! `read_committed` consumer shows aborted records too (docs/runtime/kafka-test-broker.md).
//! librdkafka hides control batches, hence this reader. Protocol reference: Kafka's
//! `FetchRequest`/`FetchResponse` v4 and the record batch format (KIP-98), "Message Format" in
//! Kafka's documentation.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A control record's type (the key of a control batch's record): Kafka's `ControlRecordType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    Abort,
    Commit,
}

/// One record batch of a partition's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogBatch {
    pub base_offset: i64,
    /// Offset of the batch's last record (control batches: the marker's offset).
    pub last_offset: i64,
    /// -1 for a producer without idempotence or transactions.
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub transactional: bool,
    /// `Some` for a control batch (a transaction marker); it has no data records.
    pub marker: Option<Marker>,
    /// Data records: (offset, value).
    pub records: Vec<(i64, Vec<u8>)>,
}

/// What the committed view found besides the records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ViewStats {
    pub committed_transactions: usize,
    pub aborted_transactions: usize,
    /// Transactions of an epoch that a later epoch of the same producer id followed with no
    /// marker in between (a broker that fenced without writing an ABORT): counted as aborted,
    /// as Kafka's fencing aborts them.
    pub fenced_without_marker: usize,
    /// Producer ids with a transaction and no marker after it at the end of the log (open):
    /// its records are not in the view, as a `read_committed` consumer stops at the last
    /// stable offset before them.
    pub open_producers: std::collections::BTreeSet<i64>,
    /// Records of non-transactional batches (always in the view).
    pub plain_records: usize,
}

/// The values a `read_committed` consumer reads from `batches` (one partition's log, in offset
/// order), as Kafka's consumer computes it from the fetch's aborted-transactions list: records
/// of a transactional batch are kept only if the next marker of their producer id is COMMIT;
/// non-transactional records are kept. Differences from a real broker, stated so nothing more
/// is claimed: records after an open transaction are kept (a broker holds `read_committed`
/// readers at the last stable offset until the transaction ends), and the order is log order.
pub fn committed_view(batches: &[LogBatch]) -> (Vec<Vec<u8>>, ViewStats) {
    let mut out = Vec::new();
    let mut stats = ViewStats::default();
    // Open transaction per producer id: (epoch, its records).
    let mut open: BTreeMap<i64, (i16, Vec<Vec<u8>>)> = BTreeMap::new();
    for batch in batches {
        if let Some(marker) = batch.marker {
            let (_, records) = open.remove(&batch.producer_id).unwrap_or_default();
            match marker {
                Marker::Commit => {
                    stats.committed_transactions += 1;
                    out.extend(records);
                }
                Marker::Abort => stats.aborted_transactions += 1,
            }
            continue;
        }
        if !batch.transactional {
            stats.plain_records += batch.records.len();
            out.extend(batch.records.iter().map(|(_, v)| v.clone()));
            continue;
        }
        let slot = open
            .entry(batch.producer_id)
            .or_insert_with(|| (batch.producer_epoch, Vec::new()));
        if slot.0 != batch.producer_epoch {
            // A new epoch with the old one's transaction still open: fenced, so aborted.
            stats.fenced_without_marker += 1;
            *slot = (batch.producer_epoch, Vec::new());
        }
        slot.1.extend(batch.records.iter().map(|(_, v)| v.clone()));
    }
    stats.open_producers = open.into_keys().collect();
    (out, stats)
}

/// Kafka's zig-zag varint (record fields).
fn varint(bytes: &[u8], at: &mut usize) -> Result<i64, String> {
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at).ok_or("varint past the end")?;
        *at += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
        }
    }
    Err("varint longer than 10 bytes".into())
}

fn take<'b>(bytes: &'b [u8], at: &mut usize, n: usize) -> Result<&'b [u8], String> {
    let slice = bytes.get(*at..*at + n).ok_or("field past the end")?;
    *at += n;
    Ok(slice)
}

fn int<const N: usize>(bytes: &[u8], at: &mut usize) -> Result<[u8; N], String> {
    Ok(take(bytes, at, N)?.try_into().unwrap())
}

/// Parses the record batches of a fetch response's `records` field; a trailing partial batch
/// (the broker cuts at `max_bytes`) is left out. Errors: not magic 2, or compressed.
pub fn parse_batches(bytes: &[u8]) -> Result<Vec<LogBatch>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while bytes.len() - at >= 12 {
        let base_offset = i64::from_be_bytes(int(bytes, &mut at)?);
        let length = i32::from_be_bytes(int(bytes, &mut at)?) as usize;
        if bytes.len() - at < length {
            break;
        }
        let batch = &bytes[at..at + length];
        at += length;
        let mut b = 4; // partition leader epoch
        let magic = batch[b];
        b += 1 + 4; // magic, crc
        if magic != 2 {
            return Err(format!("record batch at offset {base_offset} has magic {magic}, not 2"));
        }
        let attributes = i16::from_be_bytes(int(batch, &mut b)?);
        if attributes & 0x7 != 0 {
            return Err(format!("record batch at offset {base_offset} is compressed"));
        }
        let last_offset = base_offset + i64::from(i32::from_be_bytes(int(batch, &mut b)?));
        b += 8 + 8; // base and max timestamp
        let producer_id = i64::from_be_bytes(int(batch, &mut b)?);
        let producer_epoch = i16::from_be_bytes(int(batch, &mut b)?);
        b += 4; // base sequence
        let count = i32::from_be_bytes(int(batch, &mut b)?);
        let control = attributes & 0x20 != 0;
        let mut marker = None;
        let mut records = Vec::new();
        for _ in 0..count {
            let len = varint(batch, &mut b)? as usize;
            let record = take(batch, &mut b, len)?;
            let mut r = 1; // attributes
            varint(record, &mut r)?; // timestamp delta
            let offset = base_offset + varint(record, &mut r)?;
            let key_len = varint(record, &mut r)?;
            let key = if key_len < 0 {
                &[][..]
            } else {
                take(record, &mut r, key_len as usize)?
            };
            let value_len = varint(record, &mut r)?;
            let value = if value_len < 0 {
                vec![]
            } else {
                take(record, &mut r, value_len as usize)?.to_vec()
            };
            if control {
                // Key: version (int16), type (int16): 0 ABORT, 1 COMMIT.
                marker = match key.get(2..4) {
                    Some([0, 0]) => Some(Marker::Abort),
                    Some([0, 1]) => Some(Marker::Commit),
                    _ => return Err(format!("control record at offset {offset} has an unknown key {key:?}")),
                };
            } else {
                records.push((offset, value));
            }
        }
        out.push(LogBatch {
            base_offset,
            last_offset,
            producer_id,
            producer_epoch,
            transactional: attributes & 0x10 != 0,
            marker,
            records,
        });
    }
    Ok(out)
}

/// A partition's fetch response (v4) in the parts this reader uses.
#[derive(Debug)]
pub struct FetchedPartition {
    pub error_code: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    /// The broker's list of aborted transactions: (producer id, first offset); `None` if null.
    pub aborted: Option<Vec<(i64, i64)>>,
    pub records: Vec<u8>,
}

fn string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as i16).to_be_bytes());
    out.extend(s.as_bytes());
}

/// One Fetch v4 (`read_uncommitted`) of `topic`/`partition` from `offset` on `stream`.
pub fn fetch(stream: &mut TcpStream, topic: &str, partition: i32, offset: i64) -> Result<FetchedPartition, String> {
    let mut body = Vec::new();
    body.extend(1i16.to_be_bytes()); // api key: Fetch
    body.extend(4i16.to_be_bytes()); // api version
    body.extend(7i32.to_be_bytes()); // correlation id
    string(&mut body, "weir-test-log-reader");
    body.extend((-1i32).to_be_bytes()); // replica id
    body.extend(500i32.to_be_bytes()); // max wait ms
    body.extend(0i32.to_be_bytes()); // min bytes
    body.extend((4i32 << 20).to_be_bytes()); // max bytes
    body.push(0); // isolation level: read_uncommitted
    body.extend(1i32.to_be_bytes());
    string(&mut body, topic);
    body.extend(1i32.to_be_bytes());
    body.extend(partition.to_be_bytes());
    body.extend(offset.to_be_bytes());
    body.extend((4i32 << 20).to_be_bytes()); // partition max bytes
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend(body);
    stream.write_all(&frame).map_err(|e| e.to_string())?;
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).map_err(|e| e.to_string())?;
    let mut response = vec![0u8; i32::from_be_bytes(len) as usize];
    stream.read_exact(&mut response).map_err(|e| e.to_string())?;
    let r = &response;
    let mut at = 4 + 4 + 4; // correlation id, throttle time, topic count
    let name_len = i16::from_be_bytes(int(r, &mut at)?) as usize;
    at += name_len + 4; // topic name, partition count
    at += 4; // partition index
    let error_code = i16::from_be_bytes(int(r, &mut at)?);
    let high_watermark = i64::from_be_bytes(int(r, &mut at)?);
    let last_stable_offset = i64::from_be_bytes(int(r, &mut at)?);
    let n_aborted = i32::from_be_bytes(int(r, &mut at)?);
    let aborted = (n_aborted >= 0)
        .then(|| {
            (0..n_aborted)
                .map(|_| {
                    Ok((
                        i64::from_be_bytes(int(r, &mut at)?),
                        i64::from_be_bytes(int(r, &mut at)?),
                    ))
                })
                .collect::<Result<Vec<_>, String>>()
        })
        .transpose()?;
    let records_len = i32::from_be_bytes(int(r, &mut at)?);
    let records = if records_len < 0 {
        vec![]
    } else {
        take(r, &mut at, records_len as usize)?.to_vec()
    };
    Ok(FetchedPartition {
        error_code,
        high_watermark,
        last_stable_offset,
        aborted,
        records,
    })
}

/// What reading a partition's whole log found.
#[derive(Debug, Default)]
pub struct PartitionLog {
    pub batches: Vec<LogBatch>,
    /// Every aborted-transactions entry the broker listed while reading.
    pub listed_aborted: usize,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
}

/// How long [`read_partition_log`] retries fetches that bring nothing new below the high
/// watermark before it gives up (a range whose batch the broker never stored: tansu takes a
/// batch's offsets before it stores the batch, and a produce cut off by a killed client can
/// leave that range empty).
const NO_PROGRESS_LIMIT: Duration = Duration::from_secs(10);

/// Every batch of `topic`/`partition` from offset 0 to the high watermark, from the broker at
/// `servers` (one `host:port`, the leader of every partition: a single-broker test cluster).
/// A fetch that brings nothing new does not end the read (tansu cuts a fetch short at its
/// max wait, also before the first batch: an empty answer below the high watermark); only
/// reaching the high watermark does, or [`NO_PROGRESS_LIMIT`] without progress.
pub fn read_partition_log(servers: &str, topic: &str, partition: i32) -> PartitionLog {
    let mut stream = TcpStream::connect(servers).unwrap_or_else(|e| panic!("connecting to {servers}: {e}"));
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut log = PartitionLog::default();
    let mut offset = 0;
    let mut last_progress = std::time::Instant::now();
    loop {
        let f =
            fetch(&mut stream, topic, partition, offset).unwrap_or_else(|e| panic!("fetch {topic}/{partition}: {e}"));
        assert_eq!(f.error_code, 0, "fetch {topic}/{partition} at {offset}: error code");
        log.listed_aborted += f.aborted.as_ref().map_or(0, Vec::len);
        log.high_watermark = f.high_watermark;
        log.last_stable_offset = f.last_stable_offset;
        let batches = parse_batches(&f.records).unwrap_or_else(|e| panic!("{topic}/{partition}: {e}"));
        for batch in batches {
            // A batch that starts before `offset` was read already (a fetch returns the whole
            // batch holding the offset asked for).
            if batch.base_offset >= offset {
                offset = batch.last_offset + 1;
                log.batches.push(batch);
                last_progress = std::time::Instant::now();
            }
        }
        if offset >= f.high_watermark || last_progress.elapsed() > NO_PROGRESS_LIMIT {
            return log;
        }
    }
}

/// The committed view ([`committed_view`]) of every partition of `topic`, values as text,
/// sorted, with the stats summed over the partitions and the number of aborted transactions
/// the broker listed in its fetch responses.
pub fn committed_topic_view(servers: &str, topic: &str) -> (Vec<String>, ViewStats, usize) {
    use rdkafka::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", servers).create().unwrap();
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(30)).unwrap();
    let (mut values, mut total, mut listed) = (Vec::new(), ViewStats::default(), 0);
    for p in metadata.topics()[0].partitions() {
        let log = read_partition_log(servers, topic, p.id());
        listed += log.listed_aborted;
        let (v, s) = committed_view(&log.batches);
        values.extend(v.into_iter().map(|v| String::from_utf8(v).unwrap()));
        total.committed_transactions += s.committed_transactions;
        total.aborted_transactions += s.aborted_transactions;
        total.fenced_without_marker += s.fenced_without_marker;
        total.open_producers.extend(s.open_producers);
        total.plain_records += s.plain_records;
    }
    values.sort();
    (values, total, listed)
}

/// Where `values` are in the raw log of `topic` (every partition, [`read_partition_log`]), for
/// a failure message that tells a record the broker never stored from one a reader missed:
/// `"<value>" at <partition>/<offset>` or `"<value>" not in the log`, then the number of
/// records in the log.
pub fn locate_in_log(servers: &str, topic: &str, values: &[&String]) -> String {
    use rdkafka::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", servers).create().unwrap();
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(30)).unwrap();
    let mut found: BTreeMap<&str, (i32, i64)> = BTreeMap::new();
    let mut total = 0;
    for p in metadata.topics()[0].partitions() {
        for batch in read_partition_log(servers, topic, p.id()).batches {
            total += batch.records.len();
            for (offset, value) in &batch.records {
                if let Some(v) = values.iter().find(|v| v.as_bytes() == value.as_slice()) {
                    found.entry(v.as_str()).or_insert((p.id(), *offset));
                }
            }
        }
    }
    let mut parts: Vec<String> = values
        .iter()
        .map(|v| match found.get(v.as_str()) {
            Some((p, o)) => format!("{v} at {p}/{o}"),
            None => format!("{v} not in the log"),
        })
        .collect();
    parts.push(format!("{total} records in the log"));
    parts.join("; ")
}
