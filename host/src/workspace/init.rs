//! `evolve init`: create a workspace, commit it and tag `gen/0`.
//!
//! Generation 0 is assembled in memory (target, task set, frozen operators, normalized
//! recipe, public key) and written straight into the repository as packs: the
//! workspace holds no working copy of it. The framework reads everything from `gen/0`'s
//! commit anyway, and each stage gets its own checkout under `runs/`; a copy at the
//! root would only be a second, non-authoritative version that invites edits which
//! change nothing (`evolve checkout` writes any generation out to look at).
//!
//! Everything generation 0 holds is read and checked before the destination is touched
//! (the target and the task set are read while the operators check their configs).
//! Then the `gen/0` tag is what crash safety orders: a workspace without it is not a
//! workspace (`Workspace::open` refuses it), so everything the tag stands for is made
//! durable first, on threads that wait on the disk side by side: the signing key on one,
//! the archive's genesis events on another, the repository's directories on a third,
//! while this one hashes generation 0 and then writes its packs (each synced). A failure
//! part way removes what `init` created (the directory
//! was absent or empty); a workspace left by a killed init is visibly incomplete, and
//! `init` into the same directory refuses to overwrite it.

use super::{EngineConfig, Result, Workspace, err, key_path, now};
use crate::builtin;
use crate::layout::{self, Paths};
use crate::recipe::{self, ComponentFile, Recipe};
use crate::safe_tree::FileRead;
use crate::sandbox::{Sandbox, parse_stage};
use evaluator_harbor::split::{FrozenTaskSet, SplitName, SplitRatios, TaskFiles};
use evolve_archive::body::{FixedIdentity, IdentityField};
use evolve_archive::{Archive, EventBody, ExperimentKey, GenerationBody, GenesisBody};
use evolve_snapshot::{NewFile, Oid, Store};
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// What `evolve init` was asked for.
#[derive(Debug, Clone)]
pub struct InitRequest {
    pub dir: PathBuf,
    /// The recipe's text and the directory its relative paths are taken from.
    pub recipe_text: String,
    pub recipe_base: PathBuf,
    /// Overrides `target`: a built-in seed name, a directory (a target, or a seed with
    /// `seed.toml`, `target/` and `tasks/`), or `GIT_URL[@REV]`. A seed's `tasks/`, when it
    /// has them, also override `evaluator.dataset` unless `tasks` is given.
    pub seed: Option<String>,
    /// Overrides `evaluator.dataset` (a built-in task set name or a directory).
    pub tasks: Option<String>,
}

/// What was created.
#[derive(Debug, Clone)]
pub struct Initialized {
    pub root: PathBuf,
    pub experiment_id: String,
    pub commit: String,
    pub key_path: PathBuf,
    pub tasks: [usize; 3],
}

/// Create the workspace described by `req`.
/// A local engine that cannot contain its trials could never run this experiment: say so
/// before a workspace and a key are made for it (probed once per process, started early in
/// [`init`]; a probe still running is waited for).
fn refuse_uncontainable(engine: &EngineConfig, recipe: &Recipe) -> Result<()> {
    engine
        .refuse_uncontainable(recipe)
        .map_err(|e| err(e.message).hint(e.hint.unwrap_or_default()))
}

