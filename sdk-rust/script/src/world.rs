//! The stage world's own `model` and `tasks` imports as the [`Model`] and [`Tasks`] a
//! script is granted. A component hands these in only when its world imports them; a
//! component that never names one links none of its imports (the component would not
//! build against its world otherwise).

use crate::grants::{Model, Tasks};
use evolve_operator_sdk::model::{self, ChatRequest, ChatResponse, ModelError};
use evolve_operator_sdk::tasks::{self, RunRequest, TasksError, TrialReport};

/// The world's `model` import (analyze, mutate, reflect).
pub struct WorldModel;

impl Model for WorldModel {
    fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ModelError> {
        model::chat(request)
    }
}

/// The world's `tasks` import (rollout, mutate, validate): train tasks only.
pub struct WorldTasks;

impl Tasks for WorldTasks {
    fn train_tasks(&self) -> Vec<String> {
        tasks::train_tasks()
    }

    fn run(&self, request: &RunRequest) -> Result<Vec<TrialReport>, TasksError> {
        tasks::run(request)
    }
}
