//! Threads: runs that start from a thread and append to it in the same
//! write as their steps, listings, edits and deletion.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;

use askloop::{
    Message, RunMemory, RunQuery, RunStatus, RunStore, StoreError, Thread, ThreadDeletion, ThreadEdit, ThreadKey,
    ThreadQuery, ThreadStore,
};
use chrono::Duration;
use serde_json::json;

use super::Subject;
use super::cases::{base_time, new_run, step, user};

fn threads(s: &Subject) -> &dyn ThreadStore {
    s.store.thread_store().expect("the store keeps threads")
}

fn key(resource: &str, thread: &str) -> ThreadKey {
    ThreadKey::new(resource, thread)
}

/// Creates run `run_id` of `agent` on `thread`, starting from `context`
/// messages of the thread and `own` messages of its own.
async fn run_on(store: &dyn RunStore, run_id: &str, thread: &ThreadKey, context: usize, own: &[&str]) {
    let mut messages: Vec<Message> = (0..context).map(|i| user(&format!("context {i}"))).collect();
    messages.extend(own.iter().map(|text| user(text)));
    let mut run = new_run(run_id, "agent", base_time(), messages.len());
    run.memory = Some(RunMemory {
        key: thread.clone(),
        context: context as i64,
    });
    store.create(&run, &messages).await.unwrap();
}

async fn texts(s: &Subject, thread: &ThreadKey) -> Vec<String> {
    threads(s)
        .thread_messages(thread, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|m| match m.message {
            Message::User { content } => content,
            Message::Assistant { content, .. } => content,
            other => format!("{other:?}"),
        })
        .collect()
}

/// A run on a new thread creates it; its messages after its context, then each step's, are appended numbered by the thread.
pub async fn a_run_on_a_thread_creates_it_and_appends_its_own_messages_after_its_context(s: &Subject) {
    let thread = key("ana", "t1");
    s.clock.set(base_time());
    run_on(s.store.as_ref(), "r1", &thread, 2, &["deploy it"]).await;
    let stored = threads(s).thread(&thread).await.unwrap().expect("created by the run");
    assert_eq!(
        (
            stored.id.as_str(),
            stored.resource_id.as_str(),
            stored.agent_id.as_str()
        ),
        ("t1", "ana", "agent")
    );
    assert_eq!((stored.title.as_str(), stored.message_count), ("", 1));
    let first = threads(s).thread_messages(&thread, 0, 10).await.unwrap();
    assert_eq!(
        first.len(),
        1,
        "the context is the thread's already, not appended again"
    );
    assert_eq!((first[0].seq, first[0].run_id.as_str(), first[0].run_seq), (0, "r1", 2));
    assert_eq!(first[0].message, user("deploy it"));
    assert_eq!(first[0].id(), "r1-2");

    let later = base_time() + Duration::seconds(5);
    s.clock.set(later);
    let reply = [Message::assistant("Which environment?", vec![]), user("staging")];
    s.store
        .update(step("r1", 0, RunStatus::Suspended, &[], &reply))
        .await
        .unwrap();
    let all = threads(s).thread_messages(&thread, 0, 10).await.unwrap();
    let places: Vec<(i64, i64)> = all.iter().map(|m| (m.seq, m.run_seq)).collect();
    assert_eq!(places, vec![(0, 2), (1, 3), (2, 4)]);
    assert_eq!(all[1].message, reply[0]);
    let stored = threads(s).thread(&thread).await.unwrap().unwrap();
    assert_eq!(stored.message_count, 3);
    assert_eq!(
        stored.updated_at,
        super::cases::at(later),
        "an append is a write of the thread"
    );
    let run = s.store.get("r1").await.unwrap().unwrap();
    assert_eq!(run.memory.as_ref().map(|m| (&m.key, m.context)), Some((&thread, 2)));
    assert_eq!(run.message_count, 5, "the run keeps its context with its own messages");
}

