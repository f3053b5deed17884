//! Removing what a Harbor job left on this machine's Docker daemon. Harbor's docker
//! environment names each trial's Compose project `sanitize(trial_name + "__env")`
//! (reference §2.2) and labels its containers and network with it; a job that was killed, or
//! whose cleanup failed, leaves them behind. Every trial of a job has a `config.json` with its
//! `trial_name` as soon as it starts, so the job directory says which projects to remove.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

/// Harbor's Compose project name for a trial: lowercase, every character outside
/// `[a-z0-9_-]` replaced by `-`, and a `0` in front unless it starts alphanumeric.
pub fn compose_project(trial_name: &str) -> String {
    let raw = format!("{trial_name}__env").to_lowercase();
    let mut s: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if !s.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        s.insert(0, '0');
    }
    s
}

/// The Compose projects of every trial that started in `job_dir` (each
/// `<job>/<trial>/config.json` that names a `trial_name`).
pub fn job_projects(job_dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let Ok(entries) = std::fs::read_dir(job_dir) else {
        return out;
    };
    for e in entries.flatten() {
        let cfg = e.path().join("config.json");
        let name = std::fs::read(&cfg)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v.get("trial_name")?.as_str().map(str::to_string));
        if let Some(n) = name {
            out.insert(compose_project(&n));
        }
    }
    out
}

/// `docker <args>`'s stdout lines, or none when docker is missing or fails (there is
/// nothing to remove on a machine whose daemon does not answer).
fn docker_lines(args: &[&str]) -> Vec<String> {
    Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn docker_quiet(args: &[String]) {
    let _ = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The ids of the objects `list` prints (`<id> <compose project label>` per line) that belong
/// to one of `projects`.
fn owned_ids(list: &[&str], projects: &BTreeSet<String>) -> Vec<String> {
    docker_lines(list)
        .iter()
        .filter_map(|l| {
            let (id, project) = l.split_once(' ')?;
            projects.contains(project.trim()).then(|| id.to_string())
        })
        .collect()
}

/// Remove every container, network and built image of `projects`; synchronous, so that a
/// drop guard can call it. One listing per kind of object, whatever the number of trials.
pub fn remove_projects(projects: &BTreeSet<String>) {
    if projects.is_empty() {
        return;
    }
    const LABEL: &str = "{{.ID}} {{.Label \"com.docker.compose.project\"}}";
    let containers = owned_ids(&["ps", "-a", "--format", LABEL], projects);
    if !containers.is_empty() {
        let mut args = vec!["rm".to_string(), "-f".into(), "-v".into()];
        args.extend(containers);
        docker_quiet(&args);
    }
    let networks = owned_ids(&["network", "ls", "--format", LABEL], projects);
    if !networks.is_empty() {
        let mut args = vec!["network".to_string(), "rm".into()];
        args.extend(networks);
        docker_quiet(&args);
    }
    // Compose names the image it builds for a trial `<project>-main` (reference §2.2) and
    // removes it with `down --rmi local`, which an interrupted trial never reaches.
    let images: Vec<String> = docker_lines(&["image", "ls", "--format", "{{.Repository}}"])
        .into_iter()
        .filter(|repo| {
            repo.strip_suffix("-main")
                .is_some_and(|p| projects.contains(p))
        })
        .collect();
    if !images.is_empty() {
        let mut args = vec!["image".to_string(), "rm".into(), "-f".into()];
        args.extend(images);
        docker_quiet(&args);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_names_follow_harbors_sanitizing() {
        assert_eq!(compose_project("hello__AbC12x"), "hello__abc12x__env");
        assert_eq!(compose_project("my.task__Q"), "my-task__q__env");
        assert_eq!(compose_project("_odd__x"), "0_odd__x__env");
    }

    #[test]
    fn projects_come_from_trial_configs() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("hello__AbC");
        std::fs::create_dir_all(&t).unwrap();
        std::fs::write(t.join("config.json"), r#"{"trial_name": "hello__AbC"}"#).unwrap();
        std::fs::write(d.path().join("config.json"), r#"{"job_name": "j"}"#).unwrap();
        let p = job_projects(d.path());
        assert_eq!(p.into_iter().collect::<Vec<_>>(), ["hello__abc__env"]);
    }
}