pub async fn init(sb: &Sandbox, req: &InitRequest) -> Result<Initialized> {
    refuse_existing(&req.dir)?;
    let shape = match recipe::parse(&req.recipe_text) {
        Ok(mut value) => {
            apply_overrides(req, &mut value);
            recipe::check_value(value)
        }
        Err(v) => recipe::Checked {
            violations: vec![v],
            ..recipe::Checked::default()
        },
    };
    // The sandbox probe starts a real jail (milliseconds): let it run while the operators
    // check their configs. `refuse_uncontainable` then waits for its answer.
    if shape
        .recipe
        .as_ref()
        .is_some_and(|r| r.evaluator.engine == "local" && !r.evaluator.unconfined_trials)
    {
        std::thread::spawn(|| {
            let _ = evaluator_harbor::engine::contain::bubblewrap();
        });
    }
    // Everything `recipe check` checks, the target and the task set read meanwhile; every
    // problem is reported before anything is created.
    // A task set named by its Harbor registry name is downloaded here, then read and
    // frozen exactly like a directory; the download goes when init returns.
    let fetched = tempfile::Builder::new()
        .prefix("evolve-init-dataset-")
        .tempdir()
        .map_err(|e| err(format!("cannot create a temporary directory: {e}")))?;
    let (checked, sources) =
        recipe::check_new(sb, shape, &req.recipe_base, Some(fetched.path())).await;
    let (Some(recipe), Some(mut normalized), Some(target), Some(tasks)) = (
        checked.recipe,
        checked.normalized,
        sources.target,
        sources.tasks,
    ) else {
        // One problem per entry (`- field: message`); a problem's own lines (a YAML
        // excerpt and its caret) follow it, indented.
        let lines: Vec<String> = checked
            .violations
            .iter()
            .flat_map(|v| {
                let text = recipe::render(v);
                let mut lines = text.lines();
                let first = lines.next().map(str::to_string);
                first
                    .into_iter()
                    .chain(lines.map(|l| format!("  {l}")))
                    .collect::<Vec<_>>()
            })
            .collect();
        return Err(err("the recipe is invalid:")
            .details(lines)
            .hint("`evolve recipe check RECIPE` lists the same problems"));
    };
    // A git source is pinned: gen/0's recipe names the commit its revision resolved to,
    // so the experiment says exactly what it started from (the files are frozen below).
    if let Some(commit) = &sources.target_commit
        && let Some(t) = normalized.get_mut("target").and_then(Value::as_object_mut)
    {
        t.insert("rev".into(), json!(commit));
    }
    if let Some(pinned) = &sources.dataset_pinned
        && let Some(e) = normalized
            .get_mut("evaluator")
            .and_then(Value::as_object_mut)
    {
        e.insert("dataset".into(), json!(pinned));
    }
    // Everything generation 0 holds is read and checked before the destination is touched.
    let mut files = Gen0::default();
    for f in target {
        files.add(
            &format!("{}/{}", layout::TARGET_DIR, f.path),
            f.executable,
            f.bytes,
        );
    }
    let mut engine = EngineConfig::from_recipe(&recipe);
    engine
        .check_harbor(&recipe)
        .map_err(|e| err(e).hint("`evolve recipe check RECIPE` lists every problem"))?;
    refuse_uncontainable(&engine, &recipe)?;
    let task_set = add_evaluator(&recipe, &mut engine, tasks, &mut files)?;
    add_operators(
        &recipe,
        checked.component_files,
        &req.recipe_base,
        &mut files,
    )?;
    files.text(
        layout::RECIPE_FILE,
        &format!(
            "# The normalized recipe of this experiment (every default filled in). The\n# framework reads it from gen/0's commit.\n{}",
            serde_yaml::to_string(&normalized)
                .map_err(|e| err(format!("cannot render the recipe: {e}")))?
        ),
    );
    files.text(layout::GITIGNORE, layout::GITIGNORE_TEXT);
    let experiment_id = experiment_id(&recipe.experiment.name);
    let key_path = key_path(&experiment_id)?;

    let created = !req.dir.exists();
    std::fs::create_dir_all(&req.dir)
        .map_err(|e| err(format!("cannot create {}: {e}", req.dir.display())))?;
    let root = std::fs::canonicalize(&req.dir)
        .map_err(|e| err(format!("cannot resolve {}: {e}", req.dir.display())))?;
    let made = Made {
        root,
        created,
        key_path,
        key_made: AtomicBool::new(false),
        experiment_id,
    };
    let result = create(&made, &recipe, &engine, &task_set, files);
    if result.is_err() {
        made.undo();
    }
    let commit = result?;
    let sizes = [SplitName::Train, SplitName::Gate, SplitName::Sealed]
        .map(|s| task_set.split.members(s).len());
    Ok(Initialized {
        root: made.root.clone(),
        experiment_id: made.experiment_id.clone(),
        commit: commit.to_string(),
        key_path: made.key_path.clone(),
        tasks: sizes,
    })
}

/// What `init` creates on disk, so that a failure part way removes it again: the
/// directory was absent or empty, so nothing else is lost.
struct Made {
    root: PathBuf,
    /// Whether `init` created `root` (else it was an empty directory).
    created: bool,
    key_path: PathBuf,
    /// Whether `init` created the key (a key it did not create is never removed).
    key_made: AtomicBool,
    experiment_id: String,
}

impl Made {
    fn undo(&self) {
        let _ = std::fs::remove_dir_all(self.root.join(".git"));
        let _ = std::fs::remove_dir_all(self.root.join(layout::STATE_DIR));
        if self.created {
            // Not recursive: whatever else appeared in it meanwhile is not init's.
            let _ = std::fs::remove_dir(&self.root);
        }
        if self.key_made.load(Ordering::Relaxed) {
            let _ = std::fs::remove_file(&self.key_path);
            let _ = std::fs::remove_file(super::keys::meta_path(&self.key_path));
        }
    }
}

