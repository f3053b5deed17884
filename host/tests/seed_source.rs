//! Seeds from anywhere: `evolve init --seed PATH|GIT_URL[@REV]` and the recipe's
//! `target: {git: URL, rev: REV}`, against a real git repository made in a temporary
//! directory and reached by a `file://` URL. The revision is pinned to its commit in
//! gen/0's recipe, the files are frozen, so a later commit on the branch changes nothing;
//! a bad revision, an unreachable URL, a tree that is not a seed and a link out of the
//! tree each fail with a message naming them.

use super::ws::{CANARY, Exp, Spec};
use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.org"])
        .args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// An experiment whose `target/` and `tasks/` are also a seed in a git repository
/// (`seed.toml` added) at `repo/`, committed on `main` and tagged `v1`; the commit.
fn seeded() -> (Exp, String) {
    let e = Exp::new(&Spec::default());
    let repo = e.root().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    for dir in ["target", "tasks"] {
        copy_dir(&e.root().join(dir), &repo.join(dir));
    }
    std::fs::write(repo.join("seed.toml"), "summary = \"a test seed\"\n").unwrap();
    git(&repo, &["init", "--quiet"]);
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "--quiet", "-m", "seed"]);
    git(&repo, &["tag", "v1"]);
    let commit = git(&repo, &["rev-parse", "HEAD"]);
    // The local copies are gone: whatever init reads comes from the repository.
    std::fs::remove_dir_all(e.root().join("target")).unwrap();
    std::fs::remove_dir_all(e.root().join("tasks")).unwrap();
    (e, commit)
}

fn copy_dir(from: &Path, to: &Path) {
    let ok = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(ok.success());
}

fn url(e: &Exp) -> String {
    format!("file://{}", e.root().join("repo").display())
}

/// A later commit on `main` that changes the target.
fn commit_later(e: &Exp) {
    let repo = e.root().join("repo");
    std::fs::write(repo.join("target/value.txt"), "0.9\n").unwrap();
    git(&repo, &["commit", "--quiet", "-am", "later"]);
}

/// gen/0's recipe pins the commit, and holds the seed's target and tasks.
fn assert_pinned(e: &Exp, url: &str, commit: &str) {
    let recipe: serde_yaml::Value = serde_yaml::from_str(&e.gen0_file("recipe.yaml")).unwrap();
    assert_eq!(recipe["target"]["git"].as_str(), Some(url), "{recipe:?}");
    assert_eq!(recipe["target"]["rev"].as_str(), Some(commit), "{recipe:?}");
    assert_eq!(e.gen0_file("target/value.txt"), "0.1\n");
    assert!(
        e.gen0_file(&format!("evaluator/tasks/{CANARY}-0/instruction.md"))
            .contains("answer.txt")
    );
}

#[test]
fn init_by_url_at_rev_pins_the_commit_and_a_later_commit_changes_nothing() {
    let (e, commit) = seeded();
    let url = url(&e);
    let scratch = e.root().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let ran = e
        .evolve(&["init", "ws", "--recipe", "recipe.yaml", "--seed"])
        .arg(format!("{url}@v1"))
        .env("TMPDIR", &scratch)
        .ok();
    assert!(ran.stdout().contains("ws"), "{}", ran.stdout());
    assert_pinned(&e, &url, &commit);
    // The clone was removed once its files were read.
    let left: Vec<_> = std::fs::read_dir(&scratch)
        .unwrap()
        .filter_map(|d| d.ok())
        .filter(|d| d.file_name().to_string_lossy().starts_with("evolve-seed-"))
        .map(|d| d.path())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let recipe: serde_yaml::Value = serde_yaml::from_str(&e.gen0_file("recipe.yaml")).unwrap();
    // The seed's own tasks replaced the recipe's `tasks` directory (now gone).
    assert_eq!(
        recipe["evaluator"]["dataset"].as_str(),
        Some(format!("{url}@{commit}").as_str()),
        "{recipe:?}"
    );

    // The branch moves on, and the repository even disappears: the workspace runs as it
    // was pinned, from its frozen copy.
    commit_later(&e);
    std::fs::rename(e.root().join("repo"), e.root().join("repo-moved")).unwrap();
    let summary = e.evolve(&["run", "ws", "--json"]).ok().json();
    assert_eq!(summary["status"], "complete", "{summary}");
    assert_eq!(summary["genesis_score"], 0.1, "{summary}");
    assert_eq!(e.gen0_file("target/value.txt"), "0.1\n");
    e.run_ok(&["verify", "ws"]);
}

