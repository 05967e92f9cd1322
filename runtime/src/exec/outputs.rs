//! A subtask's output: the edges its stage's last operator feeds ([`super::plan::stage_outputs`]),
//! each with its own channels and routing (keyed by key group, or forward).
//!
//! A branch (a step read by several steps) sends every record down every edge of its main
//! output; a window with `lateRecords: sideOutput` sends its late records down the edges of its
//! late side output. An edge into a join first runs that side's key selector
//! ([`crate::operators::join::JoinSide`]). The subtask sees its output channels as one list,
//! the edges' channels in edge order ([`Outputs::senders`]); barriers, watermarks and
//! end-of-stream go to all of them.

use super::channel::DataSender;
use super::messages::Element;
use super::task::TaskMetrics;
use crate::job::dataflow::Port;
use crate::operators::{StreamOperator, TaskError, TaskResult};
use crate::record::{Batch, Record};
use crate::state::key_group::subtask_for_key_group;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tokio::sync::mpsc::error::TrySendError;

/// One edge's channels and routing. Forward connections (same parallelism, no
/// repartitioning) are chained into one subtask where they can be, as Flink chains operators,
/// so only keyed exchanges, the inputs of a union or a join, and branches cross subtasks.
pub enum Output {
    /// Nothing: the chain ends in a sink.
    None,
    /// Keyed (hash) exchange: one channel per downstream subtask, routed by key group with
    /// [`subtask_for_key_group`] — the same function that assigns keyed state.
    Keyed {
        /// Channels to downstream subtasks, by index.
        senders: Vec<DataSender>,
        /// Max parallelism (number of key groups).
        max_parallelism: u32,
    },
    /// Forward exchange (into a union, or a branch): the one channel to the downstream
    /// subtask of the same index. Records keep their order.
    Forward(DataSender),
}

impl Output {
    fn senders(&self) -> &[DataSender] {
        match self {
            Output::None => &[],
            Output::Keyed { senders, .. } => senders,
            Output::Forward(sender) => std::slice::from_ref(sender),
        }
    }

    pub(super) async fn send_one(s: &DataSender, el: Element, m: &TaskMetrics) -> TaskResult<()> {
        let r = Self::send_inner(s, el, m).await;
        m.output_buffers_used
            .store((s.max_capacity() - s.capacity()) as u64, Ordering::Relaxed);
        r
    }

    async fn send_inner(s: &DataSender, el: Element, m: &TaskMetrics) -> TaskResult<()> {
        match s.try_send(el) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(el)) => {
                let t = Instant::now();
                let r = s.send(el).await;
                m.backpressured_ns
                    .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
                r.map_err(|_| TaskError("downstream subtask is gone".into()))
            }
            Err(TrySendError::Closed(_)) => Err(TaskError("downstream subtask is gone".into())),
        }
    }

    /// Routes a batch to the output channels: `(channel index, element)` in send order (by key
    /// group with [`subtask_for_key_group`] for a keyed exchange).
    fn route(&self, batch: Batch) -> TaskResult<Vec<(usize, Element)>> {
        if batch.is_empty() {
            return Ok(vec![]);
        }
        let batch = match (self, batch) {
            (_, Batch::Rows(rows)) => rows,
            (Output::None, Batch::Columns(_)) => return Ok(vec![]),
            (Output::Forward(_), Batch::Columns(c)) => return Ok(vec![(0, Element::Columns(Box::new(c)))]),
            (
                Output::Keyed {
                    senders,
                    max_parallelism,
                },
                Batch::Columns(c),
            ) => {
                let (p, max_p) = (senders.len() as u32, *max_parallelism);
                let parts = c.partition(p as usize, |kg| subtask_for_key_group(kg, p, max_p) as usize);
                return Ok(parts
                    .map_err(TaskError)?
                    .into_iter()
                    .map(|(i, part)| (i, Element::Columns(Box::new(part))))
                    .collect());
            }
        };
        match self {
            Output::None => Ok(vec![]),
            Output::Forward(_) => Ok(vec![(0, Element::Records(batch))]),
            Output::Keyed {
                senders,
                max_parallelism,
            } => {
                let p = senders.len() as u32;
                if p == 1 {
                    // One downstream subtask: the batch goes whole, without moving each record.
                    if batch.iter().any(|r| r.keyed.is_none()) {
                        return Err(TaskError("record without a key at a keyed exchange".into()));
                    }
                    return Ok(vec![(0, Element::Records(batch))]);
                }
                let mut parts: Vec<Vec<Record>> = (0..p)
                    .map(|_| Vec::with_capacity(batch.len() / p as usize + 1))
                    .collect();
                for r in batch {
                    let kg = r
                        .keyed
                        .as_ref()
                        .map(|k| k.key_group)
                        .ok_or_else(|| TaskError("record without a key at a keyed exchange".into()))?;
                    parts[subtask_for_key_group(kg, p, *max_parallelism) as usize].push(r);
                }
                Ok(parts
                    .into_iter()
                    .enumerate()
                    .filter(|(_, part)| !part.is_empty())
                    .map(|(i, part)| (i, Element::Records(part)))
                    .collect())
            }
        }
    }
}

