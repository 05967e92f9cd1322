use super::*;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// A job with `steps` (YAML flow sequence items after a generator source) on `backend`.
fn job(backend: &str, steps: &str) -> Job {
    let manifest = format!(
        "apiVersion: weir.dev/v1alpha1\nkind: StreamJob\nmetadata: {{name: m}}\nspec:\n  \
         stateBackend: {backend}\n  job:\n    steps:\n      \
         - {{name: left, uid: left, source: {{generator: {{keys: 10}}, eventTime: {{field: id, maxOutOfOrderness: 1s}}}}}}\n{steps}"
    );
    crate::job::parse_manifest(&manifest, &[]).unwrap()
}

const COUNT: &str = "      - keyBy: {expression: key, as: key}\n      - count: {}\n      - sink: {print: {}}\n";
const WINDOW_THEN_COUNT: &str = "      - keyBy: {expression: key, as: key}\n      \
     - window: {type: tumbling, size: 1m, aggregate: count}\n      \
     - keyBy: {expression: key, as: key}\n      - count: {}\n      - sink: {print: {}}\n";
const JOIN: &str = "      - {name: right, uid: right, source: {generator: {keys: 10}}}\n      \
     - {inputs: [left, right], join: {leftKey: key, rightKey: key, as: key, fields: [{from: left.id, as: leftId}]}}\n      - sink: {print: {}}\n";

/// Stores and bytes per process: an aggregation or a window store counts
/// `cacheSize + 3 × writeBufferSize + writeCacheSize`, a join's has no write-back cache, times
/// the subtasks; heap jobs and jobs without keyed state have none.
#[test]
fn configured_stores_per_step_kind_and_subtask() {
    let defaults = DiskStateOptions::default(); // 32 + 3 × 16 + 16 MiB
    let no_write_cache = DiskStateOptions {
        write_cache_bytes: 0,
        ..defaults
    };
    let huge = DiskStateOptions {
        cache_bytes: u64::MAX / 2,
        ..defaults
    };
    // (what, backend, steps, options, subtasks, (stores, bytes))
    let cases = [
        ("count, 1 subtask", "disk", COUNT, defaults, 1, Some((1, 96 * MIB))),
        ("count, 4 subtasks", "disk", COUNT, defaults, 4, Some((4, 384 * MIB))),
        (
            "window then count, 2",
            "disk",
            WINDOW_THEN_COUNT,
            defaults,
            2,
            Some((4, 384 * MIB)),
        ),
        (
            "count without write cache",
            "disk",
            COUNT,
            no_write_cache,
            1,
            Some((1, 80 * MIB)),
        ),
        (
            "join: no write-back cache",
            "disk",
            JOIN,
            defaults,
            3,
            Some((3, 240 * MIB)),
        ),
        ("heap", "heap", COUNT, defaults, 4, None),
        (
            "saturates",
            "disk",
            WINDOW_THEN_COUNT,
            huge,
            1000,
            Some((2000, u64::MAX)),
        ),
    ];
    for (what, backend, steps, options, subtasks, want) in cases {
        let got = configured_stores(&job(backend, steps), &options, subtasks).map(|c| (c.stores, c.bytes));
        assert_eq!(got, want, "{what}");
    }
    let stateless = job("disk", "      - sink: {print: {}}\n");
    assert_eq!(configured_stores(&stateless, &defaults, 4), None, "no keyed state");
}

/// The warning names the field, the count, both sizes and the limit's source, from just above
/// three quarters of the limit.
#[test]
fn over_limit_warning_from_three_quarters_of_the_limit() {
    let limit = MemoryLimit {
        bytes: 4 * GIB,
        source: "the container's memory limit (cgroup memory.max)",
    };
    let stores = |bytes| ConfiguredStores { stores: 8, bytes };
    assert_eq!(
        over_limit_warning(stores(3 * GIB), &limit, THIS_PROCESS),
        None,
        "exactly three quarters"
    );
    assert_eq!(over_limit_warning(stores(768 * MIB), &limit, THIS_PROCESS), None);
    let warning = over_limit_warning(stores(3 * GIB + 1), &limit, THIS_PROCESS).expect("above three quarters");
    for part in [
        "spec.diskState",
        "8 disk stores",
        "3.0 GiB",
        "4.0 GiB",
        "cgroup memory.max",
        "slotsPerWorker",
    ] {
        assert!(warning.contains(part), "{part}: {warning}");
    }
    assert!(warning.contains("disk stores of this process"), "{warning}");
    let tebibyte = over_limit_warning(stores(1 << 40), &limit, WORKER_POD).unwrap();
    for part in [
        "1.0 TiB",
        "of each worker pod",
        "spec.slotsPerWorker",
        "spec.worker.resources.limits.memory",
    ] {
        assert!(tebibyte.contains(part), "{part}: {tebibyte}");
    }
}

/// The cgroup's limit when it is below the machine's memory; the machine's otherwise (cgroup
/// v1's "no limit" is a huge number; v2's `max` does not parse, so it is absent).
#[test]
fn the_smaller_of_cgroup_and_machine() {
    let cases = [
        (Some(2 * GIB), Some(24 * GIB), Some((2 * GIB, "cgroup"))),
        (
            Some(i64::MAX as u64 / 4096 * 4096),
            Some(24 * GIB),
            Some((24 * GIB, "MemTotal")),
        ),
        (None, Some(24 * GIB), Some((24 * GIB, "MemTotal"))),
        (Some(GIB), None, Some((GIB, "cgroup"))),
        (None, None, None),
    ];
    for (cgroup, machine, want) in cases {
        let got = choose_limit(cgroup, machine);
        assert_eq!(
            got.as_ref().map(|l| l.bytes),
            want.map(|w| w.0),
            "{cgroup:?} {machine:?}"
        );
        if let (Some(got), Some((_, source))) = (got, want) {
            assert!(got.source.contains(source), "{}", got.source);
        }
    }
}

#[test]
fn mem_total_reads_kib() {
    let meminfo = "MemTotal:       24579364 kB\nMemFree:         1000 kB\n";
    assert_eq!(mem_total(meminfo), Some(24579364 * 1024));
    assert_eq!(mem_total("MemFree: 1 kB\n"), None);
}

#[test]
fn human_sizes() {
    for (bytes, want) in [
        (512, "512 B"),
        (1536, "1.5 KiB"),
        (96 * MIB, "96.0 MiB"),
        (u64::MAX, "16.0 EiB"),
    ] {
        assert_eq!(human(bytes), want);
    }
}