/// The durable steps run side by side. This thread assembles and hashes generation 0 in
/// memory, which makes its commit and tree ids known before anything is written, then
/// writes its packs (synced) into the repository another thread has created meanwhile.
/// A third saves the signing key and creates the archive (each synced), and appends the
/// genesis events once this one sends it the ids. The `gen/0` tag comes last, once all
/// are durable (see the module comment). Returns the commit.
fn create(
    made: &Made,
    recipe: &Recipe,
    engine: &EngineConfig,
    task_set: &FrozenTaskSet,
    mut files: Gen0,
) -> Result<Oid> {
    let key = ExperimentKey::generate(&made.experiment_id)
        .map_err(|e| err(format!("cannot create the signing key: {e}")))?;
    files.add(layout::PUBLIC_KEY_FILE, false, key.public().file_bytes());
    let files = files.into_list();
    let (send_ids, ids) = std::sync::mpsc::sync_channel(1);
    let archive_key = key.clone();
    let (written, saved, genesis) = std::thread::scope(|s| {
        // Each durable step waits on the disk on a thread of its own: the key, the
        // archive, the repository's directories. Generation 0 is hashed meanwhile.
        let saved = s.spawn(|| save_key(made, &key));
        let genesis = s.spawn(|| write_genesis(made, archive_key, &recipe.experiment.name, ids));
        let store = s.spawn(|| {
            Store::init(&made.root).map_err(|e| err(format!("cannot create the repository: {e}")))
        });
        let written = write_repository(engine, task_set, &files, send_ids, || rejoin(store));
        (written, rejoin(saved), rejoin(genesis))
    });
    // The repository's error first: without its ids the archive could not be written.
    let (store, commit) = written?;
    saved?;
    genesis?;
    store
        .tag(&layout::tag_name("0"), commit)
        .map_err(|e| err(format!("cannot tag gen/0: {e}")))?;
    Ok(commit)
}

/// What the archive's genesis events record of generation 0.
struct Gen0Ids {
    identity: FixedIdentity,
    commit: Oid,
    tree: Oid,
}

