//! Mastra's `memory` on the routes that start and continue runs:
//! `memory: {thread: string | {id, title?, metadata?}, resource,
//! options?: {lastMessages, readOnly}}`, and the deprecated top-level
//! `threadId` with `resourceId`. The resource is checked against the
//! caller before anything is read.

use askloop::ThreadOptions;
use serde_json::{Map, Value};

use crate::auth::Caller;
use crate::error::ApiError;

/// The thread a stream or generate request asks its run to be on, taken out
/// of the body's other fields (`fields`), with the caller's right to its
/// resource checked; `label` is the top-level `threadId`, which names a
/// thread only together with `resourceId`.
pub(crate) fn thread_options(
    fields: &mut Map<String, Value>,
    label: Option<&str>,
    caller: &Caller,
) -> Result<Option<ThreadOptions>, ApiError> {
    let memory = fields.remove("memory").filter(|v| !v.is_null());
    let resource = take_resource(fields)?;
    let options = match (memory, resource, label) {
        (Some(memory), _, _) => Some(from_memory(memory)?),
        (None, Some(resource), Some(thread)) => Some(ThreadOptions::new(resource, thread)),
        (None, Some(_), None) => {
            return Err(refused(
                "resourceId",
                "a resource names a thread only with `threadId`; send `memory: {thread, resource}`",
            ));
        }
        (None, None, _) => None,
    };
    if let Some(options) = &options {
        caller.check_resource(&options.key.resource_id)?;
    }
    Ok(options.map(|o| o.by(caller.author())))
}

/// `memory` on a decision (resume, approve, decline): the run goes on on
/// the thread it started on, so the field changes nothing, but a caller may
/// not name another's resource in it.
pub(crate) fn decision_memory(fields: &mut Map<String, Value>, caller: &Caller) -> Result<(), ApiError> {
    let memory = fields.remove("memory").filter(|v| !v.is_null());
    let resource = take_resource(fields)?;
    let named = match memory {
        Some(memory) => Some(from_memory(memory)?.key.resource_id),
        None => resource,
    };
    match named {
        Some(resource) => caller.check_resource(&resource),
        None => Ok(()),
    }
}

fn take_resource(fields: &mut Map<String, Value>) -> Result<Option<String>, ApiError> {
    match fields.remove("resourceId").filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(Value::String(resource)) => Ok(Some(resource)),
        Some(_) => Err(refused("resourceId", "must be a string")),
    }
}

const MEMORY_SHAPE: &str =
    "`memory` is {thread: \"id\" or {id, title?, metadata?}, resource: \"id\", options?: {lastMessages?}}";

fn from_memory(memory: Value) -> Result<ThreadOptions, ApiError> {
    let bad = |detail: &str| refused("memory", &format!("{detail}; {MEMORY_SHAPE}"));
    let Value::Object(mut memory) = memory else {
        return Err(bad("is not an object"));
    };
    let resource = match memory.remove("resource") {
        Some(Value::String(resource)) => resource,
        Some(_) => return Err(bad("`resource` is not a string")),
        None => return Err(bad("`resource` is missing")),
    };
    let (thread, title, metadata) = match memory.remove("thread") {
        Some(Value::String(thread)) => (thread, None, None),
        Some(Value::Object(mut thread)) => {
            let Some(Value::String(id)) = thread.remove("id") else {
                return Err(bad("`thread.id` is missing or not a string"));
            };
            let title = match thread.remove("title") {
                None | Some(Value::Null) => None,
                Some(Value::String(title)) => Some(title),
                Some(_) => return Err(bad("`thread.title` is not a string")),
            };
            let metadata = thread.remove("metadata").filter(|m| !m.is_null());
            if let Some(key) = thread.keys().next() {
                return Err(bad(&format!("`thread.{key}` is not taken")));
            }
            (id, title, metadata)
        }
        Some(_) => return Err(bad("`thread` is not a string or an object")),
        None => return Err(bad("`thread` is missing")),
    };
    let mut options = ThreadOptions::new(resource, thread);
    options.title = title;
    options.metadata = metadata;
    match memory.remove("options") {
        None | Some(Value::Null) => {}
        Some(Value::Object(given)) => {
            for (key, value) in given {
                match (key.as_str(), value) {
                    (_, Value::Null) => {}
                    ("lastMessages", Value::Number(n)) if n.as_u64().is_some_and(|n| n <= 10_000) => {
                        options.last_messages = n.as_u64().and_then(|n| u32::try_from(n).ok());
                    }
                    ("lastMessages", Value::Bool(false)) => options.last_messages = Some(0),
                    ("lastMessages", _) => {
                        return Err(bad(
                            "`options.lastMessages` is a whole number from 0 to 10000, or false",
                        ));
                    }
                    ("readOnly", Value::Bool(false)) => {}
                    ("readOnly", _) => {
                        return Err(bad(
                            "`options.readOnly: true` is not supported yet: a run on a thread appends its messages to it",
                        ));
                    }
                    (other, _) => {
                        return Err(bad(&format!(
                            "`options.{other}` is not supported (working memory and semantic recall are not there yet); \
                             the options taken are lastMessages and readOnly (false)"
                        )));
                    }
                }
            }
        }
        Some(_) => return Err(bad("`options` is not an object")),
    }
    if let Some(key) = memory.keys().next() {
        return Err(bad(&format!("`{key}` is not taken")));
    }
    Ok(options)
}

fn refused(field: &str, reason: &str) -> ApiError {
    ApiError::refused(field, reason)
}