/// A step written again at a stale version is refused and appends nothing more.
pub async fn a_step_retried_after_a_lost_write_appends_once(s: &Subject) {
    let thread = key("ana", "t1");
    run_on(s.store.as_ref(), "r1", &thread, 0, &["hello"]).await;
    let reply = [Message::assistant("hi", vec![])];
    s.store
        .update(step("r1", 0, RunStatus::Completed, &[], &reply))
        .await
        .unwrap();
    let again = s.store.update(step("r1", 0, RunStatus::Completed, &[], &reply)).await;
    assert!(matches!(again, Err(StoreError::Conflict { .. })), "{again:?}");
    assert_eq!(texts(s, &thread).await, vec!["hello", "hi"]);
    assert_eq!(threads(s).thread(&thread).await.unwrap().unwrap().message_count, 2);
}

/// Ten runs creating and writing one thread at once leave one dense sequence.
pub async fn runs_appending_to_one_thread_at_once_never_collide(s: &Subject) {
    let thread = key("ana", "busy");
    let mut creates = Vec::new();
    for i in 0..10 {
        let store = s.store.clone();
        let thread = thread.clone();
        creates.push(tokio::spawn(async move {
            run_on(store.as_ref(), &format!("r{i}"), &thread, 0, &[&format!("ask {i}")]).await;
            let reply = [
                Message::assistant(format!("reply {i}"), vec![]),
                Message::assistant(format!("more {i}"), vec![]),
            ];
            store
                .update(step(&format!("r{i}"), 0, RunStatus::Completed, &[], &reply))
                .await
                .unwrap();
        }));
    }
    for create in creates {
        create.await.unwrap();
    }
    let all = threads(s).thread_messages(&thread, 0, 100).await.unwrap();
    let seqs: Vec<i64> = all.iter().map(|m| m.seq).collect();
    assert_eq!(seqs, (0..30).collect::<Vec<_>>(), "one dense sequence");
    let ids: HashSet<String> = all.iter().map(|m| m.id()).collect();
    assert_eq!(ids.len(), 30);
    for i in 0..10 {
        let of_run: Vec<i64> = all
            .iter()
            .filter(|m| m.run_id == format!("r{i}"))
            .map(|m| m.run_seq)
            .collect();
        assert_eq!(of_run, vec![0, 1, 2], "each run's messages in its order");
    }
    assert_eq!(threads(s).thread(&thread).await.unwrap().unwrap().message_count, 30);
}

