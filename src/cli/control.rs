//! `nodeward converge` and `nodeward kubelet restart|stop|start|retry|release` (`show` is `kubelet_show`): requests to the running daemon
//! over its control socket. Without a daemon they fail with the reason (exit 1).

use nodeward::daemon::control::{self, Answer, Request};
use nodeward::kubelet::supervisor::Operator;

use super::env::Env;
use super::exit::Outcome;
use super::output::{Doc, Output, emit};

#[derive(clap::Subcommand)]
pub enum KubeletCommand {
    /// Stop the kubelet gracefully and start a new container at once; returns when it runs.
    Restart {
        #[arg(long, value_enum, default_value_t = Output::Human)]
        output: Output,
    },
    /// Stop the kubelet and keep it stopped until `nodeward kubelet start` (or a daemon restart).
    Stop {
        #[arg(long, value_enum, default_value_t = Output::Human)]
        output: Output,
    },
    /// Start the kubelet again after `stop`; returns when it runs.
    Start {
        #[arg(long, value_enum, default_value_t = Output::Human)]
        output: Output,
    },
    /// Try the kubelet spec a rollback held back again (on trial: rolled back again if it is not
    /// healthy within its grace period).
    Retry {
        #[arg(long, value_enum, default_value_t = Output::Human)]
        output: Output,
    },
    /// Give back the FleetLock slot this node holds (kept after a rollback, the rollout halted
    /// here): the other nodes of the group may go on.
    Release {
        #[arg(long, value_enum, default_value_t = Output::Human)]
        output: Output,
    },
    /// The engine's exact command line, image and digest, container, restarts with their exit
    /// codes and times, and what the kubelet waits for (read-only; works without the daemon).
    Show {
        #[arg(long, value_enum, default_value_t = Output::Human)]
        output: Output,
    },
}

pub fn kubelet(env: &Env, cmd: KubeletCommand) -> anyhow::Result<Outcome> {
    let (op, output) = match cmd {
        KubeletCommand::Restart { output } => (Operator::Restart, output),
        KubeletCommand::Stop { output } => (Operator::Stop, output),
        KubeletCommand::Start { output } => (Operator::Start, output),
        KubeletCommand::Retry { output } => (Operator::Retry, output),
        KubeletCommand::Release { output } => (Operator::Release, output),
        KubeletCommand::Show { output } => return super::kubelet_show::show(env, output),
    };
    ask(env, Request::Kubelet(op), output)
}

/// `nodeward converge`: a converge now, answered with its result.
pub fn converge(env: &Env, output: Output) -> anyhow::Result<Outcome> {
    ask(env, Request::Converge, output)
}

fn ask(env: &Env, req: Request, output: Output) -> anyhow::Result<Outcome> {
    let answer = control::ask(env.root(), req).unwrap_or_else(|e| Answer {
        ok: false,
        message: e.to_string(),
    });
    emit(output, Doc::Answer, &answer, || format!("{}\n", answer.message))?;
    Ok(if answer.ok { Outcome::Ok } else { Outcome::Failed })
}