/// One edge out of a subtask's stage.
pub struct OutputEdge {
    /// Its channels and routing (never [`Output::None`]).
    pub route: Output,
    /// Which output of the chain it carries.
    pub port: Port,
    /// Uid of the downstream stage's first operator: names the channel state of what this
    /// subtask had not sent on this edge at an unaligned snapshot
    /// ([`super::channel_state::output_file_name`]), distinct per edge.
    pub channel_uid: String,
    /// Runs on the edge's records before routing, `(uid, operator)`: the key selector of a
    /// join's side. Stateless.
    pub transform: Option<(String, Box<dyn StreamOperator>)>,
}

/// Every edge of a subtask's output, and their channels as one list.
pub struct Outputs {
    edges: Vec<OutputEdge>,
    /// The edges' channels, in edge order.
    senders: Vec<DataSender>,
    /// Index in `senders` of each edge's first channel.
    firsts: Vec<usize>,
    /// The edges of each port (`[Port::Main, Port::Late]`), in edge order.
    readers: [Vec<usize>; 2],
}

impl Outputs {
    /// No output: the chain ends in a sink.
    pub fn none() -> Outputs {
        Outputs::new(vec![])
    }

    /// The output over `edges` (in the plan's edge order).
    pub fn new(edges: Vec<OutputEdge>) -> Outputs {
        let mut senders = Vec::new();
        let mut firsts = Vec::with_capacity(edges.len());
        for e in &edges {
            firsts.push(senders.len());
            senders.extend(e.route.senders().iter().cloned());
        }
        let readers =
            [Port::Main, Port::Late].map(|port| (0..edges.len()).filter(|&e| edges[e].port == port).collect());
        Outputs {
            edges,
            senders,
            firsts,
            readers,
        }
    }

    /// One edge of the main output into the stage headed by `channel_uid` (tests).
    pub fn single(route: Output, channel_uid: &str) -> Outputs {
        match route {
            Output::None => Outputs::none(),
            route => Outputs::new(vec![OutputEdge {
                route,
                port: Port::Main,
                channel_uid: channel_uid.to_string(),
                transform: None,
            }]),
        }
    }

    /// Every output channel, the edges' in edge order.
    pub fn senders(&self) -> &[DataSender] {
        &self.senders
    }

    /// The edge of output channel `channel`.
    pub fn edge_of(&self, channel: usize) -> &OutputEdge {
        let e = self.firsts.partition_point(|&f| f <= channel) - 1;
        &self.edges[e]
    }

    /// The edges.
    pub fn edges(&self) -> &[OutputEdge] {
        &self.edges
    }

    /// Routes the chain's output to the channels: `main` down every edge of the main output,
    /// `late` down every edge of the late side output (each edge after its transform);
    /// `(channel index, element)` in send order.
    pub async fn route(&mut self, main: Batch, late: Vec<Record>) -> TaskResult<Vec<(usize, Element)>> {
        let mut out = Vec::new();
        let mut batches = [main, Batch::Rows(late)];
        for port in [Port::Main, Port::Late] {
            let readers = &self.readers[port as usize];
            for (n, &e) in readers.iter().enumerate() {
                let batch = &mut batches[port as usize];
                if batch.is_empty() {
                    break;
                }
                // The last reader takes the batch; the others get a copy.
                let records = match n + 1 == readers.len() {
                    true => std::mem::replace(batch, Batch::Rows(Vec::new())),
                    false => match batch {
                        Batch::Rows(rows) => Batch::Rows(rows.clone()),
                        Batch::Columns(columns) => Batch::Columns(columns.clone()),
                    },
                };
                let edge = &mut self.edges[e];
                let records = match &mut edge.transform {
                    Some((uid, op)) => {
                        let records = records.into_records();
                        let mut next = Vec::with_capacity(records.len());
                        op.process(records, &mut next)
                            .await
                            .map_err(|err| err.context(format!("operator {uid}")))?;
                        Batch::Rows(next)
                    }
                    None => records,
                };
                let first = self.firsts[e];
                out.extend(edge.route.route(records)?.into_iter().map(|(i, el)| (first + i, el)));
            }
        }
        Ok(out)
    }

