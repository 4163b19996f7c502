//! `long T`: one run that asks T questions in a row, answered `answer-k`;
//! the cost of a resume must stay flat as the conversation grows.
//!
//! Two conversations are timed: a warm one, every resume in the agent that
//! suspended the run (its conversation kept in memory), and a cold one,
//! resumed by two agents on two store handles in turn, as when every answer
//! reaches another process: each resume reads the conversation back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use askloop::Agent;
use serde::{Serialize, Serializer};

use super::{Failures, IMPL, Report};
use crate::cli::Target;
use crate::environment::{Environment, Workload};
use crate::measure;
use crate::resume_clock::{ResumeClock, Spent};
use crate::run;

/// Resumes around a turn whose median is reported.
const WINDOW: usize = 5;

#[derive(Debug, Serialize)]
struct Figures {
    #[serde(rename = "impl")]
    implementation: &'static str,
    mode: &'static str,
    t: usize,
    resume_ms_at: ResumePoints,
    cold_resume_ms_at: ResumePoints,
    total_s: f64,
    db_bytes: Option<u64>,
    peak_rss_mb: f64,
    ok: usize,
}

/// Turn -> median resume time, serialised as a JSON object in turn order.
#[derive(Debug)]
struct ResumePoints(Vec<(usize, f64)>);

impl Serialize for ResumePoints {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(turn, ms)| (turn.to_string(), ms)))
    }
}

/// What `--detail` adds on stderr: the store's share of each resume (the
/// run row: get, claim, update; and the read of the whole conversation),
/// the model call's (the request carrying the conversation, the fake model
/// reading it, its reply streamed back), and what is left: askloop's own.
#[derive(Debug, Serialize)]
struct Detail {
    detail: &'static str,
    resume_ms_at: ResumePoints,
    store_row_ms_at: ResumePoints,
    /// Of the run row's time, reading it (`get`); the rest is the claim and
    /// the update, each with its commit.
    store_row_read_ms_at: ResumePoints,
    store_messages_ms_at: ResumePoints,
    model_ms_at: ResumePoints,
    rest_ms_at: ResumePoints,
    /// What a server adds: the resume's last `step-finish` (which carries
    /// the conversation, as Mastra's does) written as JSON, and its size.
    step_finish_json_ms_at: ResumePoints,
    step_finish_kb_at: ResumePoints,
}

/// The median of the resumes around each reported turn.
fn medians_at(t: usize, per_turn: &[Duration]) -> Vec<(usize, f64)> {
    points(t)
        .into_iter()
        .filter_map(|point| {
            let turns = window(point, t);
            let measured = per_turn.get(turns.start() - 1..(*turns.end()).min(per_turn.len()))?;
            (!measured.is_empty()).then(|| (point, measure::median_ms(measured)))
        })
        .collect()
}

/// The turns reported: 1, 10, 100 and T, leaving out those past T (a run of
/// 12 turns reports 1, 10 and 12).
fn points(t: usize) -> Vec<usize> {
    let mut points: Vec<usize> = [1, 10, 100].into_iter().filter(|p| *p < t).collect();
    points.push(t);
    points
}

/// The 1-based turns whose resumes make a point's median: the 5 around it,
/// shifted to stay within 1..=T.
fn window(point: usize, t: usize) -> std::ops::RangeInclusive<usize> {
    let first = point
        .saturating_sub(WINDOW / 2)
        .clamp(1, t.saturating_sub(WINDOW - 1).max(1));
    first..=(first + WINDOW - 1).min(t)
}

fn question(k: usize, t: usize) -> String {
    format!("Question {k} of {t}?")
}

/// Every resume of one conversation of T turns, each by the next of
/// `agents` in turn; with a clock, the store's share of each.
#[derive(Default)]
struct Conversation {
    resumes: Vec<Duration>,
    /// Per resume, with --detail: where its time went.
    spent: Vec<Spent>,
    /// Per resume, with --detail: its last `step-finish` written as JSON
    /// (untimed in the resume): how long that took, and its bytes.
    step_finish_json: Vec<(Duration, usize)>,
}