/// Assemble generation 0 from `files`, send its ids to [`write_genesis`], then write it
/// into the repository `store` gives (once created).
fn write_repository(
    engine: &EngineConfig,
    task_set: &FrozenTaskSet,
    files: &[NewFile<'_>],
    send_ids: std::sync::mpsc::SyncSender<Gen0Ids>,
    store: impl FnOnce() -> Result<Store>,
) -> Result<(Store, Oid)> {
    let first = Store::prepare_first(files, "evolve: generation 0")
        .map_err(|e| err(format!("cannot commit generation 0: {e}")))?;
    let evaluator_tree = first
        .entry(layout::EVALUATOR_DIR)
        .ok_or_else(|| err("generation 0 has no evaluator/ tree"))?;
    let identity = FixedIdentity {
        evaluator_fingerprint: evaluator_tree.to_string(),
        task_set_hash: engine.task_set_hash(task_set, engine.split())?,
        runtime_fingerprint: engine.runtime_fingerprint(),
    };
    // Unsent (on an error above), the other thread stops without appending anything.
    let _ = send_ids.send(Gen0Ids {
        identity,
        commit: first.commit(),
        tree: first.tree(),
    });
    let store = store()?;
    store
        .write_first(&first)
        .map_err(|e| err(format!("cannot commit generation 0: {e}")))?;
    Ok((store, first.commit()))
}

/// A scoped thread's result; its panic is re-raised here, as if on this thread.
fn rejoin<T>(thread: std::thread::ScopedJoinHandle<'_, T>) -> T {
    thread
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// Save the signing key outside the workspace (synced).
fn save_key(made: &Made, key: &ExperimentKey) -> Result<()> {
    key.save(&made.key_path)
        .map_err(|e| err(format!("cannot create the signing key: {e}")))?;
    made.key_made.store(true, Ordering::Relaxed);
    // Which workspace the key is for, so `evolve keys prune` can tell when it is gone.
    super::keys::write_record(
        &made.key_path,
        &super::keys::KeyRecord {
            schema: super::keys::META_SCHEMA.into(),
            experiment: made.experiment_id.clone(),
            workspace: made.root.clone(),
            created: now(),
        },
    )
}

/// Create the archive, then, given generation 0's ids, append the genesis event and
/// generation 0's (each synced).
fn write_genesis(
    made: &Made,
    key: ExperimentKey,
    recipe_name: &str,
    ids: std::sync::mpsc::Receiver<Gen0Ids>,
) -> Result<()> {
    let paths = Paths::new(&made.root);
    let mut archive = Archive::open(&paths.archive(), &made.experiment_id, key)
        .map_err(|e| err(format!("cannot create the archive: {e}")))?;
    let Ok(gen0_ids) = ids.recv() else {
        return Err(err("generation 0 was not assembled"));
    };
    let genesis = GenesisBody {
        experiment: Some(made.experiment_id.clone()),
        fixed_identity: Some(IdentityField(Some(gen0_ids.identity))),
        recipe: Some(recipe_name.to_string()),
        ..GenesisBody::default()
    };
    let gen0 = GenerationBody {
        parent: None,
        commit: Some(gen0_ids.commit.to_string()),
        tree: Some(gen0_ids.tree.to_string()),
        ..GenerationBody::default()
    };
    for (event_type, genid, body) in [
        (GenesisBody::TYPE, None, genesis.to_map()),
        (GenerationBody::TYPE, Some("0"), gen0.to_map()),
    ] {
        archive
            .append(event_type, genid, body, &now())
            .map_err(|e| err(format!("cannot write the archive: {e}")))?;
    }
    Ok(())
}

/// `init` never writes into a directory that already holds anything.
fn refuse_existing(dir: &Path) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    if Workspace::open(dir).is_ok()
        || dir.join(".git").exists()
        || dir.join(layout::STATE_DIR).exists()
    {
        return Err(err(format!(
            "{} is already a workspace; refusing to initialize over it",
            dir.display()
        ))
        .hint("choose a new directory, or continue this one with `evolve run`"));
    }
    let mut entries =
        std::fs::read_dir(dir).map_err(|e| err(format!("cannot read {}: {e}", dir.display())))?;
    if entries.next().is_some() {
        return Err(err(format!(
            "{} is not empty; refusing to initialize into it",
            dir.display()
        ))
        .hint("evolve init creates a new directory"));
    }
    Ok(())
}

/// `--seed` and `--tasks`, applied to the recipe as written, before it is checked: the
/// checks and generation 0 see what the workspace will use.
fn apply_overrides(req: &InitRequest, recipe: &mut Value) {
    let Some(recipe) = recipe.as_object_mut() else {
        return; // not a mapping: the shape check says so
    };
    // The seed's own task set, when `--seed` names a seed that has one and `--tasks` is
    // not given: `GIT_URL@REV` (the clone is shared with the target's) or its directory.
    let mut seed_tasks = None;
    if let Some(seed) = &req.seed {
        let target = if builtin::seed(seed).is_some() {
            json!({ "seed": seed })
        } else if recipe::source::is_git_url(seed) {
            let src = recipe::source::parse_git(seed);
            // A clone that fails here fails again when the target is read, which reports
            // it; then no task set is taken from it.
            if let Ok(co) = recipe::source::checkout(&src)
                && recipe::source::git_tasks(&src, &co).is_ok()
            {
                seed_tasks = Some(seed.clone());
            }
            match &src.rev {
                Some(rev) => json!({ "git": src.url, "rev": rev }),
                None => json!({ "git": src.url }),
            }
        } else {
            let dir = recipe::resolve(&req.recipe_base, seed);
            if recipe::source::seed_layout(&dir).is_some_and(|l| l.tasks.is_some()) {
                seed_tasks = Some(
                    std::path::absolute(&dir)
                        .unwrap_or(dir)
                        .to_string_lossy()
                        .into_owned(),
                );
            }
            json!({ "path": seed })
        };
        recipe.insert("target".into(), target);
    }
    if let Some(tasks) = req.tasks.as_ref().or(seed_tasks.as_ref()) {
        match recipe.get_mut("evaluator").and_then(Value::as_object_mut) {
            Some(evaluator) => {
                evaluator.insert("dataset".into(), json!(tasks));
            }
            None => {
                recipe.insert("evaluator".into(), json!({ "dataset": tasks }));
            }
        }
    }
}

/// A short unique experiment id: the recipe's name (made tag- and file-safe) and 8 random
/// hex digits, so two workspaces of one recipe never share a key.
fn experiment_id(name: &str) -> String {
    let mut safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    if !safe.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        safe.insert(0, 'x');
    }
    let mut bytes = [0u8; 4];
    let _ = getrandom::fill(&mut bytes);
    format!("{safe}-{}", evolve_archive::canonical::hex(&bytes))
}

