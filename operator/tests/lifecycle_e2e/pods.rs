//! "Pods": `weir` processes started with the arguments of the containers the operator builds.

use super::data::secret_file;
use k8s_openapi::api::core::v1::Container;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub struct Proc {
    pub child: Child,
    pub log: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl Proc {
    pub fn spawn(bin: &Path, log: PathBuf, args: Vec<String>, env: Vec<(String, String)>) -> Proc {
        let child = Command::new(bin)
            .args(&args)
            .env("WEIR_LOG", "warn")
            .env("WEIR_JOB_SECRET_FILE", secret_file())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn weir");
        Proc { child, log, args, env }
    }
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
    pub fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The processes of one deploy generation (the Deployment's and StatefulSet's pods).
pub struct Deployment {
    pub generation: u64,
    pub coordinator: Proc,
    pub workers: Vec<Proc>,
    pub worker_health: Vec<String>,
    pub api: String,
}

/// `(flag, value)` pairs of a container's args after the subcommand.
pub fn arg_pairs(c: &Container) -> (String, Vec<(String, String)>) {
    let args = c.args.clone().unwrap_or_default();
    assert_eq!(c.command.as_deref(), Some(&["weir".to_string()][..]));
    let pairs = args[1..]
        .chunks(2)
        .map(|p| {
            assert_eq!(p.len(), 2, "flag without a value in {args:?}");
            (p[0].clone(), p[1].clone())
        })
        .collect();
    (args[0].clone(), pairs)
}

pub fn container(spec: &Option<k8s_openapi::api::core::v1::PodSpec>) -> Container {
    spec.as_ref().unwrap().containers[0].clone()
}
