//! Apache Flink from PyPI: the bench installs `apache-flink==2.3.0` into a virtualenv under
//! `target/flink-venv` when `--with-flink` is given (once; later runs reuse it) and runs each
//! job with a small PyFlink driver: Table API in streaming mode, the job's parallelism,
//! hashmap state backend, exactly-once checkpoints every second to a local directory. The
//! driver prints the job's net runtime (Flink's `JobExecutionResult.getNetRuntime`, from
//! submission to FINISHED) so that records/s leave out the JVM's start and the planner.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Flink release compared against.
pub const FLINK_VERSION: &str = "2.3.0";

/// The PyFlink driver: reads the job JSON (argv[1]), configures the table environment, runs
/// the DDL and the INSERT, waits for the job and prints `flink-net-runtime-ms <n>`.
const DRIVER: &str = r#"import json, sys
from pyflink.table import EnvironmentSettings, TableEnvironment

job = json.load(open(sys.argv[1]))
env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
config = env.get_config()
config.set("parallelism.default", str(job["parallelism"]))
config.set("state.backend.type", "hashmap")
if job["checkpointInterval"]:
    config.set("execution.checkpointing.interval", job["checkpointInterval"])
    config.set("execution.checkpointing.mode", "EXACTLY_ONCE")
    config.set("execution.checkpointing.dir", "file://" + job["checkpoints"])
for ddl in job["ddl"]:
    env.execute_sql(ddl)
result = env.execute_sql(job["insert"]).get_job_client().get_job_execution_result().result()
print("flink-net-runtime-ms", result.get_net_runtime(), flush=True)
"#;

/// The Java 17 home the machine has (Flink 2.3 runs on 11, 17 and 21).
pub fn java_home() -> Option<PathBuf> {
    [
        "/usr/lib/jvm/java-17-openjdk-amd64",
        "/usr/lib/jvm/java-1.17.0-openjdk-amd64",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.join("bin/java").exists())
}

/// Installs Flink into `venv` unless it is there already; returns its Python.
///
/// Errors: no `python3`, or pip failing (its output is inherited so the user sees why).
pub fn ensure_installed(venv: &Path) -> Result<PathBuf, String> {
    let python = venv.join("bin/python");
    let marker = venv.join(format!("apache-flink-{FLINK_VERSION}.installed"));
    if marker.exists() {
        return Ok(python);
    }
    eprintln!(
        "vs_flink: installing apache-flink=={FLINK_VERSION} into {} (about 400 MB, once)",
        venv.display()
    );
    let status = |c: &mut Command| c.status().map(|s| s.success()).unwrap_or(false);
    if !python.exists() && !status(Command::new("python3").args(["-m", "venv"]).arg(venv)) {
        return Err(format!("`python3 -m venv {}` failed", venv.display()));
    }
    if !status(
        Command::new(&python)
            .args(["-m", "pip", "install", "--quiet"])
            .arg(format!("apache-flink=={FLINK_VERSION}")),
    ) {
        return Err(format!(
            "pip could not install apache-flink=={FLINK_VERSION} into {}",
            venv.display()
        ));
    }
    std::fs::write(&marker, "").map_err(|e| format!("{}: {e}", marker.display()))?;
    Ok(python)
}

/// Writes the driver script into `dir` and returns its path.
pub fn write_driver(dir: &Path) -> std::io::Result<PathBuf> {
    let path = dir.join("flink_driver.py");
    std::fs::write(&path, DRIVER)?;
    Ok(path)
}

/// The job's net runtime in seconds, from the driver's output.
pub fn net_runtime_seconds(stdout: &str) -> Option<f64> {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("flink-net-runtime-ms "))
        .and_then(|ms| ms.trim().parse::<f64>().ok())
        .map(|ms| ms / 1000.0)
}