/// Threads are keyed by resource and id, edited, and listed newest first by resource and agent.
pub async fn threads_are_created_read_edited_listed_and_counted_by_resource_and_agent(s: &Subject) {
    let t0 = base_time();
    let ts = threads(s);
    for (i, (resource, id, agent)) in [
        ("ana", "a1", "assistant"),
        ("ana", "a2", "approver"),
        ("ana", "a3", "assistant"),
        ("bo", "a1", "assistant"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut thread = Thread::new(&key(resource, id), agent, t0 + Duration::seconds(i as i64));
        thread.title = format!("{resource} {id}");
        ts.create_thread(&thread).await.unwrap();
    }
    let again = ts.create_thread(&Thread::new(&key("ana", "a1"), "assistant", t0)).await;
    assert!(matches!(again, Err(StoreError::ThreadExists { .. })), "{again:?}");
    assert_eq!(
        ts.thread(&key("bo", "a1")).await.unwrap().unwrap().title,
        "bo a1",
        "the same id under another resource is another thread"
    );
    assert_eq!(ts.thread(&key("cy", "a1")).await.unwrap(), None);

    let listed = |q: ThreadQuery| async move {
        ts.threads(&q)
            .await
            .unwrap()
            .into_iter()
            .map(|t| format!("{} {}", t.resource_id, t.id))
            .collect::<Vec<_>>()
    };
    let of_ana = ThreadQuery {
        resource_id: Some("ana".into()),
        ..ThreadQuery::default()
    };
    assert_eq!(
        listed(of_ana.clone()).await,
        vec!["ana a3", "ana a2", "ana a1"],
        "newest first"
    );
    let of_ana_assistant = ThreadQuery {
        agent_id: Some("assistant".into()),
        ..of_ana.clone()
    };
    assert_eq!(listed(of_ana_assistant.clone()).await, vec!["ana a3", "ana a1"]);
    let page = ThreadQuery {
        offset: 1,
        limit: Some(1),
        ..of_ana.clone()
    };
    assert_eq!(listed(page.clone()).await, vec!["ana a2"]);
    assert_eq!(ts.count_threads(&of_ana).await.unwrap(), 3);
    assert_eq!(ts.count_threads(&of_ana_assistant).await.unwrap(), 2);
    assert_eq!(ts.count_threads(&page).await.unwrap(), 1);
    assert_eq!(ts.count_threads(&ThreadQuery::default()).await.unwrap(), 4);
    let by_id = ThreadQuery {
        thread_id: Some("a1".into()),
        ..ThreadQuery::default()
    };
    assert_eq!(
        listed(by_id.clone()).await,
        vec!["bo a1", "ana a1"],
        "a thread id of every resource"
    );
    assert_eq!(ts.count_threads(&by_id).await.unwrap(), 2);
    let of_ana_by_id = ThreadQuery {
        resource_id: Some("ana".into()),
        ..by_id
    };
    assert_eq!(listed(of_ana_by_id).await, vec!["ana a1"]);

    let later = t0 + Duration::minutes(3);
    s.clock.set(later);
    let metadata = json!({"purpose": "check", "step": 2});
    let edited = ts
        .update_thread(
            &key("ana", "a1"),
            ThreadEdit {
                title: Some("renamed"),
                metadata: Some(&metadata),
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!((edited.title.as_str(), &edited.metadata), ("renamed", &metadata));
    assert_eq!(edited.updated_at, super::cases::at(later));
    assert_eq!(edited.created_at, super::cases::at(t0), "created stays");
    assert_eq!(ts.thread(&key("ana", "a1")).await.unwrap().unwrap(), edited);
    let title_only = ts
        .update_thread(
            &key("ana", "a1"),
            ThreadEdit {
                title: Some("again"),
                metadata: None,
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(title_only.metadata, metadata, "metadata not given is kept");
    assert_eq!(
        ts.update_thread(&key("cy", "a1"), ThreadEdit::default()).await.unwrap(),
        None
    );
    assert_eq!(
        ts.thread(&key("bo", "a1")).await.unwrap().unwrap().title,
        "bo a1",
        "untouched"
    );
}

/// A thread's messages are read from any sequence number.
pub async fn a_threads_messages_are_read_from_any_place_by_sequence(s: &Subject) {
    let thread = key("ana", "long");
    let own: Vec<String> = (0..25).map(|i| format!("m{i}")).collect();
    let own: Vec<&str> = own.iter().map(String::as_str).collect();
    run_on(s.store.as_ref(), "r1", &thread, 0, &own).await;
    let thread = &thread;
    let read = |from: i64, limit: u32| async move {
        threads(s)
            .thread_messages(thread, from, limit)
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.seq)
            .collect::<Vec<_>>()
    };
    assert_eq!(read(20, 10).await, vec![20, 21, 22, 23, 24]);
    assert_eq!(read(0, 3).await, vec![0, 1, 2]);
    assert_eq!(read(25, 10).await, Vec::<i64>::new());
    assert_eq!(
        threads(s).thread_messages(&key("bo", "long"), 0, 10).await.unwrap(),
        Vec::new(),
        "another resource's thread of that id holds nothing"
    );
}

/// The first messages of many threads are read at once, each with its
/// thread's key: a thread without messages, one that does not exist and
/// another resource's thread of the same id give nothing of theirs.
pub async fn the_first_messages_of_many_threads_are_read_at_once(s: &Subject) {
    for i in 0..450 {
        let own = [format!("first of {i}"), format!("second of {i}")];
        let own: Vec<&str> = own.iter().map(String::as_str).collect();
        run_on(
            s.store.as_ref(),
            &format!("r{i}"),
            &key("ana", &format!("t{i}")),
            0,
            &own,
        )
        .await;
    }
    run_on(s.store.as_ref(), "theirs", &key("bo", "t1"), 0, &["bo's own"]).await;
    let empty = Thread::new(&key("ana", "empty"), "agent", base_time());
    threads(s).create_thread(&empty).await.unwrap();
    // More keys than one SQLite statement takes variables for.
    let mut asked: Vec<ThreadKey> = (0..450).rev().map(|i| key("ana", &format!("t{i}"))).collect();
    asked.extend([key("ana", "empty"), key("ana", "missing"), key("ana", "t1")]);
    let mut found: Vec<(String, String, i64)> = threads(s)
        .first_messages(&asked)
        .await
        .unwrap()
        .into_iter()
        .map(|(key, first)| {
            let Message::User { content } = first.message else {
                panic!("{first:?}")
            };
            (key.thread_id, content, first.seq)
        })
        .collect();
    found.sort();
    found.dedup();
    let mut expected: Vec<(String, String, i64)> = (0..450)
        .map(|i| (format!("t{i}"), format!("first of {i}"), 0))
        .collect();
    expected.sort();
    assert_eq!(found, expected);
    assert!(threads(s).first_messages(&[]).await.unwrap().is_empty());
}

/// Runs are listed and counted by their thread, or by any thread of a resource.
pub async fn runs_are_listed_by_their_thread_and_by_resource(s: &Subject) {
    run_on(s.store.as_ref(), "r1", &key("ana", "t1"), 0, &["a"]).await;
    run_on(s.store.as_ref(), "r2", &key("ana", "t2"), 0, &["b"]).await;
    run_on(s.store.as_ref(), "r3", &key("bo", "t1"), 0, &["c"]).await;
    s.store
        .create(&new_run("plain", "agent", base_time(), 1), &[user("d")])
        .await
        .unwrap();
    let ids = |thread: ThreadKey| async move {
        let mut ids: Vec<String> = s
            .store
            .list(&RunQuery {
                thread: Some(thread.clone()),
                ..RunQuery::default()
            })
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.run_id)
            .collect();
        ids.sort();
        let count = s
            .store
            .count(&RunQuery {
                thread: Some(thread),
                ..RunQuery::default()
            })
            .await
            .unwrap();
        assert_eq!(count, ids.len() as u64, "counted as listed");
        ids
    };
    assert_eq!(ids(key("ana", "t1")).await, vec!["r1"]);
    assert_eq!(ids(key("bo", "t1")).await, vec!["r3"]);
    assert_eq!(
        ids(key("ana", "")).await,
        vec!["r1", "r2"],
        "an empty thread id: any of the resource"
    );
    assert_eq!(ids(key("cy", "t1")).await, Vec::<String>::new());
}

/// A listing walled to some resources holds the runs that belong to them (on one of their threads, or started for one of them on no thread) and nothing else, not even runs of no resource, page after page, and counts only them; the resource a run on no thread was started for is read back with it, at layout 8.
pub async fn runs_walled_to_resources_are_listed_paged_and_counted_within_the_wall(s: &Subject) {
    run_on(s.store.as_ref(), "r1", &key("ana", "t1"), 0, &["a"]).await;
    run_on(s.store.as_ref(), "r2", &key("bo", "t1"), 0, &["b"]).await;
    run_on(s.store.as_ref(), "r3", &key("ana", "t2"), 0, &["c"]).await;
    run_on(s.store.as_ref(), "r4", &key("cy", "t1"), 0, &["d"]).await;
    for plain in ["r5", "r6"] {
        s.store
            .create(&new_run(plain, "agent", base_time(), 1), &[user("e")])
            .await
            .unwrap();
    }
    for (id, resource) in [("r7", "ana"), ("r8", "bo")] {
        let mut owned = new_run(id, "agent", base_time(), 1);
        owned.resource_id = Some(resource.to_owned());
        s.store.create(&owned, &[user("f")]).await.unwrap();
        let stored = s.store.get(id).await.unwrap().unwrap();
        assert_eq!(stored.resource_id.as_deref(), Some(resource), "read back");
        assert_eq!(stored.resource(), Some(resource));
        assert_eq!(
            stored.schema_version(),
            8,
            "a run on no thread with a resource is layout 8"
        );
    }
    let walled = |resources: &[&str]| RunQuery {
        resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
        ..RunQuery::default()
    };
    // Listed newest first; all were created at once, so by id, descending.
    let listed = |query: RunQuery| async move {
        let ids: Vec<String> = s
            .store
            .list(&query)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.run_id)
            .collect();
        let count = s.store.count(&query).await.unwrap();
        assert_eq!(count, ids.len() as u64, "counted as listed: {query:?}");
        ids
    };
    assert_eq!(listed(walled(&["ana"])).await, vec!["r7", "r3", "r1"]);
    assert_eq!(listed(walled(&["bo", "cy"])).await, vec!["r8", "r4", "r2"]);
    assert_eq!(
        listed(walled(&[])).await,
        Vec::<String>::new(),
        "walled to no resource: nothing, not even the runs of no resource"
    );
    assert_eq!(
        listed(walled(&["nobody", "bo\0"])).await,
        Vec::<String>::new(),
        "a resource on no run (one with NUL too) adds nothing"
    );
    assert_eq!(listed(RunQuery::default()).await.len(), 8, "unwalled: every run");
    assert_eq!(
        listed(RunQuery {
            thread: Some(key("ana", "")),
            ..walled(&["bo"])
        })
        .await,
        Vec::<String>::new(),
        "a resource's threads outside the wall hold nothing"
    );

    // Page after page, seeking past the previous page's last run.
    let mut seen = Vec::new();
    let mut query = RunQuery {
        limit: Some(1),
        ..walled(&["bo"])
    };
    loop {
        let page = s.store.list(&query).await.unwrap();
        let Some(last) = page.last() else { break };
        query.after = Some(askloop::RunCursor::after_created(last));
        seen.extend(page.into_iter().map(|r| r.run_id));
    }
    assert_eq!(seen, vec!["r8", "r2"]);
    // A count with a limit and an offset counts within the wall too.
    let counted = s
        .store
        .count(&RunQuery {
            limit: Some(10),
            offset: 1,
            ..walled(&["ana"])
        })
        .await
        .unwrap();
    assert_eq!(counted, 2);
}

/// A thread with an unfinished run is not deleted; once all are finished, it goes with its messages and runs.
pub async fn deleting_a_thread_deletes_its_messages_and_runs_unless_one_is_unfinished(s: &Subject) {
    let thread = key("ana", "t1");
    let other = key("ana", "t2");
    run_on(s.store.as_ref(), "done", &thread, 0, &["one"]).await;
    s.store
        .update(step(
            "done",
            0,
            RunStatus::Completed,
            &[],
            &[Message::assistant("ok", vec![])],
        ))
        .await
        .unwrap();
    run_on(s.store.as_ref(), "waiting", &thread, 0, &["two"]).await;
    s.store
        .update(step("waiting", 0, RunStatus::Suspended, &[], &[]))
        .await
        .unwrap();
    run_on(s.store.as_ref(), "elsewhere", &other, 0, &["three"]).await;

    let busy = threads(s).delete_thread(&thread).await.unwrap();
    assert_eq!(
        busy,
        ThreadDeletion::Busy {
            runs: vec!["waiting".into()]
        }
    );
    assert!(threads(s).thread(&thread).await.unwrap().is_some(), "nothing deleted");
    assert!(s.store.get("done").await.unwrap().is_some());

    let waiting = s.store.get("waiting").await.unwrap().unwrap();
    s.store
        .update(step("waiting", waiting.version, RunStatus::Cancelled, &[], &[]))
        .await
        .unwrap();
    assert_eq!(
        threads(s).delete_thread(&thread).await.unwrap(),
        ThreadDeletion::Deleted
    );
    assert_eq!(threads(s).thread(&thread).await.unwrap(), None);
    assert_eq!(threads(s).thread_messages(&thread, 0, 10).await.unwrap(), vec![]);
    assert_eq!(s.store.get("done").await.unwrap(), None, "its runs are gone");
    assert_eq!(s.store.get("waiting").await.unwrap(), None);
    assert_eq!(s.store.messages("done").await.unwrap(), vec![], "with their messages");
    assert!(
        s.store.get("elsewhere").await.unwrap().is_some(),
        "another thread's run stays"
    );
    assert_eq!(texts(s, &other).await, vec!["three"]);
    assert_eq!(
        threads(s).delete_thread(&thread).await.unwrap(),
        ThreadDeletion::NotFound
    );

    // A thread that was never written to is deleted too, and a new run may
    // start it again.
    run_on(s.store.as_ref(), "again", &thread, 0, &["fresh"]).await;
    assert_eq!(texts(s, &thread).await, vec!["fresh"]);
    assert_eq!(threads(s).thread(&thread).await.unwrap().unwrap().message_count, 1);
}