/// The files of generation 0. A later file at a path replaces an earlier one.
#[derive(Default)]
struct Gen0 {
    files: Vec<NewFile<'static>>,
}

impl Gen0 {
    fn add(&mut self, path: &str, executable: bool, bytes: Vec<u8>) {
        self.add_known(path, executable, Cow::Owned(bytes), None);
    }

    /// Add a file whose bytes may be borrowed (an embedded component's), and whose blob
    /// id may be known already.
    fn add_known(
        &mut self,
        path: &str,
        executable: bool,
        bytes: Cow<'static, [u8]>,
        id: Option<Oid>,
    ) {
        self.files.push(NewFile {
            path: path.to_string(),
            executable,
            bytes,
            id,
        });
    }

    fn text(&mut self, path: &str, text: &str) {
        self.add(path, false, text.as_bytes().to_vec());
    }

    /// The files by path, the last added of each path.
    fn into_list(mut self) -> Vec<NewFile<'static>> {
        // Stable: files of one path stay in the order they were added.
        self.files.sort_by(|a, b| a.path.cmp(&b.path));
        let mut list: Vec<NewFile<'static>> = Vec::with_capacity(self.files.len());
        for file in self.files {
            if list.last().is_some_and(|last| last.path == file.path) {
                list.pop();
            }
            list.push(file);
        }
        list
    }
}

/// Put the task set into generation 0 and freeze it, from memory: the digests are
/// those of the files exactly as they will be checked out under `evaluator/tasks/`
/// (files only: git keeps no empty directory). The engine file follows, with its static
/// task sample chosen from the frozen split.
fn add_evaluator(
    recipe: &Recipe,
    engine: &mut EngineConfig,
    (origin, tasks): (PathBuf, Vec<FileRead>),
    files: &mut Gen0,
) -> Result<FrozenTaskSet> {
    let frozen = freeze(recipe, engine.split(), &origin, &tasks)?;
    engine.freeze_sample(&frozen)?;
    for f in tasks {
        files.add(
            &format!("{}/{}", layout::TASKS_DIR, f.path),
            f.executable,
            f.bytes,
        );
    }
    files.text(layout::TASK_SET_FILE, &(frozen.to_json() + "\n"));
    files.text(
        layout::ENGINE_FILE,
        &(serde_json::to_string_pretty(engine).unwrap_or_default() + "\n"),
    );
    Ok(frozen)
}

fn freeze(
    recipe: &Recipe,
    primary: SplitName,
    origin: &Path,
    tasks: &[FileRead],
) -> Result<FrozenTaskSet> {
    let e = &recipe.evaluator;
    let ratios = SplitRatios {
        train: e.splits.train,
        gate: e.splits.gate,
        sealed: e.splits.sealed,
    };
    let set = TaskFiles {
        dir: origin.to_path_buf(),
        name: recipe::TASK_SET_NAME,
        files: tasks
            .iter()
            .map(|f| (f.path.as_str(), f.executable, f.bytes.as_slice()))
            .collect(),
    };
    let frozen = FrozenTaskSet::freeze_files(&set, ratios, e.splits.seed, e.repetitions)
        .map_err(|e| err(format!("cannot freeze the task set: {e}")))?;
    if frozen.split.members(primary).is_empty() {
        let name = primary.as_str();
        let ratio = match primary {
            SplitName::Train => e.splits.train,
            SplitName::Gate => e.splits.gate,
            SplitName::Sealed => e.splits.sealed,
        };
        return Err(err(format!(
            "the {name} split is empty ({} tasks, {name} ratio {ratio}); candidates are evaluated on it (evaluator.evaluation_split)",
            frozen.task_digests.len(),
        ))
        .hint(format!("raise evaluator.splits.{name} or add tasks")));
    }
    Ok(frozen)
}

