//! The core's block layout and dependencies against expectations recorded
//! from daisy 1.2.2 (`tests/fixtures/v1_geometries.json`, made by
//! `tests/fixtures/make_v1_fixtures.py`): block counts, spatial ids and
//! ROIs, roots, and upstream sets must be identical.
//!
//! Downstream sets are the exact inverse of the upstream sets. daisy 1.2.2's
//! own `downstream()` is not, when a downstream task's read context is
//! asymmetric: it grows the upstream block's write ROI by the downstream
//! task's context on the wrong sides, so it can miss a block that reads the
//! output (1.x then relies on another upstream block finishing last) or
//! name one that does not. We check that our downstream sets equal the
//! inverse of 1.2.2's upstream sets everywhere, and equal 1.2.2's
//! `downstream()` wherever 1.2.2 is self-consistent.

// A test helper that unwraps fails its test, with the location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use daisy_core::dependency_graph::DependencyGraph;
use daisy_core::{BlockKey, Fit, Pipeline, Roi, TaskSpec};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

fn roi(v: &Value) -> Roi {
    let ints = |x: &Value| -> Vec<i64> {
        x.as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_i64().unwrap())
            .collect()
    };
    Roi::from_slices(&ints(&v[0]), &ints(&v[1])).unwrap()
}

fn fixtures() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/v1_geometries.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

type Id = (String, u64);

fn id_list(v: &Value) -> BTreeSet<Id> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_str().unwrap().to_string(), p[1].as_u64().unwrap()))
        .collect()
}

/// True if 1.2.2's downstream relation is the inverse of its upstream one.
fn v1_self_consistent(case: &Value) -> bool {
    let mut pairs_up = BTreeSet::new();
    for (down, ups) in case["upstream"].as_object().unwrap() {
        for u in id_list(ups) {
            pairs_up.insert((format!("{}:{}", u.0, u.1), down.clone()));
        }
    }
    let mut pairs_down = BTreeSet::new();
    for (up, downs) in case["downstream"].as_object().unwrap() {
        for d in id_list(downs) {
            pairs_down.insert((up.clone(), format!("{}:{}", d.0, d.1)));
        }
    }
    pairs_up == pairs_down
}

#[test]
fn matches_daisy_1_2_2() {
    let data = fixtures();
    let cases = data["cases"].as_array().unwrap();
    assert!(cases.len() >= 60);
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let specs: Vec<TaskSpec> = case["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                TaskSpec::new(
                    t["task_id"].as_str().unwrap(),
                    roi(&t["total_roi"]),
                    roi(&t["read_roi"]),
                    roi(&t["write_roi"]),
                    t["fit"].as_str().unwrap().parse::<Fit>().unwrap(),
                    t["read_write_conflict"].as_bool().unwrap(),
                    2,
                    t["upstream"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|u| u.as_str().unwrap().to_string())
                        .collect(),
                )
                .unwrap()
            })
            .collect();
        let graph = DependencyGraph::new(Pipeline::new(specs).unwrap());
        let p = graph.pipeline();
        let mut by_id: BTreeMap<Id, BlockKey> = BTreeMap::new();
        let mut ok = true;
        for t in 0..p.len() as u32 {
            let tid = p.spec(t).task_id.clone();
            let want_n = case["block_count"][&tid].as_u64().unwrap();
            if graph.num_blocks(t) != want_n {
                failures.push(format!(
                    "{name}: {tid} has {} blocks, 1.2.2 {want_n}",
                    graph.num_blocks(t)
                ));
                ok = false;
                continue;
            }
            let mut got: BTreeMap<u64, (Roi, Roi)> = BTreeMap::new();
            for i in 0..graph.num_blocks(t) {
                let b = graph.block(BlockKey { task: t, index: i });
                got.insert(b.spatial_id, (b.read_roi, b.write_roi));
                by_id.insert((tid.clone(), b.spatial_id), b.key);
            }
            for wb in case["blocks"][&tid].as_array().unwrap() {
                let id = wb["id"].as_u64().unwrap();
                let want = (roi(&wb["read_roi"]), roi(&wb["write_roi"]));
                if got.get(&id) != Some(&want) {
                    failures.push(format!(
                        "{name}: {tid} block {id}: got {:?}, 1.2.2 {want:?}",
                        got.get(&id)
                    ));
                    ok = false;
                    break;
                }
            }
        }
        if !ok {
            continue;
        }
        let name_of = |k: &BlockKey| -> Id {
            let b = graph.block(*k);
            (p.spec(k.task).task_id.clone(), b.spatial_id)
        };
        // the inverse of 1.2.2's upstream relation
        let mut inverse: BTreeMap<String, BTreeSet<Id>> = BTreeMap::new();
        for (down, ups) in case["upstream"].as_object().unwrap() {
            let (t, i) = down.split_once(':').unwrap();
            for u in id_list(ups) {
                inverse
                    .entry(format!("{}:{}", u.0, u.1))
                    .or_default()
                    .insert((t.to_string(), i.parse().unwrap()));
            }
        }
        let mut roots = BTreeSet::new();
        let mut buf = Vec::new();
        for (id, key) in &by_id {
            let b = graph.block(*key);
            let key_str = format!("{}:{}", id.0, id.1);
            buf.clear();
            graph.upstream(&b, &mut buf);
            let got_up: BTreeSet<Id> = buf.iter().map(name_of).collect();
            if got_up.is_empty() {
                roots.insert(id.clone());
            }
            let want_up = case["upstream"]
                .get(&key_str)
                .map(id_list)
                .unwrap_or_default();
            if got_up != want_up {
                failures.push(format!(
                    "{name}: upstream of {key_str}: got {got_up:?}, 1.2.2 {want_up:?}"
                ));
            }
            buf.clear();
            graph.downstream(&b, &mut buf);
            let got_down: BTreeSet<Id> = buf.iter().map(name_of).collect();
            let want_down = inverse.get(&key_str).cloned().unwrap_or_default();
            if got_down != want_down {
                failures.push(format!(
                    "{name}: downstream of {key_str}: got {got_down:?}, inverse of 1.2.2's upstream {want_down:?}"
                ));
            }
            let v1_down = case["downstream"]
                .get(&key_str)
                .map(id_list)
                .unwrap_or_default();
            if v1_self_consistent(case) && got_down != v1_down {
                failures.push(format!(
                    "{name}: downstream of {key_str}: got {got_down:?}, 1.2.2 {v1_down:?}"
                ));
            }
        }
        let want_roots = id_list(&case["roots"]);
        if roots != want_roots {
            failures.push(format!(
                "{name}: roots differ: got {roots:?}, 1.2.2 {want_roots:?}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
