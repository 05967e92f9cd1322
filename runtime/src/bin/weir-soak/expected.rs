//! The trial's input (a slice of the shared texts) and the expected word-count output,
//! computed independently of Weir, and the record-by-record comparison with what was committed.

use rand::Rng;
use rand::rngs::StdRng;
use std::collections::BTreeMap;

/// One input file of a trial: its name in the trial's `input/` directory and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputFile {
    /// File name, e.g. `a-moby_dick.txt`.
    pub name: String,
    /// The lines, each ending in `\n`.
    pub text: String,
}

/// Picks, from every source text, a slice of `lines_per_file` consecutive lines starting at a
/// random line (each text gives one input file, so parallel sources read in parallel).
pub fn slice_inputs(rng: &mut StdRng, texts: &[(String, String)], lines_per_file: usize) -> Vec<InputFile> {
    texts
        .iter()
        .enumerate()
        .map(|(i, (name, text))| {
            let lines: Vec<&str> = text.lines().collect();
            let take = lines_per_file.min(lines.len());
            let start = rng.random_range(0..=lines.len() - take);
            let mut slice = String::new();
            for l in &lines[start..start + take] {
                slice.push_str(l);
                slice.push('\n');
            }
            InputFile {
                name: format!("{}-{name}", (b'a' + i as u8) as char),
                text: slice,
            }
        })
        .collect()
}

/// The word count's committed output for `inputs`, as a multiset (record → copies): for every
/// word (lower-cased line split on `\W+`, empty pieces dropped) seen N times, one
/// `{"word":"<w>","count":k}` for each k in 1..=N, whatever order the files are read in.
pub fn expected_records(inputs: &[InputFile]) -> BTreeMap<String, u64> {
    let split = regex::Regex::new(r"\W+").expect("a valid regex");
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for f in inputs {
        for line in f.text.lines() {
            for w in split.split(&line.to_lowercase()) {
                if !w.is_empty() {
                    *counts.entry(w.to_string()).or_default() += 1;
                }
            }
        }
    }
    let mut records = BTreeMap::new();
    for (w, n) in counts {
        for k in 1..=n {
            records.insert(serde_json::json!({"word": w, "count": k}).to_string(), 1);
        }
    }
    records
}

/// How committed output differs from the expected multiset.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Diff {
    /// Expected records that were not committed (copies missing).
    pub lost: u64,
    /// Extra copies of expected records.
    pub duplicated: u64,
    /// Committed records that are not expected at all (wrong counts, unknown words, garbage).
    pub foreign: u64,
    /// Up to five examples of each kind, prefixed with `lost`, `duplicated` or `foreign`.
    pub examples: Vec<String>,
}

/// Compares committed lines with the expected multiset, record by record.
pub fn compare(expected: &BTreeMap<String, u64>, committed: impl IntoIterator<Item = String>) -> Diff {
    let mut got: BTreeMap<String, u64> = BTreeMap::new();
    for line in committed {
        *got.entry(line).or_default() += 1;
    }
    let mut d = Diff::default();
    let mut examples: [Vec<String>; 3] = Default::default();
    for (record, &want) in expected {
        let have = got.get(record).copied().unwrap_or(0);
        if have < want {
            d.lost += want - have;
            examples[0].push(record.clone());
        } else if have > want {
            d.duplicated += have - want;
            examples[1].push(format!("{record} ×{have}"));
        }
    }
    for (record, &have) in &got {
        if !expected.contains_key(record) {
            d.foreign += have;
            examples[2].push(record.clone());
        }
    }
    for (kind, list) in ["lost", "duplicated", "foreign"].iter().zip(examples) {
        d.examples
            .extend(list.into_iter().take(5).map(|r| format!("{kind} {r}")));
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn input(text: &str) -> Vec<InputFile> {
        vec![InputFile {
            name: "a".into(),
            text: text.into(),
        }]
    }

    fn rec(w: &str, k: u64) -> String {
        serde_json::json!({"word": w, "count": k}).to_string()
    }

    #[test]
    fn expected_records_are_the_running_counts_of_lowercased_words() {
        let e = expected_records(&input("The cat, the DOG.\n\n--the\n"));
        let want: BTreeMap<String, u64> = [
            rec("the", 1),
            rec("the", 2),
            rec("the", 3),
            rec("cat", 1),
            rec("dog", 1),
        ]
        .into_iter()
        .map(|r| (r, 1))
        .collect();
        assert_eq!(e, want);
        assert_eq!(rec("a", 1), r#"{"word":"a","count":1}"#);
    }

    #[test]
    fn compare_counts_lost_duplicated_and_foreign_records() {
        let e = expected_records(&input("a b a\n"));
        let table: Vec<(Vec<String>, (u64, u64, u64))> = vec![
            (vec![rec("a", 1), rec("a", 2), rec("b", 1)], (0, 0, 0)),
            (vec![rec("a", 2), rec("b", 1)], (1, 0, 0)),
            (
                vec![rec("a", 1), rec("a", 1), rec("a", 2), rec("b", 1), rec("b", 1)],
                (0, 2, 0),
            ),
            (
                vec![rec("a", 1), rec("a", 2), rec("b", 1), rec("a", 3), "not json".into()],
                (0, 0, 2),
            ),
            (vec![], (3, 0, 0)),
        ];
        for (committed, (lost, duplicated, foreign)) in table {
            let d = compare(&e, committed.clone());
            assert_eq!(
                (d.lost, d.duplicated, d.foreign),
                (lost, duplicated, foreign),
                "{committed:?}"
            );
            assert_eq!(d.examples.is_empty(), lost + duplicated + foreign == 0);
        }
    }

    #[test]
    fn slices_are_consecutive_lines_and_replay_from_the_seed() {
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let texts = vec![("t.txt".to_string(), text)];
        let a = slice_inputs(&mut StdRng::seed_from_u64(7), &texts, 10);
        let b = slice_inputs(&mut StdRng::seed_from_u64(7), &texts, 10);
        assert_eq!(a, b);
        let nums: Vec<u32> = a[0]
            .text
            .lines()
            .map(|l| l.trim_start_matches("line ").parse().unwrap())
            .collect();
        assert_eq!(nums.len(), 10);
        assert!(nums.windows(2).all(|w| w[1] == w[0] + 1), "{nums:?}");
        assert_eq!(a[0].name, "a-t.txt");
        // More lines asked than the text has: the whole text.
        assert_eq!(
            slice_inputs(&mut StdRng::seed_from_u64(1), &texts, 500)[0]
                .text
                .lines()
                .count(),
            100
        );
    }
}
