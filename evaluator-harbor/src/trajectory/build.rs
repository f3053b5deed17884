//! Building a trial's trajectory from the gateway's log, merged with the agent's own.
