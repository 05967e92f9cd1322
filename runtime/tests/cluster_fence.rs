//! Two coordinators of one job on one S3 checkpoint storage (moto): the older one, still alive
//! after a newer one with the same run id started (a partitioned pod replaced), stops at its
//! next checkpoint instead of restarting into the newer one's snapshot ids.

mod common;
mod support;

use common::cluster::*;
use common::*;
use std::path::Path;
use std::time::{Duration, Instant};
use support::moto::{MotoServer, s3_store};

/// Before (helper-104, 2026-12-06): the fenced coordinator's commit failed, it restarted its
/// attempt from the newer one's newest checkpoint and triggered the ids that one used next; its
/// workers' uploads overwrote files of the newer one's completed checkpoints (`size 31 bytes,
/// _metadata says 190`), so a restore from them failed. Now it stops for good at the fence
/// (no restart), every checkpoint left in storage verifies, and the job's committed output,
/// both coordinators' together, is the exact word count.
#[test]
fn a_coordinator_fenced_by_a_newer_one_stops_and_leaves_its_checkpoints_intact() {
    let moto = MotoServer::start_with_bucket("weir-fence");
    let (rt, store) = s3_store(&moto);
    let bucket = moto.bucket().to_string();
    let env_owned = moto.env();
    let env: Vec<(&str, &str)> = env_owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let paths = s3_paths(&bucket);
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let manifest_a = wordcount_manifest(dir_a.path(), &paths, 2, "exactly-once", "300ms", Some(3000), None);
    let older = Cluster::start_with_workers(dir_a.path(), &manifest_a, &[], &env, 1);
    assert_eq!(older.wait_checkpoint_after(0), 1);
    // The newer coordinator of the same run, with a worker of its own; the older one runs on.
    let manifest_b = wordcount_manifest(dir_b.path(), &paths, 2, "exactly-once", "300ms", Some(3000), None);
    let mut newer = Cluster::start_with_workers(dir_b.path(), &manifest_b, &[], &env, 1);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !older.coordinator.text().contains("fenced") {
        assert!(
            Instant::now() < deadline,
            "the older coordinator was never fenced: {}",
            older.coordinator.text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    newer.coordinator.wait_ok(Duration::from_secs(180));
    let log = older.coordinator.text();
    assert!(
        !log.contains("restarting in"),
        "the fenced coordinator restarted an attempt: {log}"
    );
    assert!(log.contains("this one stops"), "{log}");
    // Every checkpoint in storage verifies, file by file.
    let ids: Vec<u64> = rt
        .block_on(store.list("checkpoints/wordcount/chk-"))
        .unwrap()
        .iter()
        .filter_map(|o| o.path.strip_suffix("/_metadata")?.rsplit("chk-").next()?.parse().ok())
        .collect();
    assert!(!ids.is_empty());
    for id in ids {
        let url = format!("s3://{bucket}/checkpoints/wordcount/chk-{id}");
        let out = std::process::Command::new(weir())
            .args(["savepoint", "inspect", &url])
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{url} does not verify: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_same_multiset(
        &s3_output(&rt, &store),
        &expected_wordcount(),
        "two coordinators of one job, the older one fenced",
    );
}

/// A `weir coordinator` of another namespace's StreamJob of the same name, in a checkpoint
/// directory a StreamJob owns (the operator's `_owner` record), is refused before it claims an
/// epoch or writes anything, naming the setting, the owner and the way out. The owner's own
/// coordinator (the operator writes `metadata.namespace` into the job file) runs there; so does
/// one whose job file names no namespace (started by hand, or by an operator from before the
/// namespace was written: refusing it would stop a job whose image is upgraded before its
/// operator), with a warning naming the owner.
#[test]
fn a_coordinator_in_another_stream_jobs_checkpoint_directory_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (manifest, paths) = job(dir.path(), 2, Some(3000));
    let job_dir = Path::new(&paths.checkpoints).join("wordcount");
    std::fs::create_dir_all(&job_dir).unwrap();
    std::fs::write(job_dir.join("_owner"), r#"{"streamJob":"team-a/wordcount"}"#).unwrap();
    let listing = || dir_names(&job_dir);
    let before = listing();
    let text = std::fs::read_to_string(&manifest).unwrap();
    let in_namespace = |namespace: &str| {
        let path = dir.path().join(format!("job-{namespace}.yaml"));
        let with = text.replace(
            "metadata: { name: wordcount }",
            &format!("metadata: {{ name: wordcount, namespace: {namespace} }}"),
        );
        assert_ne!(with, text, "the manifest's metadata line changed");
        std::fs::write(&path, with).unwrap();
        path
    };
    let coordinator = |job_file: &Path, name: &str| {
        let listen = format!("127.0.0.1:{}", free_port());
        let rpc = format!("127.0.0.1:{}", free_port());
        Proc::spawn(
            dir.path(),
            name,
            &[
                "coordinator",
                "--job",
                job_file.to_str().unwrap(),
                "--listen",
                &listen,
                "--rpc-listen",
                &rpc,
                "--run-id",
                name,
            ],
            &[],
        )
    };
    for (job_file, name, who) in [(in_namespace("team-b"), "team-b", "runs StreamJob team-b/wordcount")] {
        let mut refused = coordinator(&job_file, name);
        let status = wait_exit(&mut refused.child, Duration::from_secs(30));
        let log = refused.text();
        assert_eq!(status.code(), Some(1), "{name}: {log}");
        for part in [
            "spec.checkpointing.storage:",
            "holds the checkpoints of StreamJob team-a/wordcount",
            who,
            "--checkpoint-dir",
            "--restore",
        ] {
            assert!(log.contains(part), "{name}: {part}: {log}");
        }
        assert!(!log.contains("panicked"), "{log}");
        assert_eq!(
            listing(),
            before,
            "{name}: the refused coordinator wrote into the job's directory"
        );
    }

    for (job_file, name) in [(in_namespace("team-a"), "team-a"), (manifest.clone(), "by-hand")] {
        let mut started = coordinator(&job_file, name);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !started.text().contains("coordinator of job wordcount control API on") {
            assert!(
                started.child.try_wait().unwrap().is_none(),
                "{name} exited: {}",
                started.text()
            );
            assert!(Instant::now() < deadline, "{name} did not start: {}", started.text());
            std::thread::sleep(Duration::from_millis(50));
        }
        let warned = started
            .text()
            .contains("job file names no StreamJob (no metadata.namespace)");
        assert_eq!(warned, name == "by-hand", "{name}: {}", started.text());
        started.kill9();
    }
}

/// The exit status of `child`, waiting up to `timeout`.
fn wait_exit(child: &mut std::process::Child, timeout: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "still running after {timeout:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
