//! The candidate's agent as `harbor run` flags ([`job_agent`]), in the three forms Harbor
//! users already have, plus the oracle:
//!
//! * a Harbor agent class of the candidate tree (`harbor_agent = "module:Class"`):
//!   `-a module:Class` with the tree on `PYTHONPATH`;
//! * a built-in Harbor agent (`harbor_agent = "terminus-2"`): `-a NAME`, the recipe's
//!   `-m` model, and `--ak` kwargs from the recipe and the candidate's
//!   `[harbor_agent_kwargs]` (whose `./file` values already are absolute paths into the
//!   checkout, so prompts and configs evolve with the candidate);
//! * a `command` agent: evolve's adapter class (`harbor/evolve_command_agent.py`, shipped in
//!   this binary) written into the job's staging dir, `-a evolve_command_agent:CommandAgent`,
//!   told the candidate dir, argv and `[env]` through `--ak`.
//!
//! Kwargs: the recipe's `evaluator.harbor.agent_kwargs` win over the candidate's
//! `[harbor_agent_kwargs]` for the same key. The recipe is frozen in the evaluation contract
//! and sets what the experimenter fixed (a step limit, a temperature); the candidate is the
//! code being evolved and must not loosen it. The candidate fills in every other key.

use std::collections::BTreeMap;
use std::path::Path;

use super::job_agent::JobAgent;
use super::options::HarborOptions;
use crate::agent::{AgentEntry, AgentSpec, HarborAgent};
use crate::error::{Error, ErrorKind, Result};

/// The shipped adapter that runs a `command` agent under Harbor.
pub const COMMAND_AGENT_SOURCE: &str = include_str!("../../../harbor/evolve_command_agent.py");
/// Its file name in the staging dir, and its import path.
pub const COMMAND_AGENT_FILE: &str = "evolve_command_agent.py";
pub const COMMAND_AGENT_IMPORT: &str = "evolve_command_agent:CommandAgent";

/// Built-in Harbor agents that need no model (`-m`).
const MODEL_FREE: &[&str] = &["oracle", "nop"];

