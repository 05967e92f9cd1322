//! Input data both sides read: the word-count text (the bundled books, cleaned and repeated)
//! and Nexmark-style bids as JSON lines, written deterministically under `target/bench-data/`
//! and reused by later runs of the same size.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// SplitMix64 (Steele, Lea, Flood 2014): the bench's own copy, so that the data does not
/// depend on the runtime's code.
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A small deterministic random stream (SplitMix64 increments) for one generated event.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        splitmix64(self.0)
    }
    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn letters(&mut self, len: u64, out: &mut String) {
        for _ in 0..len {
            out.push((b'a' + self.below(26) as u8) as char);
        }
    }
}

/// Writes `path` through a temporary file renamed into place, so an interrupted bench never
/// leaves a partial file that a later run would reuse.
fn write_atomically(path: &Path, fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp)?);
        fill(&mut out)?;
        out.flush()?;
    }
    std::fs::rename(&tmp, path)
}

/// A line of the books reduced to ASCII letters, digits and single spaces (so that both
/// sides split it the same way on `' '`, and Flink's CSV reader sees one plain column).
pub fn clean_line(line: &str) -> String {
    let mapped: String = line
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { ' ' })
        .collect();
    mapped.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The word-count input: every `*.txt` under `text_dir` (sorted), cleaned by [`clean_line`],
/// empty lines dropped, repeated until at least `min_words` words. Returns the file and its
/// exact number of words.
pub fn words_file(text_dir: &Path, out_dir: &Path, min_words: u64) -> std::io::Result<(PathBuf, u64)> {
    let mut books: Vec<PathBuf> = std::fs::read_dir(text_dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    books.sort();
    let mut lines = Vec::new();
    for book in &books {
        let text = std::fs::read_to_string(book)?;
        lines.extend(text.lines().map(clean_line).filter(|l| !l.is_empty()));
    }
    let per_copy: u64 = lines.iter().map(|l| l.split(' ').count() as u64).sum();
    if per_copy == 0 {
        return Err(std::io::Error::other(format!(
            "no words in {}/*.txt",
            text_dir.display()
        )));
    }
    let copies = min_words.div_ceil(per_copy);
    let path = out_dir.join(format!("words-{copies}x.txt"));
    if !path.exists() {
        write_atomically(&path, |out| {
            for _ in 0..copies {
                for line in &lines {
                    out.write_all(line.as_bytes())?;
                    out.write_all(b"\n")?;
                }
            }
            Ok(())
        })?;
    }
    Ok((path, copies * per_copy))
}

// Nexmark's generator constants (Apache Beam / nexmark-flink `GeneratorConfig` defaults): of
// every 50 events, 1 is a person, 3 are auctions and 46 are bids; half the bids go to a hot
// auction and three quarters come from a hot bidder; half use one of four hot channels.
const PERSON_PROPORTION: u64 = 1;
const AUCTION_PROPORTION: u64 = 3;
const TOTAL_PROPORTION: u64 = 50;
const FIRST_AUCTION_ID: u64 = 1000;
const FIRST_PERSON_ID: u64 = 1000;
const HOT_AUCTION_RATIO: u64 = 2;
const HOT_BIDDER_RATIO: u64 = 4;
const HOT_CHANNEL_RATIO: u64 = 2;
const IN_FLIGHT_AUCTIONS: u64 = 100;
const ACTIVE_PEOPLE: u64 = 1000;
const AUCTION_ID_LEAD: u64 = 10;
const PERSON_ID_LEAD: u64 = 10;
const CHANNELS: u64 = 10_000;
const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];
const AVERAGE_BID_BYTES: u64 = 100;

