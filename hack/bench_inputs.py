#!/usr/bin/env python3
"""Inputs of hack/instructions-per-record.sh, written as vs_flink writes them
(runtime/benches/vs_flink/data.rs), at an exact size.

    bench_inputs.py words TEXT_DIR OUT N   # the cleaned books, repeated, cut after N words
    bench_inputs.py bids OUT N             # N Nexmark-style bids, one JSON line each

`words` prints the number of words written (the input may end mid-copy, never mid-line, so it
is N rounded up to a whole line). The bids are those of data.rs's `bid_json` (seed 7; prices
may differ in the last cent where Python's and Rust's `pow` round differently), so a profile
here reads the records of the benchmark that decides.
"""

import glob
import math
import os
import sys

MASK = (1 << 64) - 1


def splitmix64(z):
    z = (z + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


class Random:
    def __init__(self, state):
        self.state = state

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        return splitmix64(self.state)

    def below(self, n):
        return self.next() % n

    def unit(self):
        return (self.next() >> 11) / float(1 << 53)

    def letters(self, n):
        return "".join(chr(ord("a") + self.below(26)) for _ in range(n))


def clean_line(line):
    mapped = "".join(c if c.isascii() and c.isalnum() else " " for c in line)
    return " ".join(mapped.split())


def words(text_dir, out, n):
    lines = []
    for book in sorted(glob.glob(os.path.join(text_dir, "*.txt"))):
        with open(book, encoding="utf-8") as f:
            lines.extend(line for line in map(clean_line, f.read().splitlines()) if line)
    if not lines:
        sys.exit(f"bench_inputs.py: no words in {text_dir}/*.txt")
    written = 0
    with open(out, "w", encoding="ascii") as f:
        while written < n:
            for line in lines:
                if written >= n:
                    break
                f.write(line + "\n")
                written += len(line.split(" "))
    print(written)


HOT_CHANNELS = ["Google", "Facebook", "Baidu", "Apple"]


def bid_json(seed, index):
    bids_per_epoch = 50 - 1 - 3
    epoch = index // bids_per_epoch
    event_id = epoch * 50 + 1 + 3 + index % bids_per_epoch
    r = Random(splitmix64(seed ^ splitmix64(index)))
    last_auction = epoch * 3 + 3 - 1
    last_person = epoch * 1 + 1 - 1
    if r.below(2) > 0:
        auction = last_auction // 2 * 2
    else:
        lo = max(last_auction - 100, 0)
        auction = lo + r.below(last_auction - lo + 1 + 10)
    auction += 1000
    if r.below(4) > 0:
        bidder = last_person // 4 * 4 + 1
    else:
        people = last_person + 1
        active = min(people, 1000)
        bidder = people - active + r.below(active + 10)
    bidder += 1000
    price = math.floor(10 ** (r.unit() * 6.0) * 100.0 + 0.5)  # Rust's round(): half away from zero
    if r.below(2) > 0:
        i = r.below(len(HOT_CHANNELS))
        channel, url = HOT_CHANNELS[i], f"https://www.nexmark.com/hot/{i}/item.htm?query=1"
    else:
        c = r.below(10_000)
        path = r.letters(5)
        channel, url = f"channel-{c}", f"https://www.nexmark.com/{path}/item.htm?query=1&channel_id={c}"
    millis = event_id // 10
    h, m, s, ms = millis // 3_600_000 % 24, millis // 60_000 % 60, millis // 1000 % 60, millis % 1000
    day = 1 + millis // 86_400_000
    current = 3 * 8 + len(channel) + len(url) + 8
    extra = ""
    if current < 100:
        want = 100 - current
        extra = r.letters(want // 2 + r.below(want + 1))
    return (
        f'{{"auction":{auction},"bidder":{bidder},"price":{price},"channel":"{channel}","url":"{url}",'
        f'"dateTime":"2026-01-{day:02} {h:02}:{m:02}:{s:02}.{ms:03}","extra":"{extra}"}}'
    )


def bids(out, n):
    with open(out, "w", encoding="ascii") as f:
        for i in range(n):
            f.write(bid_json(7, i) + "\n")
    print(n)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "words":
        words(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif len(sys.argv) == 4 and sys.argv[1] == "bids":
        bids(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(__doc__)