#[test]
fn a_recipe_target_git_rev_works_the_same_and_a_branch_resolves_to_its_commit() {
    let (e, first) = seeded();
    let url = url(&e);
    commit_later(&e);
    let head = git(&e.root().join("repo"), &["rev-parse", "HEAD"]);
    assert_ne!(first, head);
    let recipe = std::fs::read_to_string(e.root().join("recipe.yaml")).unwrap();
    // The target by tag, and the task set from the same seed by URL@tag.
    let pinned = recipe
        .replace(
            "target: {path: target}",
            &format!("target: {{git: \"{url}\", rev: v1}}"),
        )
        .replace("dataset: tasks", &format!("dataset: \"{url}@v1\""));
    assert_ne!(pinned, recipe);
    std::fs::write(e.root().join("pinned.yaml"), &pinned).unwrap();
    e.run_ok(&["init", "ws", "--recipe", "pinned.yaml"]);
    assert_pinned(&e, &url, &first);

    // A branch name is resolved at init, to the branch's commit then.
    let branch = recipe
        .replace(
            "target: {path: target}",
            &format!("target: {{git: \"{url}\", rev: main}}"),
        )
        .replace("dataset: tasks", &format!("dataset: \"{url}@main\""));
    std::fs::write(e.root().join("branch.yaml"), branch).unwrap();
    e.run_ok(&["init", "ws2", "--recipe", "branch.yaml"]);
    let store = evolve_snapshot::Store::open(&e.root().join("ws2")).unwrap();
    let gen0 = store.tag_target("gen/0").unwrap().unwrap();
    let text = store
        .read_blob(gen0, "recipe.yaml", 1 << 20)
        .unwrap()
        .unwrap();
    let recipe: serde_yaml::Value = serde_yaml::from_slice(&text).unwrap();
    assert_eq!(recipe["target"]["rev"].as_str(), Some(head.as_str()));
    let value = store
        .read_blob(gen0, "target/value.txt", 1 << 20)
        .unwrap()
        .unwrap();
    assert_eq!(value, b"0.9\n");
    // `recipe check` reads (and so clones) the same sources.
    e.run_ok(&["recipe", "check", "branch.yaml"]);
}

/// `evolve init --seed SEED` fails with exit 1, saying each of `says`, and leaves no
/// workspace.
fn refused(e: &Exp, seed: &str, says: &[&str]) {
    let ran = e
        .evolve(&["init", "ws", "--recipe", "recipe.yaml", "--seed", seed])
        .run();
    let err = ran.stderr();
    assert!(!ran.output.status.success(), "{}", ran.report("a failure"));
    for s in says {
        assert!(err.contains(s), "{}", ran.report(&format!("to say {s:?}")));
    }
    assert!(!e.root().join("ws").exists(), "no workspace is left");
}

#[test]
fn bad_revisions_unreachable_urls_non_seeds_and_links_out_fail_clearly() {
    let (e, _) = seeded();
    let url = url(&e);
    refused(
        &e,
        &format!("{url}@no-such-rev"),
        &[&url, "has no revision `no-such-rev`"],
    );

    let gone = format!("file://{}", e.root().join("nowhere").display());
    refused(
        &e,
        &gone,
        &[
            &format!("cannot clone {gone}:"),
            "does not appear to be a git repository",
        ],
    );

    // A repository that is neither a seed nor a target.
    let plain = e.root().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    std::fs::write(plain.join("README.md"), "just words\n").unwrap();
    git(&plain, &["init", "--quiet"]);
    git(&plain, &["add", "."]);
    git(&plain, &["commit", "--quiet", "-m", "readme"]);
    let plain_url = format!("file://{}", plain.display());
    refused(&e, &plain_url, &[&plain_url, "is not a seed", "seed.toml"]);

    // A committed link out of the tree is refused by the hostile-tree checks.
    let repo = e.root().join("repo");
    std::os::unix::fs::symlink("/etc/passwd", repo.join("target/passwd")).unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "--quiet", "-m", "a link out"]);
    refused(
        &e,
        &url,
        &["target/passwd is a symlink", "copy regular files only"],
    );
}

#[test]
fn a_local_seed_directory_gives_its_target_and_tasks() {
    let (e, _) = seeded();
    e.run_ok(&["init", "ws", "--recipe", "recipe.yaml", "--seed", "repo"]);
    assert_eq!(e.gen0_file("target/value.txt"), "0.1\n");
    assert!(e.gen0_file("target/agent.toml").contains("agent.sh"));
    assert!(
        e.gen0_file(&format!("evaluator/tasks/{CANARY}-1/instruction.md"))
            .contains("answer.txt")
    );
    let recipe = e.gen0_file("recipe.yaml");
    assert!(!recipe.contains("seed.toml"), "{recipe}");
}
