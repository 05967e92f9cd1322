//! `spec.diskState`: the memory and compression settings of the disk state backend
//! (`stateBackend: disk`), per subtask of each stateful step, and their parsing (Kubernetes
//! quantities: `64Mi`, `1.5Gi`; [`crate::job::quantity`]).

use crate::job::quantity::{
    BYTE_QUANTITY_MESSAGE, BYTE_QUANTITY_PATTERN, BYTE_QUANTITY_RULE, MAX_BYTES, MAX_QUANTITY_LENGTH,
    parse_byte_quantity,
};
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
    /// Block cache of the store, a Kubernetes quantity in bytes (`64Mi`, `1.5Gi`, `500M`,
    /// `1e9`, `1048576`; not `64MB`), at least `1Mi`. Default `32Mi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_size: Option<ByteQuantity>,
    /// Write buffer (memtable) size: how much is written in memory before it is flushed to a
    /// table file, a quantity in bytes, at least `1Mi`. Default `16Mi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_buffer_size: Option<ByteQuantity>,
    /// Write-back cache of the most recently written entries, in front of the store: a
    /// quantity in bytes (about 77 bytes per entry of a key up to 24 bytes, plus 40 per
    /// window held for a `window` step's key; about 2.25 times that while being written
    /// back), `0` for none, else at least `1Mi`. Its entries are written into the store by
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
    /// that is not a quantity, a block cache or write buffer under 1 MiB, or a write-back cache
    /// neither 0 nor at least 1 MiB, naming the field under `at`
    /// (`spec.diskState`).
    pub fn options(&self, at: &str) -> Result<DiskStateOptions, JobError> {
        let mut options = DiskStateOptions::default();
        if let Some(text) = &self.cache_size {
            let field = format!("{at}.cacheSize");
            options.cache_bytes = parse_byte_quantity(&field, &text.0)?;
            if options.cache_bytes < 1 << 20 {
                return Err(JobError::new(
                    field,
                    format!(
                        "must be at least 1Mi, got `{}`: the block cache cannot be turned off, it holds \
                         the table files' index and filter blocks, without which every read goes to the \
                         files (`writeCacheSize: 0` turns off the write-back cache)",
                        text.0
                    ),
                ));
            }
        }
        if let Some(text) = &self.write_buffer_size {
            let field = format!("{at}.writeBufferSize");
            options.write_buffer_bytes = parse_byte_quantity(&field, &text.0)?;
            if options.write_buffer_bytes < 1 << 20 {
                return Err(JobError::new(field, format!("must be at least 1Mi, got `{}`", text.0)));
            }
        }
        if let Some(text) = &self.write_cache_size {
            let field = format!("{at}.writeCacheSize");
            options.write_cache_bytes = parse_byte_quantity(&field, &text.0)?;
            // A cache of a few entries writes back a generation every few records (found by
            // trial: `writeCacheSize: 1` ran five times slower than none).
            if options.write_cache_bytes != 0 && options.write_cache_bytes < 1 << 20 {
                return Err(JobError::new(
                    field,
                    format!(
                        "must be 0 (no write-back cache) or at least 1Mi, got `{}`: a smaller cache holds a few \
                         entries and writes them back every few records",
                        text.0
                    ),
                ));
            }
        }
        if let Some(compression) = self.compression {
            options.compression = compression;
        }
        Ok(options)
    }
}

/// A size in bytes as the manifest gives it, kept as text: a Kubernetes quantity string
/// (`64Mi`, `1.5Gi`, `1e9`) or a plain non-negative integer (`0`, `1048576`), as Kubernetes' own
/// quantities (`resources.limits.memory`) take both; a YAML number written with a fraction or an
/// exponent (`2e6`) is taken when it is a whole number of bytes. Checked and converted by
/// [`parse_byte_quantity`] when the job is validated, so its error names the field. Schema:
/// `x-kubernetes-int-or-string` with the quantity grammar as `pattern`
/// ([`BYTE_QUANTITY_PATTERN`]) and as a CEL rule whose message says what to write, so the API
/// server refuses a string `weir` refuses (`64MB`: write `64Mi` or `64M`).
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
            fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<ByteQuantity, E> {
                // YAML reads `1e3` and `1.0` as floats; the API server takes a whole one as an
                // integer. `MAX_BYTES as f64` rounds up to 2^63, so the bound is `<`.
                if n.is_finite() && n >= 0.0 && n.fract() == 0.0 && n < MAX_BYTES as f64 {
                    return Ok(ByteQuantity((n as u64).to_string()));
                }
                Err(E::custom(format!(
                    "`{n}` is not a whole number of bytes from 0 to {MAX_BYTES}; write a whole number \
                     (`1536`) or a quantity string (`1.5Ki`, `64Mi`)"
                )))
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
        schemars::json_schema!({
            "x-kubernetes-int-or-string": true,
            "pattern": BYTE_QUANTITY_PATTERN,
            "maxLength": MAX_QUANTITY_LENGTH,
            "x-kubernetes-validations": [{
                "rule": BYTE_QUANTITY_RULE,
                "message": BYTE_QUANTITY_MESSAGE,
            }],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_default_what_is_unset_and_refuse_a_tiny_write_buffer_or_block_cache() {
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
        // A block cache of 0 (meant as "no cache", as `writeCacheSize: 0` is) or under 1 MiB
        // is refused: RocksDB's cache holds the index and filter blocks every read needs.
        for (size, ok) in [
            ("0", false),
            ("1048575", false),
            ("512Ki", false),
            ("1Mi", true),
            ("1048576", true),
        ] {
            let spec = DiskStateSpec {
                cache_size: Some(size.into()),
                ..DiskStateSpec::default()
            };
            match spec.options(at) {
                Ok(options) => assert!(ok && options.cache_bytes == 1 << 20, "{size}"),
                Err(e) => {
                    assert!(!ok, "{size}: {e:?}");
                    assert_eq!(e.field, "spec.diskState.cacheSize");
                    for part in ["at least 1Mi", "cannot be turned off", "writeCacheSize: 0"] {
                        assert!(e.message.contains(part), "{size}: {}", e.message);
                    }
                }
            }
        }
        // The write-back cache: 0 (none) or at least 1 MiB.
        for (size, ok) in [("0", true), ("1", false), ("1048575", false), ("1Mi", true)] {
            let spec = DiskStateSpec {
                write_cache_size: Some(size.into()),
                ..DiskStateSpec::default()
            };
            match spec.options(at) {
                Ok(_) => assert!(ok, "{size}"),
                Err(e) => {
                    assert!(!ok, "{size}: {e:?}");
                    assert_eq!(e.field, "spec.diskState.writeCacheSize");
                    assert!(
                        e.message.contains("must be 0 (no write-back cache) or at least 1Mi"),
                        "{}",
                        e.message
                    );
                }
            }
        }
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