/// The agent half of the job's `harbor run` command line; a command agent's adapter is
/// written into `staging` (created if missing), which must outlive the job.
pub fn job_agent(spec: &AgentSpec, options: &HarborOptions, staging: &Path) -> Result<JobAgent> {
    let m = match spec {
        AgentSpec::Oracle => return Ok(JobAgent::oracle()),
        AgentSpec::Target(m) => m,
    };
    match &m.entry {
        AgentEntry::Component { .. } => Err(Error::new(
            ErrorKind::Unsupported,
            "WASI component agents cannot run under Harbor",
        )
        .hint("use the local or docker engine for a `component` agent")),
        AgentEntry::Harbor { agent, kwargs } => {
            let mut args = vec!["-a".to_string(), agent.flag_value()];
            let needs_model =
                matches!(agent, HarborAgent::BuiltIn(n) if !MODEL_FREE.contains(&n.as_str()));
            match &options.model {
                Some(model) => args.extend(["-m".to_string(), model.clone()]),
                None if needs_model => {
                    return Err(Error::new(
                        ErrorKind::Usage,
                        format!(
                            "the built-in Harbor agent {:?} needs a model, and evaluator.harbor.model is not set",
                            agent.flag_value()
                        ),
                    )
                    .at("evaluator.harbor.model")
                    .hint("set evaluator.harbor.model in the recipe (passed as -m, for example openai/gpt-4o-mini)"));
                }
                None => {}
            }
            // The candidate's kwargs, then the recipe's over them (see the module doc).
            let mut merged: BTreeMap<&str, &str> = kwargs
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            for (k, v) in &options.agent_kwargs {
                merged.insert(k, v);
            }
            for (k, v) in merged {
                args.extend(["--ak".to_string(), format!("{k}={v}")]);
            }
            // agent.toml's [env] is literal, the candidate's own text: no secret in it.
            for (k, v) in &m.env {
                args.extend(["--ae".to_string(), format!("{k}={v}")]);
            }
            let pythonpath = match agent {
                HarborAgent::Class { .. } => vec![m.dir.clone()],
                HarborAgent::BuiltIn(_) => Vec::new(),
            };
            Ok(JobAgent {
                args,
                pythonpath,
                env: Vec::new(),
            })
        }
        AgentEntry::Command(argv) => {
            if !options.agent_kwargs.is_empty() {
                return Err(Error::new(
                    ErrorKind::Usage,
                    "evaluator.harbor.agent_kwargs applies to `harbor_agent` agents only; this candidate declares a `command`",
                )
                .at("evaluator.harbor.agent_kwargs")
                .hint("remove agent_kwargs from the recipe, or give the candidate a harbor_agent"));
            }
            std::fs::create_dir_all(staging).map_err(|e| Error::io("cannot create", staging, e))?;
            let file = staging.join(COMMAND_AGENT_FILE);
            crate::beneath::write_new(staging, COMMAND_AGENT_FILE, COMMAND_AGENT_SOURCE.as_bytes())
                .map_err(|e| Error::io("cannot write", &file, e))?;
            let args = vec![
                "-a".to_string(),
                COMMAND_AGENT_IMPORT.to_string(),
                "--ak".to_string(),
                format!("candidate_dir={}", m.dir.display()),
                "--ak".to_string(),
                format!("argv={}", serde_json::to_string(argv).unwrap_or_default()),
                "--ak".to_string(),
                format!("env={}", serde_json::to_string(&m.env).unwrap_or_default()),
            ];
            Ok(JobAgent {
                args,
                pythonpath: vec![staging.to_path_buf()],
                env: Vec::new(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::AgentManifest;

    fn manifest(toml: &str, files: &[(&str, &str)]) -> (tempfile::TempDir, AgentSpec) {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("agent.toml"), toml).unwrap();
        for (name, body) in files {
            let p = d.path().join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, body).unwrap();
            if name.ends_with(".sh") {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
        }
        let spec = AgentSpec::Target(AgentManifest::load(d.path()).unwrap());
        (d, spec)
    }

    fn dir_of(spec: &AgentSpec) -> std::path::PathBuf {
        match spec {
            AgentSpec::Target(m) => m.dir.clone(),
            AgentSpec::Oracle => unreachable!(),
        }
    }

    #[test]
    fn oracle_is_dash_a_oracle() {
        let s = tempfile::tempdir().unwrap();
        let j = job_agent(&AgentSpec::Oracle, &HarborOptions::default(), s.path()).unwrap();
        assert_eq!(j.args, ["-a", "oracle"]);
        assert!(j.pythonpath.is_empty() && j.env.is_empty());
    }

    #[test]
    fn a_class_agent_puts_the_tree_on_pythonpath() {
        let (_d, spec) = manifest(
            "harbor_agent = \"pkg.agent:MyAgent\"\n[env]\nMODE = \"fast\"\n",
            &[("pkg/agent.py", "class MyAgent: pass\n")],
        );
        let s = tempfile::tempdir().unwrap();
        let j = job_agent(&spec, &HarborOptions::default(), s.path()).unwrap();
        assert_eq!(j.args, ["-a", "pkg.agent:MyAgent", "--ae", "MODE=fast"]);
        assert_eq!(j.pythonpath, [dir_of(&spec)]);
    }

    #[test]
    fn a_built_in_needs_a_model_and_merges_kwargs_recipe_first() {
        let (_d, spec) = manifest(
            "harbor_agent = \"terminus-2\"\n[harbor_agent_kwargs]\nprompt_template = \"./prompts/p.j2\"\nmax_turns = \"50\"\ntemperature = \"0.9\"\n",
            &[("prompts/p.j2", "{{ instruction }}\n")],
        );
        let s = tempfile::tempdir().unwrap();
        let e = job_agent(&spec, &HarborOptions::default(), s.path()).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Usage);
        assert!(e.message.contains("terminus-2"), "{e:?}");
        assert_eq!(e.location.as_deref(), Some("evaluator.harbor.model"));
        let mut o = HarborOptions {
            model: Some("openai/test-model".into()),
            ..HarborOptions::default()
        };
        o.agent_kwargs.insert("temperature".into(), "0".into());
        let j = job_agent(&spec, &o, s.path()).unwrap();
        let prompt = dir_of(&spec).join("prompts/p.j2");
        assert_eq!(
            j.args,
            [
                "-a".to_string(),
                "terminus-2".into(),
                "-m".into(),
                "openai/test-model".into(),
                "--ak".into(),
                "max_turns=50".into(),
                "--ak".into(),
                format!("prompt_template={}", prompt.display()),
                "--ak".into(),
                "temperature=0".into(),
            ]
        );
        assert!(j.pythonpath.is_empty());
        // nop needs no model.
        let (_d, nop) = manifest("harbor_agent = \"nop\"\n", &[]);
        assert_eq!(
            job_agent(&nop, &HarborOptions::default(), s.path())
                .unwrap()
                .args,
            ["-a", "nop"]
        );
    }

    #[test]
    fn a_command_agent_runs_through_the_shipped_adapter() {
        let (_d, spec) = manifest(
            "command = [\"./run.sh\", \"--fast\"]\n[env]\nMODE = \"x y\"\n",
            &[("run.sh", "#!/bin/sh\n")],
        );
        let s = tempfile::tempdir().unwrap();
        let staging = s.path().join("agent");
        let j = job_agent(&spec, &HarborOptions::default(), &staging).unwrap();
        assert_eq!(
            j.args,
            [
                "-a".to_string(),
                "evolve_command_agent:CommandAgent".into(),
                "--ak".into(),
                format!("candidate_dir={}", dir_of(&spec).display()),
                "--ak".into(),
                r#"argv=["./run.sh","--fast"]"#.into(),
                "--ak".into(),
                r#"env={"MODE":"x y"}"#.into(),
            ]
        );
        assert_eq!(j.pythonpath, std::slice::from_ref(&staging));
        assert_eq!(
            std::fs::read_to_string(staging.join(COMMAND_AGENT_FILE)).unwrap(),
            COMMAND_AGENT_SOURCE
        );
        let mut o = HarborOptions::default();
        o.agent_kwargs.insert("k".into(), "v".into());
        let e = job_agent(&spec, &o, &staging).unwrap_err();
        assert_eq!(e.location.as_deref(), Some("evaluator.harbor.agent_kwargs"));
    }

    #[test]
    fn a_component_is_unsupported() {
        let (_d, spec) = manifest("component = \"a.wasm\"\n", &[("a.wasm", "\0asm")]);
        let s = tempfile::tempdir().unwrap();
        let e = job_agent(&spec, &HarborOptions::default(), s.path()).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unsupported);
        assert!(e.hint.unwrap().contains("local or docker"));
    }
}
