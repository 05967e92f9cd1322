//! The `weir` binary, the job secret, the real text and the independent word count of the
//! lifecycle test, and reading its committed output.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The job secret of the processes (this test runs no API server, so no operator-made
/// `<job>-job-secret`: it gives every process this one the way the pods get theirs, through
/// `WEIR_JOB_SECRET_FILE`).
pub const JOB_SECRET: &str = "weir-e2e-secret-0123456789abcdef";

/// The file holding [`JOB_SECRET`], under the target's test scratch directory.
pub fn secret_file() -> PathBuf {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("weir-e2e-job.secret");
    if !path.exists() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, JOB_SECRET).unwrap();
    }
    path
}

pub fn weir_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("WEIR_BIN") {
        return PathBuf::from(p);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let status = Command::new(env!("CARGO"))
        .args(["build", "-q", "-p", "weir-runtime", "--bin", "weir"])
        .current_dir(&root)
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build -p weir-runtime --bin weir failed");
    let bin = target.join("debug/weir");
    assert!(
        bin.is_file(),
        "{} not found: build it with `cargo build -p weir-runtime --bin weir` or set WEIR_BIN",
        bin.display()
    );
    bin
}

/// `../shared/data/text` from the repository root, or `$WEIR_DATA_DIR/text` when set.
pub fn text_dir() -> PathBuf {
    let d = std::env::var_os("WEIR_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"))
        .join("text");
    assert!(
        d.join("moby_dick.txt").is_file(),
        "shared data not found at {}",
        d.display()
    );
    d.canonicalize().unwrap()
}

/// The expected running counts, computed independently of Weir: every `(w, k)` for
/// k = 1..N(w) as `{"word":"<w>","count":<k>}`, sorted.
pub fn expected_wordcount() -> Vec<String> {
    let re = regex::Regex::new(r"\W+").unwrap();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut files: Vec<_> = std::fs::read_dir(text_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    for f in files {
        for line in std::fs::read_to_string(f).unwrap().lines() {
            for w in re.split(&line.to_lowercase()) {
                if !w.is_empty() {
                    *counts.entry(w.to_string()).or_default() += 1;
                }
            }
        }
    }
    let mut out = vec![];
    for (w, n) in counts {
        for k in 1..=n {
            out.push(serde_json::json!({"word": w, "count": k}).to_string());
        }
    }
    out.sort();
    out
}

/// Committed output lines of a local sink directory (hidden in-progress files excluded), sorted.
pub fn committed_output(dir: &Path) -> Vec<String> {
    let mut lines = vec![];
    let Ok(rd) = std::fs::read_dir(dir) else { return lines };
    for e in rd {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') || !p.is_file() {
            continue;
        }
        lines.extend(
            BufReader::new(std::fs::File::open(&p).unwrap())
                .lines()
                .map(Result::unwrap),
        );
    }
    lines.sort();
    lines
}

/// Asserts two sorted multisets are equal, reporting the first differences.
pub fn assert_same_multiset(actual: &[String], expected: &[String], what: &str) {
    if actual == expected {
        return;
    }
    let (mut a, mut e) = (actual.iter().peekable(), expected.iter().peekable());
    let (mut missing, mut extra) = (vec![], vec![]);
    loop {
        match (a.peek(), e.peek()) {
            (Some(x), Some(y)) if x == y => {
                a.next();
                e.next();
            }
            (Some(x), Some(y)) if x < y => extra.push(a.next().unwrap().clone()),
            (Some(_), Some(_)) | (None, Some(_)) => missing.push(e.next().unwrap().clone()),
            (Some(_), None) => extra.push(a.next().unwrap().clone()),
            (None, None) => break,
        }
    }
    panic!(
        "{what}: {} records, expected {}; {} missing (first {:?}), {} extra/duplicated (first {:?})",
        actual.len(),
        expected.len(),
        missing.len(),
        missing.iter().take(5).collect::<Vec<_>>(),
        extra.len(),
        extra.iter().take(5).collect::<Vec<_>>()
    );
}

/// A port on 127.0.0.1 no process is bound to, for a child to bind.
pub fn free_port() -> u16 {
    weir_runtime::ports::unused_loopback_port().expect("an unused loopback port")
}
