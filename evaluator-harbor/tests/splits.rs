//! Splits and digests are stable across runs and machines: pinned against fixed expected values
//! (computed independently of this crate, with Python's hashlib + sorted-key JSON).
use crate::common;
use std::os::unix::fs::PermissionsExt;

use evaluator_harbor::cli::EngineKind;
use evaluator_harbor::digest::task_digest;
use evaluator_harbor::split::{FrozenTaskSet, SplitName, SplitRatios, assign};

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn split_members_are_pinned_for_a_fixed_seed() {
    let all: Vec<String> = (0..10).map(|i| format!("task-{i:02}")).collect();
    let r = SplitRatios {
        train: 0.6,
        gate: 0.2,
        sealed: 0.2,
    };
    for _ in 0..3 {
        let s = assign(&all, &r, 42).unwrap();
        assert_eq!(
            s.train,
            names(&[
                "task-09", "task-02", "task-03", "task-06", "task-01", "task-04"
            ])
        );
        assert_eq!(s.gate, names(&["task-08", "task-05"]));
        assert_eq!(s.sealed, names(&["task-07", "task-00"]));
    }
    // Input order does not matter.
    let mut rev = all.clone();
    rev.reverse();
    assert_eq!(assign(&rev, &r, 42).unwrap(), assign(&all, &r, 42).unwrap());
    // Largest remainder with 7 tasks: 4.2 / 1.4 / 1.4 -> 4 / 2 / 1 (gate wins the tie).
    let seven = names(&[
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf",
    ]);
    let s = assign(&seven, &r, 7).unwrap();
    assert_eq!(s.train, names(&["golf", "bravo", "alpha", "delta"]));
    assert_eq!(s.gate, names(&["foxtrot", "charlie"]));
    assert_eq!(s.sealed, names(&["echo"]));
    // A different seed gives a different order.
    assert_ne!(assign(&all, &r, 43).unwrap(), assign(&all, &r, 42).unwrap());
}

#[test]
fn task_digest_is_pinned() {
    let d = tempfile::tempdir().unwrap();
    let t = d.path().join("pinned");
    std::fs::create_dir_all(t.join("tests")).unwrap();
    std::fs::write(t.join("instruction.md"), "Do it.\n").unwrap();
    std::fs::write(t.join("task.toml"), "[verifier]\ntimeout_sec = 10.0\n").unwrap();
    std::fs::write(
        t.join("tests/test.sh"),
        "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
    )
    .unwrap();
    std::fs::set_permissions(
        t.join("tests/test.sh"),
        std::fs::Permissions::from_mode(0o775),
    )
    .unwrap();
    std::fs::set_permissions(t.join("task.toml"), std::fs::Permissions::from_mode(0o664)).unwrap();
    assert_eq!(
        task_digest(&t).unwrap(),
        "sha256:7a4ec2e84d2356fa98e9879dc2408856455c8ad092696ebabd13f524c81154ab"
    );
}

#[test]
fn frozen_task_set_round_trips_and_detects_tampering() {
    let f = FrozenTaskSet::freeze(
        &common::testdata().join("tasks"),
        SplitRatios {
            train: 0.34,
            gate: 0.33,
            sealed: 0.33,
        },
        1,
        2,
    )
    .unwrap();
    assert_eq!(
        f.split.train.len() + f.split.gate.len() + f.split.sealed.len(),
        3
    );
    assert_eq!(f.task_digests.len(), 3);
    let again = FrozenTaskSet::freeze(&common::testdata().join("tasks"), f.ratios, 1, 2).unwrap();
    assert_eq!(again.task_set_digest, f.task_set_digest);
    // Repetitions and seed are part of the identity.
    let reps = FrozenTaskSet::freeze(&common::testdata().join("tasks"), f.ratios, 1, 3).unwrap();
    assert_ne!(reps.task_set_digest, f.task_set_digest);
    assert_ne!(
        f.selection_digest(SplitName::Gate).unwrap(),
        f.selection_digest(SplitName::Sealed).unwrap()
    );
    let mut json: serde_json::Value = serde_json::from_str(&f.to_json()).unwrap();
    json["split"]["gate"] = serde_json::json!([]);
    assert!(FrozenTaskSet::from_json(&json.to_string()).is_err());
}

#[test]
fn check_reports_every_problem_at_once() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    common::write_task(root, "ok", "", Some("#!/bin/bash\n"), Some("#!/bin/bash\n"));
    common::write_task(
        root,
        "bad-toml",
        "[agent]\ntimeout_sec = \"x\"\n",
        None,
        None,
    );
    let t = common::write_task(
        root,
        "bad-timeout",
        "[verifier]\ntimeout_sec = -5\n",
        None,
        Some("#!/bin/bash\n"),
    );
    std::fs::remove_file(t.join("instruction.md")).unwrap();
    std::fs::create_dir_all(root.join("not-a-task")).unwrap();
    let problems = evaluator_harbor::task::check_task_set(root, EngineKind::Local);
    let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    let has = |s: &str| text.iter().any(|t| t.contains(s));
    assert!(has("malformed task.toml"), "{text:#?}");
    assert!(has("missing tests/test.sh"), "{text:#?}");
    assert!(has("[verifier].timeout_sec"), "{text:#?}");
    assert!(has("missing instruction.md"), "{text:#?}");
    assert!(has("not a task"), "{text:#?}");
    assert_eq!(problems.len(), 5, "{text:#?}");
    assert!(
        evaluator_harbor::task::check_task_set(
            &common::testdata().join("tasks"),
            EngineKind::Docker
        )
        .is_empty()
    );
}

