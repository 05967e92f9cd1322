//! Where a value of the spec came from (pure): a command-line flag, a `--set` override or the
//! manifest. Errors about a value found after loading (a restore point's refusal, say) name it
//! the way the user gave it and say what to give instead: `--parallelism 300
//! (spec.parallelism)` and "restore with `--parallelism 128` or less", not `spec.parallelism`
//! when the manifest does not even set it.

use super::dotted_set_path;

/// Where one spec field's value came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Origin {
    /// A flag of its own, applied last: `flag` as typed (`--parallelism`).
    Flag {
        /// The flag (`--parallelism`).
        flag: &'static str,
    },
    /// The last `--set` of the field (the argument as given, `spec.parallelism=300`).
    Set(String),
    /// The manifest's field (or its default).
    #[default]
    Manifest,
}

impl Origin {
    /// Where `field` (dotted, `spec.maxParallelism`) came from: `flag` when it was given,
    /// else the last of `sets` (the `--set` arguments, in order) that sets it, else the manifest.
    pub fn of(field: &str, flag: Option<&'static str>, sets: &[String]) -> Origin {
        if let Some(flag) = flag {
            return Origin::Flag { flag };
        }
        sets.iter()
            .rev()
            .find(|s| {
                s.split_once('=')
                    .is_some_and(|(path, _)| dotted_set_path(path.trim()) == field)
            })
            .map_or(Origin::Manifest, |s| Origin::Set(s.clone()))
    }

    /// The value as the user gave it, for the start of an error: `--parallelism 300
    /// (spec.parallelism)`, `--set spec.parallelism=300 (spec.parallelism)`, or
    /// `spec.parallelism: 300`.
    pub fn name(&self, field: &str, value: impl std::fmt::Display) -> String {
        match self {
            Origin::Flag { flag } => format!("{flag} {value} ({field})"),
            Origin::Set(arg) => format!("--set {arg} ({field})"),
            Origin::Manifest => format!("{field}: {value}"),
        }
    }

    /// How to give `field` the value `value` instead, where it was given: `--parallelism
    /// 128`, `--set spec.parallelism=128`, or `spec.parallelism: 128` (in the manifest).
    pub fn setting(&self, field: &str, value: impl std::fmt::Display) -> String {
        match self {
            Origin::Flag { flag } => format!("{flag} {value}"),
            Origin::Set(arg) => {
                let path = arg.split_once('=').map_or(arg.as_str(), |(path, _)| path.trim());
                format!("--set {path}={value}")
            }
            Origin::Manifest => format!("{field}: {value} in the manifest"),
        }
    }

    /// How to unset `field`: `drop --set spec.maxParallelism=256 (and remove
    /// spec.maxParallelism from the manifest if it sets it)`, or `remove spec.maxParallelism
    /// from the manifest`. A flag cannot be unset but by leaving it out: `leave out --flag`.
    pub fn unsetting(&self, field: &str) -> String {
        match self {
            Origin::Flag { flag } => format!("leave out {flag}"),
            Origin::Set(arg) => {
                format!("drop --set {arg} (and remove {field} from the manifest if it sets it)")
            }
            Origin::Manifest => format!("remove {field} from the manifest"),
        }
    }
}

/// Where the values of the fields that errors after loading concern came from. The defaults
/// say "the manifest" (a StreamJob on Kubernetes, tests that build a job from a spec).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ValueOrigins {
    /// `spec.parallelism`: `--parallelism`, `--set` or the manifest.
    pub parallelism: Origin,
    /// `spec.maxParallelism`: `--set` or the manifest.
    pub max_parallelism: Origin,
}

impl ValueOrigins {
    /// The origins of a job loaded with `--parallelism` (`parallelism_flag`, applied after the
    /// `--set`s) and the `--set` arguments `sets`, as `weir run` and `weir coordinator` take them.
    pub fn of(parallelism_flag: Option<u32>, sets: &[String]) -> ValueOrigins {
        ValueOrigins {
            parallelism: Origin::of("spec.parallelism", parallelism_flag.map(|_| "--parallelism"), sets),
            max_parallelism: Origin::of("spec.maxParallelism", None, sets),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sets(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_origin_is_the_flag_else_the_last_set_else_the_manifest() {
        let given = sets(&[
            "spec.parallelism=3",
            "spec[maxParallelism]=64",
            " spec.maxParallelism =256",
            "spec.parallelism=5",
        ]);
        let o = ValueOrigins::of(Some(7), &given);
        assert_eq!(o.parallelism, Origin::Flag { flag: "--parallelism" });
        assert_eq!(o.max_parallelism, Origin::Set(" spec.maxParallelism =256".into()));
        let o = ValueOrigins::of(None, &given);
        assert_eq!(o.parallelism, Origin::Set("spec.parallelism=5".into()));
        let o = ValueOrigins::of(None, &sets(&["spec.checkpointing.interval=1s"]));
        assert_eq!(o, ValueOrigins::default());
    }

    #[test]
    fn errors_name_the_value_where_it_was_given_and_how_to_change_it_there() {
        let flag = Origin::Flag { flag: "--parallelism" };
        let set = Origin::Set(" spec.parallelism =300".into());
        let field = "spec.parallelism";
        for (origin, name, setting, unsetting) in [
            (
                &flag,
                "--parallelism 300 (spec.parallelism)",
                "--parallelism 128",
                "leave out --parallelism",
            ),
            (
                &set,
                "--set  spec.parallelism =300 (spec.parallelism)",
                "--set spec.parallelism=128",
                "drop --set  spec.parallelism =300 (and remove spec.parallelism from the manifest if it sets it)",
            ),
            (
                &Origin::Manifest,
                "spec.parallelism: 300",
                "spec.parallelism: 128 in the manifest",
                "remove spec.parallelism from the manifest",
            ),
        ] {
            assert_eq!(origin.name(field, 300), name);
            assert_eq!(origin.setting(field, 128), setting);
            assert_eq!(origin.unsetting(field), unsetting);
        }
    }
}