/// Freeze every bound operator into `operators/<stage>.wasm`, with a manifest of digests
/// and sources: a built-in one, or the component file the recipe check read (`checked`,
/// by stage).
fn add_operators(
    recipe: &Recipe,
    mut checked: BTreeMap<String, ComponentFile>,
    base: &Path,
    files: &mut Gen0,
) -> Result<()> {
    let mut manifest = Map::new();
    let mut scripts = BTreeMap::new();
    for (stage, binding) in &recipe.operators {
        if parse_stage(stage).is_none() {
            continue;
        }
        let op = operator_bytes(stage, &binding.operator, &mut checked)?;
        let rel = layout::component_path(stage);
        let mut entry = json!({
            "file": rel,
            "operator": binding.operator,
            "sha256": op.sha256,
            "bytes": op.bytes.len(),
            "source": op.source,
        });
        files.add_known(&rel, false, op.bytes, op.blob_id);
        if let Some(script) = install_script(stage, binding, base, files, &mut scripts)? {
            entry["script"] = script;
        }
        manifest.insert(stage.clone(), entry);
    }
    files.text(
        layout::COMPONENTS_MANIFEST,
        &(serde_json::to_string_pretty(
            &json!({"schema": "evolve.components.v1", "components": manifest}),
        )
        .unwrap_or_default()
            + "\n"),
    );
    Ok(())
}

/// For an `operator: script` binding, put its script at `config.source` in gen/0: the
/// shipped script `config.builtin`, else the file at `source` next to the recipe. Two
/// bindings may share a source only with the same text. Returns the manifest's record
/// of it.
fn install_script(
    stage: &str,
    binding: &recipe::Binding,
    base: &Path,
    files: &mut Gen0,
    installed: &mut BTreeMap<String, String>,
) -> Result<Option<Value>> {
    if binding.operator != crate::scripts::SCRIPT_OPERATOR {
        return Ok(None);
    }
    let at = format!("operators.{stage}.config");
    let source = binding
        .config
        .get("source")
        .and_then(Value::as_str)
        .ok_or_else(|| err(format!("{at}.source: a script operator names its script")))?;
    crate::scripts::check_path(source).map_err(|e| err(format!("{at}.source: {e}")))?;
    let (text, origin) = match binding.config.get("builtin").and_then(Value::as_str) {
        Some(name) => (
            crate::scripts::builtin(stage, name)
                .ok_or_else(|| err(format!("{at}.builtin: no shipped {stage} script `{name}`")))?
                .to_string(),
            format!("builtin:{stage}/{name}"),
        ),
        None => {
            let path = recipe::resolve(base, source);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                err(format!("{at}.source: cannot read {} ({e})", path.display()))
                    .hint("set config.builtin to a shipped script, or put the script at that path next to the recipe")
            })?;
            (text, format!("file:{}", path.display()))
        }
    };
    if let Some(other) = installed.get(source)
        && *other != text
    {
        return Err(err(format!(
            "{at}.source: {source} is also another binding's script, with different text"
        )));
    }
    files.text(source, &text);
    installed.insert(source.to_string(), text.clone());
    Ok(Some(json!({
        "file": source,
        "sha256": evolve_archive::sha256_hex(text.as_bytes()),
        "source": origin,
    })))
}

/// A component a binding names.
pub struct OperatorFile {
    /// Borrowed for an embedded component.
    pub bytes: Cow<'static, [u8]>,
    /// Where it came from: `file:PATH` or `builtin:STAGE/NAME@evolve-VERSION`.
    pub source: String,
    /// Hex SHA-256 of `bytes`.
    pub sha256: String,
    /// Its git blob id when known without hashing (an embedded component's).
    pub blob_id: Option<Oid>,
}

/// The component a binding names: the file the recipe check read for this stage (it
/// reads one exactly when the binding names a path; taken from `checked`), else a
/// built-in one.
pub fn operator_bytes(
    stage: &str,
    name: &str,
    checked: &mut BTreeMap<String, ComponentFile>,
) -> Result<OperatorFile> {
    if let Some(file) = checked.remove(stage) {
        return Ok(OperatorFile {
            sha256: evolve_archive::canonical::hex(&file.sha256),
            bytes: Cow::Owned(file.bytes),
            source: format!("file:{}", file.path.display()),
            blob_id: None,
        });
    }
    let op = builtin::find(stage, name).ok_or_else(|| {
        err(format!(
            "unknown {stage} operator `{name}` (operators.{stage}.operator)"
        ))
    })?;
    Ok(OperatorFile {
        bytes: Cow::Borrowed(op.bytes),
        source: format!(
            "builtin:{stage}/{name}@evolve-{}",
            env!("CARGO_PKG_VERSION")
        ),
        sha256: evolve_archive::canonical::hex(&op.sha256),
        blob_id: Oid::from_bytes(&op.blob_id).ok(),
    })
}