/// Every regular file under `dir`: (relative path, executable, bytes), as `evolve init`
/// holds a task set in memory.
fn files_of(dir: &std::path::Path) -> Vec<(String, bool, Vec<u8>)> {
    fn walk(root: &std::path::Path, dir: &std::path::Path, out: &mut Vec<(String, bool, Vec<u8>)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_str().unwrap().to_string();
                let exec = meta.permissions().mode() & 0o111 != 0;
                out.push((rel, exec, std::fs::read(&p).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out
}

const RATIOS: SplitRatios = SplitRatios {
    train: 0.4,
    gate: 0.3,
    sealed: 0.3,
};

fn freeze_in_memory(
    dir: &std::path::Path,
    files: &[(String, bool, Vec<u8>)],
    ratios: SplitRatios,
) -> evaluator_harbor::Result<FrozenTaskSet> {
    let set = evaluator_harbor::split::TaskFiles {
        dir: dir.to_path_buf(),
        name: dir.file_name().unwrap().to_str().unwrap(),
        files: files
            .iter()
            .map(|(p, x, b)| (p.as_str(), *x, b.as_slice()))
            .collect(),
    };
    FrozenTaskSet::freeze_files(&set, ratios, 5, 2)
}

#[test]
fn freezing_files_in_memory_gives_what_freezing_their_directory_gives() {
    let d = tempfile::tempdir().unwrap();
    let set = d.path().join("tasks");
    for (rel, exec, bytes) in files_of(&common::testdata().join("tasks")) {
        let p = set.join(&rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, &bytes).unwrap();
        let mode = if exec { 0o755 } else { 0o644 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    // Left out by both: a hidden directory, a directory without task.toml, a loose file.
    for extra in [".hidden/task.toml", "notes/readme.md", "README.md"] {
        std::fs::create_dir_all(set.join(extra).parent().unwrap()).unwrap();
        std::fs::write(set.join(extra), "x\n").unwrap();
    }
    let files = files_of(&set);
    let on_disk = FrozenTaskSet::freeze(&set, RATIOS, 5, 2).unwrap();
    let in_memory = freeze_in_memory(&set, &files, RATIOS).unwrap();
    assert_eq!(in_memory.to_json(), on_disk.to_json());
    assert_eq!(in_memory.task_digests.len(), 3);

    // A lone task at the root is named after the directory, both ways.
    let hello = set.join("hello");
    let gate_only = SplitRatios {
        train: 0.0,
        gate: 1.0,
        sealed: 0.0,
    };
    let alone = freeze_in_memory(&hello, &files_of(&hello), gate_only).unwrap();
    assert_eq!(alone.split.gate, ["hello"]);
    assert_eq!(
        alone.to_json(),
        FrozenTaskSet::freeze(&hello, gate_only, 5, 2)
            .unwrap()
            .to_json()
    );

    // A broken task fails both ways, with the same message.
    std::fs::remove_file(set.join("partial/tests/test.sh")).unwrap();
    let on_disk = FrozenTaskSet::freeze(&set, RATIOS, 5, 2).unwrap_err();
    let in_memory = freeze_in_memory(&set, &files_of(&set), RATIOS).unwrap_err();
    assert_eq!(in_memory.to_string(), on_disk.to_string());
    assert!(
        in_memory.to_string().contains("tests/test.sh"),
        "{in_memory}"
    );
}

/// Harbor tasks without a Dockerfile are common. The local engine needs none (its trials
/// run in the framework's jail, which never reads environment/); docker and harbor need
/// environment/Dockerfile or [environment].docker_image. The check on disk (`tasks
/// check`) and the one in memory (`recipe check`, `init`: git keeps no empty directory)
/// give the same answer, an empty environment/ counting as none.
#[test]
fn what_each_engine_needs_of_environment_is_checked_alike_on_disk_and_in_memory() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("tasks");
    let test = Some("#!/bin/bash\n");
    common::write_task(&root, "dockerfile", "", None, test);
    let bare = common::write_task(&root, "bare", "", None, test);
    std::fs::remove_dir_all(bare.join("environment")).unwrap();
    let empty = common::write_task(&root, "empty-env", "", None, test);
    std::fs::remove_file(empty.join("environment/Dockerfile")).unwrap();
    let image = common::write_task(
        &root,
        "image",
        "[environment]\ndocker_image = \"x/y:1\"\n",
        None,
        test,
    );
    std::fs::remove_dir_all(image.join("environment")).unwrap();
    let files = files_of(&root);
    let set = evaluator_harbor::split::TaskFiles {
        dir: root.clone(),
        name: "tasks",
        files: files
            .iter()
            .map(|(p, x, b)| (p.as_str(), *x, b.as_slice()))
            .collect(),
    };
    let render = |v: Vec<evaluator_harbor::Error>| -> Vec<String> {
        v.iter().map(ToString::to_string).collect()
    };
    assert_eq!(
        render(evaluator_harbor::task::check_task_set(
            &root,
            EngineKind::Local
        )),
        Vec::<String>::new()
    );
    assert_eq!(render(set.check(EngineKind::Local)), Vec::<String>::new());
    for (engine, name) in [
        (EngineKind::Docker, "docker"),
        (EngineKind::Harbor, "harbor"),
    ] {
        let on_disk = render(evaluator_harbor::task::check_task_set(&root, engine));
        let expected: Vec<String> = ["bare", "empty-env"]
            .iter()
            .map(|task| {
                format!(
                    "task {task}: the {name} engine needs environment/Dockerfile or [environment].docker_image ({})",
                    root.join(task).join("environment/Dockerfile").display()
                )
            })
            .collect();
        assert_eq!(on_disk, expected);
        assert_eq!(render(set.check(engine)), expected);
    }
    // Freezing (the engine is not known there) takes them all.
    let frozen = FrozenTaskSet::freeze_files(&set, RATIOS, 5, 1).unwrap();
    assert_eq!(frozen.task_digests.len(), 4);
}
