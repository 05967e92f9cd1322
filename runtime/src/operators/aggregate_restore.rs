//! The lazy restore of an aggregation's keyed state (`state/pending.rs`): restored key groups
//! are built when a batch first touches them, and a few more after each batch.

use super::{Aggregate, TaskError, TaskResult};
use crate::state::pending::BUILD_PER_BATCH;

impl Aggregate {
    /// Key groups restored but not built yet (0 once the restore is complete).
    pub fn pending_key_groups(&self) -> usize {
        self.pending.len()
    }

    /// Builds every pending key group now (what an eager restore did before the first
    /// record). Errors: a block does not decode (named by operator and key group), the disk
    /// store fails.
    pub fn build_pending(&mut self) -> TaskResult<()> {
        let uid = &self.uid;
        self.pending
            .build_all(&mut self.state)
            .map_err(|e| TaskError(format!("operator {uid}: {e}")))
    }

    /// Builds, before a batch, the [`BUILD_PER_BATCH`] groups the batch before owes, then the
    /// pending ones of `key_groups`; the batch then owes [`BUILD_PER_BATCH`] more, built before
    /// the next batch or while idle. So each batch pays for the groups it touches plus
    /// [`BUILD_PER_BATCH`], as before, but its output (the first record's, after a restore)
    /// does not wait for the extra ones (measured: 11–41 ms of a disk restore's first record
    /// at 1M keys, docs/runtime/state-backends-log.md).
    pub(super) fn build_for_batch(&mut self, key_groups: impl IntoIterator<Item = u32>) -> TaskResult<()> {
        let uid = &self.uid;
        let failed = |e: String| TaskError(format!("operator {uid}: {e}"));
        if self.pending.take_extra_owed() {
            self.pending
                .build_next(&mut self.state, BUILD_PER_BATCH)
                .map_err(failed)?;
        }
        self.pending.build(&mut self.state, key_groups).map_err(failed)?;
        if self.lazy_failpoints.abort_with_pending && !self.pending.is_empty() {
            tracing::warn!(
                target: "weir",
                "failpoint abort-with-pending-key-groups reached: operator {uid} has {} key groups pending, aborting",
                self.pending.len()
            );
            std::process::abort();
        }
        if !self.lazy_failpoints.no_background_build {
            self.pending.owe_extra_build();
        }
        Ok(())
    }

    /// Builds [`BUILD_PER_BATCH`] pending key groups while the subtask is idle.
    pub(super) fn build_when_idle(&mut self) -> TaskResult<()> {
        let uid = &self.uid;
        self.pending.take_extra_owed();
        self.pending
            .build_next(&mut self.state, BUILD_PER_BATCH)
            .map_err(|e| TaskError(format!("operator {uid}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Num, OperatorRestore, StreamOperator};
    use super::*;
    use crate::job::validate::AggregateFn;
    use crate::record::{Key, KeyedBy, Record, Row};
    use crate::state::backend::{BackendChoice, KeyedState};
    use crate::state::key_group::{key_group_range, key_hash};
    use serde_json::json;

    const MAX_P: u32 = 16;

    fn keyed(word: &str) -> Record {
        Record {
            row: Row::from_json(json!({"word": word})),
            keyed: Some(KeyedBy::new(Key::Str(word.into()), MAX_P)),
        }
    }

    /// 200 words counted 3 times each, as restored blocks.
    fn blocks() -> Vec<crate::state::snapshot::KeyGroupBlock> {
        let all = key_group_range(0, 1, MAX_P);
        let mut state = KeyedState::<Num>::open(&BackendChoice::Heap, all, None).unwrap();
        for i in 0..200 {
            let key = Key::Str(format!("w{i}").into());
            let hash = key_hash(&key);
            let kg = crate::state::key_group::key_group_of_hash(hash, MAX_P);
            state.update(kg, hash, &key, 0, |_| Num::Int(3)).unwrap();
        }
        state.snapshot(0).encode().unwrap()
    }

    fn restored() -> Aggregate {
        let restore = OperatorRestore {
            key_groups: blocks(),
            operator_state: vec![],
        };
        let all = key_group_range(0, 1, MAX_P);
        Aggregate::new("c", AggregateFn::Count, None, "word", "count", all, restore).unwrap()
    }

    /// A batch builds the key groups it touches (plus a few): the restored counts go on.
    #[tokio::test]
    async fn a_batch_continues_the_restored_counts_of_pending_key_groups() {
        let mut op = restored();
        assert_eq!((op.pending_key_groups(), op.len()), (16, 200));
        let mut out = vec![];
        op.process(vec![keyed("w7"), keyed("new"), keyed("w7")], &mut out)
            .await
            .unwrap();
        let counts: Vec<_> = out.iter().map(|r| r.row.to_json()).collect();
        assert_eq!(
            counts,
            [
                json!({"word": "w7", "count": 4}),
                json!({"word": "new", "count": 1}),
                json!({"word": "w7", "count": 5})
            ]
        );
        assert!(op.pending_key_groups() < 16 && op.pending_key_groups() > 0);
        assert_eq!(op.len(), 201);
    }

    /// While idle, the subtask builds the rest a few key groups at a time, then reports no
    /// more idle work; the state is then the restored one.
    #[tokio::test]
    async fn idle_work_builds_every_pending_key_group() {
        let mut op = restored();
        let mut steps = 0;
        while op.has_idle_work() {
            op.on_idle().await.unwrap();
            steps += 1;
        }
        assert_eq!(
            (steps, op.pending_key_groups(), op.len()),
            (16usize.div_ceil(BUILD_PER_BATCH), 0, 200)
        );
        let mut out = vec![];
        op.process(vec![keyed("w199")], &mut out).await.unwrap();
        assert_eq!(out[0].row.to_json(), json!({"word": "w199", "count": 4}));
    }
}