    /// Sends an element made by `make` to every channel of `senders` ([`Outputs::senders`]),
    /// waiting for room. (Over the channels only: an edge's transform is not `Sync`.)
    pub(super) async fn broadcast(
        senders: &[DataSender],
        make: impl Fn() -> Element,
        m: &TaskMetrics,
    ) -> TaskResult<()> {
        for s in senders {
            Output::send_one(s, make(), m).await?;
        }
        Ok(())
    }

    /// The records of `unsent` (what an interrupted send left, by channel) grouped by edge:
    /// `(channel uid of the edge, records in order)` for each edge with any.
    pub fn unsent_by_edge<'a>(&self, unsent: impl Iterator<Item = &'a (usize, Element)>) -> Vec<(String, Vec<Record>)> {
        let mut by_edge: Vec<Vec<Record>> = vec![Vec::new(); self.edges.len()];
        for (channel, el) in unsent {
            let e = self.firsts.partition_point(|&f| f <= *channel) - 1;
            match el {
                Element::Records(batch) => by_edge[e].extend(batch.iter().cloned()),
                Element::Columns(batch) => by_edge[e].extend((**batch).clone().into_records()),
                _ => {}
            }
        }
        self.edges
            .iter()
            .zip(by_edge)
            .filter(|(_, records)| !records.is_empty())
            .map(|(edge, records)| (edge.channel_uid.clone(), records))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::channel::data_channel;
    use crate::record::{Key, KeyedBy, Row};

    fn rec(w: &str) -> Record {
        Record {
            row: Row::from_json(serde_json::json!({ "w": w })),
            keyed: Some(KeyedBy::new(Key::Str(w.into()), 128)),
        }
    }

    fn words(el: &Element) -> Vec<String> {
        match el {
            Element::Records(b) => b
                .iter()
                .map(|r| r.row.get("w").unwrap().to_string().trim_matches('"').to_string())
                .collect(),
            _ => vec![],
        }
    }

    /// Three edges: a keyed one of two channels and a forward one carry the main output, a
    /// forward one the late side output. Every main record reaches both main edges (the keyed
    /// edge by key group), late records only the late edge; channel indexes are flat, by edge.
    #[tokio::test]
    async fn every_edge_of_a_port_gets_every_record_of_it() {
        let (k0, _r0) = data_channel(8);
        let (k1, _r1) = data_channel(8);
        let (f, _rf) = data_channel(8);
        let (l, _rl) = data_channel(8);
        let edge = |route, port, uid: &str| OutputEdge {
            route,
            port,
            channel_uid: uid.into(),
            transform: None,
        };
        let mut out = Outputs::new(vec![
            edge(
                Output::Keyed {
                    senders: vec![k0, k1],
                    max_parallelism: 128,
                },
                Port::Main,
                "counts",
            ),
            edge(Output::Forward(f), Port::Main, "filter"),
            edge(Output::Forward(l), Port::Late, "late-sink"),
        ]);
        assert_eq!(out.senders().len(), 4);
        let main: Vec<Record> = ["a", "b", "c", "d", "e"].map(rec).to_vec();
        let routed = out.route(main.clone().into(), vec![rec("x")]).await.unwrap();
        let mut by_channel: Vec<Vec<String>> = vec![vec![]; 4];
        for (i, el) in &routed {
            by_channel[*i].extend(words(el));
        }
        let mut keyed: Vec<String> = by_channel[0].iter().chain(&by_channel[1]).cloned().collect();
        keyed.sort();
        assert_eq!(
            keyed,
            ["a", "b", "c", "d", "e"],
            "the keyed edge gets every main record once"
        );
        for (ch, w) in by_channel[..2].iter().enumerate() {
            for word in w {
                let kg = rec(word).keyed.unwrap().key_group;
                assert_eq!(subtask_for_key_group(kg, 2, 128) as usize, ch, "{word} by key group");
            }
        }
        assert_eq!(by_channel[2], ["a", "b", "c", "d", "e"], "the forward edge, in order");
        assert_eq!(by_channel[3], ["x"], "late records only on the late edge");
        assert_eq!(out.edge_of(1).channel_uid, "counts");
        assert_eq!(out.edge_of(3).channel_uid, "late-sink");
        let by_edge = out.unsent_by_edge(routed.iter());
        let names: Vec<(&str, usize)> = by_edge.iter().map(|(u, r)| (u.as_str(), r.len())).collect();
        assert_eq!(names, [("counts", 5), ("filter", 5), ("late-sink", 1)]);
    }
}
