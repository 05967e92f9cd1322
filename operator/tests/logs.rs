//! Logs of the `weir-operator` binary, run where no cluster is reachable (no kubeconfig, no
//! in-cluster environment): it logs its start, then its failure, and exits 1. With
//! `--log-format json` every stdout line is a JSON object (the failure included); piped text
//! carries no ANSI codes; `RUST_LOG` takes precedence over `WEIR_LOG`.

use std::process::{Command, Output, Stdio};

/// Runs `weir-operator run --metrics-addr 127.0.0.1:0 --log-format FORMAT` with no cluster.
fn operator_without_a_cluster(format: &str, weir_log: &str, rust_log: Option<&str>) -> Output {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir-operator"));
    cmd.args(["run", "--metrics-addr", "127.0.0.1:0", "--log-format", format])
        .env("KUBECONFIG", home.path().join("no-kubeconfig"))
        .env("HOME", home.path())
        .env("WEIR_LOG", weir_log)
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .stdin(Stdio::null());
    if let Some(v) = rust_log {
        cmd.env("RUST_LOG", v);
    }
    cmd.output().expect("run weir-operator")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn json_logs_are_json_on_every_line_including_the_failure() {
    let out = operator_without_a_cluster("json", "info", None);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}\n{stdout}")))
        .collect();
    let messages: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| (l["level"].as_str().unwrap_or(""), l["message"].as_str().unwrap_or("")))
        .collect();
    assert!(messages.contains(&("INFO", "starting weir-operator")), "{stdout}");
    assert!(messages.contains(&("ERROR", "weir-operator stopped")), "{stdout}");
    assert!(
        text(&out.stderr).trim().is_empty(),
        "nothing besides the log: {}",
        text(&out.stderr)
    );
}

#[test]
fn piped_text_logs_have_no_ansi_codes_and_rust_log_wins() {
    let out = operator_without_a_cluster("text", "info", None);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(" INFO ") && stdout.contains("starting weir-operator"),
        "{stdout}"
    );
    assert!(!stdout.contains("\x1b["), "no ANSI escape codes in a pipe: {stdout:?}");

    let quiet = operator_without_a_cluster("text", "info", Some("error"));
    let stdout = text(&quiet.stdout);
    assert!(
        !stdout.contains(" INFO ") && stdout.contains(" ERROR ") && stdout.contains("weir-operator stopped"),
        "RUST_LOG=error keeps only errors: {stdout}"
    );
}
