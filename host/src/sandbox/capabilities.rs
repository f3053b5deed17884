//! The host capabilities an operator can import: `model` and `tasks`.
//!
//! The sandbox only routes calls; what a capability does is decided by whoever builds
//! the [`Capabilities`] for a call (the lifecycle driver, with the experiment's model
//! endpoint, budget and train split). A stage whose world does not import a capability
//! never has it linked, so a component importing it is refused before it runs.

use super::bindings::model::{
    self, ChatRequest, ChatResponse, Completion, CompletionRequest, ModelError,
};
use super::bindings::tasks::{self, RunRequest, TasksError, TrialReport};
use super::bindings::types;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Chat completion, metered and logged by the implementation.
pub trait ModelBackend: Send + Sync {
    fn chat(&self, request: ChatRequest) -> BoxFuture<'_, Result<ChatResponse, ModelError>>;
    /// A completion with tools and a named model (`model.complete`).
    fn complete(&self, request: CompletionRequest)
    -> BoxFuture<'_, Result<Completion, ModelError>>;
}

/// Trials of the calling stage's candidate on train tasks only.
pub trait TaskBackend: Send + Sync {
    fn train_tasks(&self) -> Vec<String>;
    fn run(&self, request: RunRequest) -> BoxFuture<'_, Result<Vec<TrialReport>, TasksError>>;
}

/// The capabilities granted to one call.
#[derive(Clone)]
pub struct Capabilities {
    pub model: Arc<dyn ModelBackend>,
    pub tasks: Arc<dyn TaskBackend>,
}

impl Default for Capabilities {
    fn default() -> Self {
        Capabilities {
            model: Arc::new(NoModel),
            tasks: Arc::new(NoTasks),
        }
    }
}

/// The answer when an experiment has no model configured.
pub struct NoModel;

impl ModelBackend for NoModel {
    fn chat(&self, _: ChatRequest) -> BoxFuture<'_, Result<ChatResponse, ModelError>> {
        Box::pin(async { Err(no_model()) })
    }
    fn complete(&self, _: CompletionRequest) -> BoxFuture<'_, Result<Completion, ModelError>> {
        Box::pin(async { Err(no_model()) })
    }
}

fn no_model() -> ModelError {
    ModelError::Unavailable(
        "no model is configured for this experiment (set `model:` in the recipe)".into(),
    )
}

/// The answer when no train tasks are available to this call.
pub struct NoTasks;

impl TaskBackend for NoTasks {
    fn train_tasks(&self) -> Vec<String> {
        Vec::new()
    }
    fn run(&self, _: RunRequest) -> BoxFuture<'_, Result<Vec<TrialReport>, TasksError>> {
        Box::pin(async {
            Err(TasksError::Unavailable(
                "no train tasks are available to this call".into(),
            ))
        })
    }
}

impl types::Host for Capabilities {}

impl model::Host for Capabilities {
    async fn chat(&mut self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        self.model.chat(request).await
    }
    async fn complete(&mut self, request: CompletionRequest) -> Result<Completion, ModelError> {
        self.model.complete(request).await
    }
}

impl tasks::Host for Capabilities {
    async fn train_tasks(&mut self) -> Vec<String> {
        self.tasks.train_tasks()
    }
    async fn run(&mut self, request: RunRequest) -> Result<Vec<TrialReport>, TasksError> {
        // Refuse names outside the train split here, whatever the backend does, with
        // a message that does not say whether the name exists elsewhere.
        let train = self.tasks.train_tasks();
        if let Some(bad) = request.tasks.iter().find(|t| !train.contains(t)) {
            return Err(TasksError::UnknownTask(format!(
                "`{bad}` is not a train task"
            )));
        }
        if request.tasks.is_empty() || request.repetitions == 0 {
            return Err(TasksError::InvalidRequest(
                "name at least one task and at least one repetition".into(),
            ));
        }
        self.tasks.run(request).await
    }
}