impl Conversation {
    async fn run(
        agents: &[Agent],
        t: usize,
        clock: Option<&ResumeClock>,
        into: &mut Conversation,
    ) -> anyhow::Result<()> {
        let first = run::start(&agents[0]).await?;
        first.expect_question(&question(1, t))?;
        let run_id = first.run_id;
        for k in 1..=t {
            let before = clock.map(ResumeClock::read);
            let resumed = run::resume(&agents[k % agents.len()], &run_id, &format!("answer-{k}")).await?;
            if k < t {
                resumed.expect_question(&question(k + 1, t))?;
            } else {
                resumed.expect_text(&format!("Deploying to User answered: answer-{t}."))?;
            }
            into.resumes.push(resumed.elapsed);
            if let (Some(clock), Some(before)) = (clock, before) {
                into.spent.push(clock.read() - before);
                if let Some(chunk) = &resumed.last_step_finish {
                    let started = Instant::now();
                    let json = serde_json::to_vec(chunk)?;
                    into.step_finish_json.push((started.elapsed(), json.len()));
                }
            }
        }
        Ok(())
    }
}

/// Stops at the first wrong step (`ok` 0), reporting what was measured.
pub async fn long(target: &Target, t: usize) -> anyhow::Result<Report> {
    let environment = Environment::prepare(target, Workload::Long(t)).await?;
    let clock = target.detail.then(|| Arc::new(ResumeClock::default()));
    let warm_agent = environment.timed_agent(clock.clone()).await?;
    let mut failures = Failures::default();
    let mut warm = Conversation::default();
    let mut cold = Conversation::default();

    let started = Instant::now();
    let result = async {
        Conversation::run(std::slice::from_ref(&warm_agent), t, clock.as_deref(), &mut warm).await?;
        let cold_agents = [
            environment.timed_agent(clock.clone()).await?,
            environment.timed_agent(clock.clone()).await?,
        ];
        Conversation::run(&cold_agents, t, clock.as_deref(), &mut cold).await
    }
    .await;
    let total = started.elapsed();
    let ok = match result {
        Ok(()) => 1,
        Err(err) => {
            failures.push(err);
            0
        }
    };

    let resume_ms_at = medians_at(t, &warm.resumes);
    if target.detail {
        for (detail, conversation) in [("long", &warm), ("long cold", &cold)] {
            let column = |f: &dyn Fn(&Spent) -> Duration| {
                ResumePoints(medians_at(t, &conversation.spent.iter().map(f).collect::<Vec<_>>()))
            };
            let rest: Vec<Duration> = conversation
                .resumes
                .iter()
                .zip(&conversation.spent)
                .map(|(resume, spent)| resume.saturating_sub(spent.row + spent.messages + spent.model))
                .collect();
            let detail = Detail {
                detail,
                resume_ms_at: ResumePoints(medians_at(t, &conversation.resumes)),
                store_row_ms_at: column(&|spent| spent.row),
                store_row_read_ms_at: column(&|spent| spent.row_read),
                store_messages_ms_at: column(&|spent| spent.messages),
                model_ms_at: column(&|spent| spent.model),
                rest_ms_at: ResumePoints(medians_at(t, &rest)),
                step_finish_json_ms_at: ResumePoints(medians_at(
                    t,
                    &conversation
                        .step_finish_json
                        .iter()
                        .map(|(took, _)| *took)
                        .collect::<Vec<_>>(),
                )),
                step_finish_kb_at: ResumePoints(
                    points(t)
                        .into_iter()
                        .filter_map(|point| {
                            let (_, bytes) = conversation.step_finish_json.get(point - 1)?;
                            Some((point, (*bytes as f64 / 102.4).round() / 10.0))
                        })
                        .collect(),
                ),
            };
            eprintln!("{}", serde_json::to_string(&detail)?);
        }
    }
    let figures = Figures {
        implementation: IMPL,
        mode: "long",
        t,
        resume_ms_at: ResumePoints(resume_ms_at),
        cold_resume_ms_at: ResumePoints(medians_at(t, &cold.resumes)),
        total_s: measure::secs(total),
        db_bytes: environment.db_bytes(),
        peak_rss_mb: measure::peak_rss_mb(),
        ok,
    };
    drop(warm_agent);
    Report::new(&figures, failures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_leave_out_turns_past_the_last() {
        assert_eq!(points(1000), vec![1, 10, 100, 1000]);
        assert_eq!(points(12), vec![1, 10, 12]);
        assert_eq!(points(10), vec![1, 10]);
        assert_eq!(points(1), vec![1]);
    }

    #[test]
    fn windows_hold_five_turns_inside_the_run() {
        assert_eq!(window(1, 1000), 1..=5);
        assert_eq!(window(10, 1000), 8..=12);
        assert_eq!(window(1000, 1000), 996..=1000);
        assert_eq!(window(12, 12), 8..=12);
        assert_eq!(window(1, 3), 1..=3);
        assert_eq!(window(3, 3), 1..=3);
    }
}
