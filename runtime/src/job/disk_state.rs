//! `spec.diskState`: the memory and compression settings of the disk state backend
//! (`stateBackend: disk`), per subtask of each stateful step, and their parsing (Kubernetes
//! quantities: `64Mi`).

use crate::job::validate::JobError;
use crate::state::disk::{DiskStateOptions, StoreCompression};
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use std::borrow::Cow;

/// Memory of one subtask's disk store (`spec.diskState`, with `stateBackend: disk`): RocksDB's
/// block cache (which also holds the tables' index and filter blocks) and memtable size, and
/// the write-back cache of recent writes in front of the store; and how its table files are
/// compressed. RocksDB keeps the active
/// memtable and at most two sealed ones (`MAX_WRITE_BUFFERS`, `state/disk_rocks.rs`), so the store's configured
/// memory is `cacheSize + 3 × writeBufferSize + writeCacheSize` (measured peaks are higher:
/// docs/runtime/state-backends.md, "Memory"). Flink's
/// counterparts: `state.backend.rocksdb.block.cache-size` and
/// `state.backend.rocksdb.writebuffer.size`; Flink sets RocksDB's compression through the
/// column family's options.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DiskStateSpec {
    /// Block cache of the store, a quantity in bytes (`64Mi`, `1Gi`, `500M`, `1048576`).
    /// Default `32Mi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_size: Option<ByteQuantity>,
    /// Write buffer (memtable) size: how much is written in memory before it is flushed to a
    /// table file, a quantity in bytes, at least `1Mi`. Default `16Mi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_buffer_size: Option<ByteQuantity>,
    /// Write-back cache of the most recently written entries, in front of the store: a
    /// quantity in bytes (about 77 bytes per entry of a key up to 24 bytes, about 2.25 times
    /// that while being written back), `0` for none. Its entries are written into the store by
    /// a background thread, a generation (an eighth of it) at a time and at each checkpoint's
    /// barrier; the task thread waits only when that falls behind. Default `16Mi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_cache_size: Option<ByteQuantity>,
    /// How the store compresses its table files (`none`, the default; `lz4`; `lz4-zstd`):
    /// see [`StoreCompression`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<StoreCompression>,
}

impl DiskStateSpec {
    /// The store options these settings give (defaults for what is unset). Errors: a size
    /// that is not a quantity, or a write buffer under 1 MiB, naming the field under `at`
    /// (`spec.diskState`).
    pub fn options(&self, at: &str) -> Result<DiskStateOptions, JobError> {
        let mut options = DiskStateOptions::default();
        if let Some(text) = &self.cache_size {
            options.cache_bytes = parse_quantity(&format!("{at}.cacheSize"), &text.0)?;
        }
        if let Some(text) = &self.write_buffer_size {
            let field = format!("{at}.writeBufferSize");
            options.write_buffer_bytes = parse_quantity(&field, &text.0)?;
            if options.write_buffer_bytes < 1 << 20 {
                return Err(JobError::new(field, format!("must be at least 1Mi, got `{}`", text.0)));
            }
        }
        if let Some(text) = &self.write_cache_size {
            options.write_cache_bytes = parse_quantity(&format!("{at}.writeCacheSize"), &text.0)?;
        }
        if let Some(compression) = self.compression {
            options.compression = compression;
        }
        Ok(options)
    }
}

/// A size in bytes as the manifest gives it, kept as text: a Kubernetes quantity string
/// (`64Mi`) or a plain non-negative integer (`0`, `1048576`), as Kubernetes' own quantities
/// (`resources.limits.memory`) take both. Checked and converted by [`parse_quantity`] when the
/// job is validated, so its error names the field. Schema: `x-kubernetes-int-or-string`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct ByteQuantity(pub String);

impl From<&str> for ByteQuantity {
    fn from(text: &str) -> Self {
        ByteQuantity(text.to_string())
    }
}