/// Bid `index` (0-based) as one JSON line: `{"auction","bidder","price","channel","url",
/// "dateTime","extra"}`, following the Nexmark generator: the bid's event id places it in the
/// 50-event cycle; auction and bidder are the newest hot ones or uniform among the in-flight
/// auctions / active people; the price in cents is `round(10^(6u) × 100)`; the timestamp
/// advances 0.1 ms per event (10,000 events/s) from 2026-01-01 00:00:00; `extra` pads the bid
/// towards 100 bytes.
pub fn bid_json(seed: u64, index: u64, out: &mut String) {
    let bids_per_epoch = TOTAL_PROPORTION - PERSON_PROPORTION - AUCTION_PROPORTION;
    let epoch = index / bids_per_epoch;
    let event_id = epoch * TOTAL_PROPORTION + PERSON_PROPORTION + AUCTION_PROPORTION + index % bids_per_epoch;
    let mut random = Random(splitmix64(seed ^ splitmix64(index)));
    let last_auction = epoch * AUCTION_PROPORTION + AUCTION_PROPORTION - 1;
    let last_person = epoch * PERSON_PROPORTION + PERSON_PROPORTION - 1;
    let auction = if random.below(HOT_AUCTION_RATIO) > 0 {
        last_auction / HOT_AUCTION_RATIO * HOT_AUCTION_RATIO
    } else {
        let min = last_auction.saturating_sub(IN_FLIGHT_AUCTIONS);
        min + random.below(last_auction - min + 1 + AUCTION_ID_LEAD)
    } + FIRST_AUCTION_ID;
    let bidder = if random.below(HOT_BIDDER_RATIO) > 0 {
        last_person / HOT_BIDDER_RATIO * HOT_BIDDER_RATIO + 1
    } else {
        let people = last_person + 1;
        let active = people.min(ACTIVE_PEOPLE);
        people - active + random.below(active + PERSON_ID_LEAD)
    } + FIRST_PERSON_ID;
    let price = (10f64.powf(random.unit() * 6.0) * 100.0).round() as u64;
    let (channel, url) = if random.below(HOT_CHANNEL_RATIO) > 0 {
        let i = random.below(HOT_CHANNELS.len() as u64) as usize;
        (
            HOT_CHANNELS[i].to_string(),
            format!("https://www.nexmark.com/hot/{i}/item.htm?query=1"),
        )
    } else {
        let c = random.below(CHANNELS);
        let mut path = String::new();
        random.letters(5, &mut path);
        (
            format!("channel-{c}"),
            format!("https://www.nexmark.com/{path}/item.htm?query=1&channel_id={c}"),
        )
    };
    let millis = event_id / 10;
    let (h, m, s, ms) = (
        millis / 3_600_000 % 24,
        millis / 60_000 % 60,
        millis / 1000 % 60,
        millis % 1000,
    );
    let day = 1 + millis / 86_400_000;
    let current = 3 * 8 + channel.len() as u64 + url.len() as u64 + 8;
    let mut extra = String::new();
    if current < AVERAGE_BID_BYTES {
        let want = AVERAGE_BID_BYTES - current;
        let len = want / 2 + random.below(want + 1);
        random.letters(len, &mut extra);
    }
    use std::fmt::Write as _;
    out.clear();
    let _ = write!(
        out,
        r#"{{"auction":{auction},"bidder":{bidder},"price":{price},"channel":"{channel}","url":"{url}","dateTime":"2026-01-{day:02} {h:02}:{m:02}:{s:02}.{ms:03}","extra":"{extra}"}}"#
    );
}

/// Where the Nexmark bid file with `count` bids lives (see [`ensure_bids_file`]).
pub fn bids_path(out_dir: &Path, count: u64) -> PathBuf {
    out_dir.join(format!("bids-{count}.jsonl"))
}

/// Writes the bid file `path` with `count` bids (seed fixed) unless it exists.
pub fn ensure_bids_file(path: &Path, count: u64) -> std::io::Result<()> {
    if path.exists() {
        return Ok(());
    }
    write_atomically(path, |out| {
        let mut line = String::with_capacity(256);
        for i in 0..count {
            bid_json(7, i, &mut line);
            out.write_all(line.as_bytes())?;
            out.write_all(b"\n")?;
        }
        Ok(())
    })
}