impl<'de> Deserialize<'de> for ByteQuantity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ByteQuantity;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a size in bytes: a whole number or a quantity such as `64Mi`")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<ByteQuantity, E> {
                Ok(ByteQuantity(n.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<ByteQuantity, E> {
                u64::try_from(n)
                    .map(|n| ByteQuantity(n.to_string()))
                    .map_err(|_| E::custom(format!("`{n}` is negative; a size in bytes is 0 or more")))
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<ByteQuantity, E> {
                Ok(ByteQuantity(text.to_string()))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl JsonSchema for ByteQuantity {
    fn schema_name() -> Cow<'static, str> {
        "ByteQuantity".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "x-kubernetes-int-or-string": true })
    }
}

/// A Kubernetes-style quantity of bytes: digits, then optionally a binary (`Ki`, `Mi`, `Gi`,
/// `Ti`) or decimal (`k`, `M`, `G`, `T`) suffix. Errors name `field` and show the forms.
pub fn parse_quantity(field: &str, text: &str) -> Result<u64, JobError> {
    let bad = || {
        JobError::new(
            field,
            format!(
                "`{text}` is not a size in bytes; write a whole number with an optional unit: `64Mi`, `1Gi`, `500M`, `1048576`"
            ),
        )
    };
    let trimmed = text.trim();
    let digits_end = trimmed.find(|c: char| !c.is_ascii_digit()).unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(digits_end);
    let number: u64 = digits.parse().map_err(|_| bad())?;
    let multiplier: u64 = match unit {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        _ => return Err(bad()),
    };
    number.checked_mul(multiplier).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_table() {
        let rows: [(&str, Result<u64, &str>); 10] = [
            ("64Mi", Ok(64 << 20)),
            ("1Gi", Ok(1 << 30)),
            ("500M", Ok(500_000_000)),
            ("1048576", Ok(1 << 20)),
            (" 2Ki ", Ok(2048)),
            ("1.5Gi", Err("`1.5Gi` is not a size in bytes")),
            ("64MB", Err("not a size")),
            ("Mi", Err("not a size")),
            ("-1", Err("not a size")),
            ("99999999999Ti", Err("not a size")),
        ];
        for (text, want) in rows {
            match (parse_quantity("spec.diskState.cacheSize", text), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{text}"),
                (Err(e), Err(want)) => {
                    assert_eq!(e.field, "spec.diskState.cacheSize");
                    assert!(e.message.contains(want), "{text}: {}", e.message);
                }
                (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn options_default_what_is_unset_and_refuse_a_tiny_write_buffer() {
        let at = "spec.diskState";
        assert_eq!(
            DiskStateSpec::default().options(at).unwrap(),
            DiskStateOptions::default()
        );
        let spec = DiskStateSpec {
            cache_size: Some("256Mi".into()),
            write_buffer_size: None,
            write_cache_size: Some("0".into()),
            compression: Some(StoreCompression::Lz4),
        };
        let options = spec.options(at).unwrap();
        assert_eq!(options.cache_bytes, 256 << 20);
        assert_eq!(
            options.write_buffer_bytes,
            DiskStateOptions::default().write_buffer_bytes
        );
        assert_eq!(options.write_cache_bytes, 0);
        assert_eq!(options.compression, StoreCompression::Lz4);
        let tiny = DiskStateSpec {
            cache_size: None,
            write_buffer_size: Some("512Ki".into()),
            write_cache_size: None,
            compression: None,
        };
        let e = tiny.options(at).unwrap_err();
        assert_eq!(e.field, "spec.diskState.writeBufferSize");
        assert!(e.message.contains("at least 1Mi"), "{}", e.message);
        let bad_cache = DiskStateSpec {
            write_cache_size: Some("lots".into()),
            ..DiskStateSpec::default()
        };
        assert_eq!(
            bad_cache.options(at).unwrap_err().field,
            "spec.diskState.writeCacheSize"
        );
    }
}
